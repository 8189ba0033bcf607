/* trace_read.h — a trace written by RAP_TRACE, read back into memory for rap-trace.
 *
 * The reader knows the flat objects rap writes (docs/trace.md): string, number, true/false/null
 * values, no nesting. Unknown fields are skipped, unknown events kept as TE_OTHER, and a line that
 * is no object is counted and skipped, so a trace cut short by a crash still reads. Reading is
 * linear in the file: names and the refused deallocations are found by hashing, and what is kept
 * grows with what the trace holds (events, distinct names), never with the values in it.
 */
#ifndef RAP_TRACE_READ_H
#define RAP_TRACE_READ_H

#include <stddef.h>
#include <stdint.h>

enum te_kind {
  TE_ALLOC, TE_DEALLOC, TE_REFUSED, TE_OOM, TE_PENDING, TE_READY, TE_REUSE, TE_FENCE, TE_WAIT,
  TE_GROW, TE_RELEASE, TE_STEP, TE_OTHER, TE_KINDS
};
extern const char *const te_kind_names[TE_KINDS];

typedef struct te {
  uint64_t t;          /* ns since the trace began */
  uint64_t p;          /* the pointer, 0 if none */
  uint64_t n;          /* bytes (for fence: blocks) */
  uint64_t level;      /* grow/release: "held"; pending/ready/reuse: "pb" */
  int64_t r;           /* resource id, -1 for null */
  uint32_t th;
  uint16_t a;          /* index into trace.names */
  uint8_t kind;
  int8_t d;            /* depth of a call, -1 when the event has none */
  uint8_t rk;          /* index into trace.kinds */
  uint8_t skip;        /* a deallocation that was refused (a 'refused' line follows it) */
  uint8_t in_place;    /* grow/release: at a chunk's end ("in_place":true), not a whole chunk */
  uint32_t site;       /* alloc: where it was made, trace.sites[site - 1]; 0: no frames */
} te;

/* A map from a pointer and two small numbers (allocator, thread) to a value (uthash). */
struct kmap_item;
typedef struct kmap {
  struct kmap_item *items;
  size_t n;
} kmap;

/* Where an allocation was made: its "stack" (RAP_TRACE_STACK) and its "pystack" (an interpreter's
 * frames, rap_trace_set_pystack), each 1 + its index in trace.stacks, 0 where the line has none. */
typedef struct trace_site {
  uint32_t stack, pystack;
} trace_site;

struct name_ix;
typedef struct trace {
  te *ev;
  size_t n, cap;
  char **names;        /* allocator names */
  size_t nnames, names_cap;
  struct name_ix *name_index;   /* names by string (uthash) */
  char **stacks;       /* the distinct "stack" and "pystack" strings, as written (JSON-escaped) */
  size_t nstacks, stacks_cap;
  struct name_ix *stack_index;
  trace_site *sites;   /* the distinct pairs of them */
  size_t nsites, sites_cap;
  kmap site_index;
  char *kinds[16];     /* resource kinds */
  size_t nkinds;
  size_t bad_lines;
  char version[32];
} trace;

/* 0, or -1 with a sentence in err (and nothing to free). */
int  trace_load(const char *path, trace *t, char *err, size_t cap);
void trace_free(trace *t);
/* The allocator index of a name, or -1. */
int  trace_name(const trace *t, const char *name);

/* A map from pointers to a value (open addressing; 0 is no key). */
typedef struct pmap {
  uint64_t *keys;
  uint64_t *vals;
  size_t cap, n;
} pmap;
int       pmap_put(pmap *m, uint64_t key, uint64_t val);   /* 0, or -1 out of memory */
uint64_t *pmap_get(pmap *m, uint64_t key);
int       pmap_del(pmap *m, uint64_t key, uint64_t *val);  /* 1 if it was there */
void      pmap_free(pmap *m);

/* Room for one more element of size bytes in the array *v, n of *cap used (grown by doubling):
 * 0, or -1 out of memory (*v unchanged). */
int       trace_room(void **v, size_t *cap, size_t n, size_t size);

int       kmap_put(kmap *m, uint64_t p, uint32_t a, uint32_t b, uint64_t val);   /* 0, or -1 out of memory */
uint64_t *kmap_get(kmap *m, uint64_t p, uint32_t a, uint32_t b);
int       kmap_del(kmap *m, uint64_t p, uint32_t a, uint32_t b, uint64_t *val);  /* 1 if it was there */
void      kmap_free(kmap *m);

#endif
