/* planned.h — what the Planned strategy (planned.c) and its plan reader (planned_load.c) share.
 *
 * A plan is one iteration's allocations in order, each with the sizes it matches and its place in
 * one arena (docs/trace.md has the file). The reader also cuts the arena into cells: the pieces
 * between every entry's start and end, so that an entry covers cells c0 .. c1-1 and the strategy
 * can tell, cell by cell, whether anything still uses its bytes.
 */
#ifndef RAP_PLANNED_H
#define RAP_PLANNED_H

#include "plan_file.h"
#include "rap_internal.h"

#define RAPI_PLAN_NONE UINT64_MAX   /* an entry without a place: the parent serves it */

typedef struct rapi_plan_entry {
  uint64_t min, max;      /* requested bytes it matches */
  uint64_t off;           /* in the arena, or RAPI_PLAN_NONE */
  uint32_t stream;        /* the plan's stream, < streams */
  uint32_t c0, c1;        /* its cells */
} rapi_plan_entry;

typedef struct rapi_plan {
  rapi_plan_entry *e;
  size_t n, streams, ncells;
  uint64_t alignment, arena;
} rapi_plan;

/* Reads the domain named domain (NULL: the file's only one) of the plan file at path. RAP_OK, or
 * RAP_ERR_NOT_FOUND (no such file or domain) / RAP_ERR_INVALID (not a plan, damaged, inconsistent)
 * / RAP_ERR_NOMEM, each with a sentence that starts with who. */
int  rapi_plan_load(const char *path, const char *domain, const char *who, rapi_plan *out);
void rapi_plan_free(rapi_plan *p);

#endif /* RAP_PLANNED_H */
