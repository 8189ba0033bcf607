/* trace_plan.h — a placement for the recurring allocations of a training iteration, made from a
 * trace (rap-trace plan; the format of the plan file is in docs/trace.md).
 *
 * The user's calls of one allocator are cut into iterations (by `step` lines where the trace has
 * them, else by the period of the allocation sequence's (size, stream) signature); each allocation
 * of one reference iteration is an entry with a lifetime on the iteration's cyclic clock (counted
 * in allocations), and the entries that recur are placed in one arena so that no two whose
 * lifetimes meet share an address (greedy placement in the address x time plane, the best of a
 * few orders). A plan stays within the bounds of plan_file.h (src/strategies/), those the Planned
 * strategy's reader checks: what would pass one is refused, with a sentence.
 */
#ifndef RAP_TRACE_PLAN_H
#define RAP_TRACE_PLAN_H

#include "plan_file.h"
#include "trace_read.h"

#include <stdio.h>

#define PLAN_NONE UINT64_MAX   /* an entry that is not placed: the strategy's parent serves it */

typedef struct plan_entry {
  uint64_t min, max;      /* the sizes it was seen with (requested bytes) */
  uint64_t offset;        /* in the arena, or PLAN_NONE */
  uint64_t start, end;    /* lifetime: allocated at position start of the iteration, freed before
                             allocation end (end > start; end >= period: in the next iteration);
                             end is PLAN_NONE when the trace never frees it */
  uint32_t stream;        /* the domain's streams, numbered by first appearance */
} plan_entry;

typedef struct plan_domain {
  char *name;             /* the allocator's name in the trace */
  plan_entry *e;          /* one iteration, in allocation order */
  size_t n;               /* entries = the period */
  size_t streams, iterations, first;   /* iterations seen, and where the reference one starts */
  size_t placed;          /* entries with an offset */
  uint64_t alignment, arena;
  uint64_t live_peak;     /* the most bytes of placed entries live at once: arena's lower bound */
  int by_steps;           /* the iterations came from step lines */
  const char *order;      /* the placement order that won */
} plan_domain;

typedef struct plan_opts {
  uint64_t alignment;     /* placement granule, a power of two (256 unless told) */
  size_t skip_iterations; /* iterations to pass over before the reference one (0) */
  int dynamic;            /* place entries whose size varies by more than half (off: the parent
                             serves them, as the plan says) */
} plan_opts;

/* Builds the plan of allocator a (an index into t->names). 0, or -1 with a sentence in err: among
 * others where the plan would pass a bound of plan_file.h (an empty or long name, more streams or
 * entries, an arena or an entry larger than a plan holds, an alignment Planned does not read). */
int  plan_build(const trace *t, int a, const plan_opts *o, plan_domain *out, char *err, size_t cap);
void plan_domain_free(plan_domain *d);
/* Whether the file of these domains stays within RAPI_PLAN_MAX_FILE bytes (counted from above, by
 * lines and entries): 0, or -1 with a sentence. */
int  plan_check_file(const plan_domain *d, size_t nd, char *err, size_t cap);
/* Writes the domains (each built by plan_build) as one plan file; 0, or -1 (errno set by stdio). */
int  plan_write(FILE *f, const plan_domain *d, size_t nd);

/* The period of a signature sequence: the shift d under which it repeats (at most one in five
 * mismatching) over the longest stretch, counted as the run plus d, or 0 when nothing repeats for
 * half a period. With life (each element's lifetime, in elements; may be NULL) the share of a
 * period's elements that end within it comes first. *start: where that repetition begins. */
size_t plan_period(const uint64_t *sig, const uint64_t *life, size_t n, size_t *start);

#endif
