/* slab.c — fixed-size host records (block and chunk records) carved from malloc'd slabs.
 *
 * Records are handed out from a free list in O(1) and never returned to malloc one by one; the
 * slabs go back together when the owner is destroyed. No operation of a pool calls malloc except
 * when a slab runs out.
 */
#include "rap_internal.h"

#include <stdlib.h>

void rapi_slab_init(rapi_slab *s, size_t object_size, size_t per_slab) {
  s->free_list = NULL;
  s->slabs = NULL;
  s->object_size = rapi_align_up(object_size < sizeof(void *) ? sizeof(void *) : object_size,
                                 sizeof(void *));
  s->per_slab = per_slab;
  s->live = 0;
}

void *rapi_slab_alloc_slow(rapi_slab *s) {
  /* One header pointer links the slab, then per_slab records. Records whose size is a multiple of
   * a cache line start on one, so that no two share a line (ThreadCache's, written by many
   * threads). */
  size_t header = rapi_align_up(sizeof(void *), 16);
  size_t line = s->object_size % 64 == 0 ? 64 : 0;
  char *slab = rapi_malloc(header + line + s->object_size * s->per_slab);
  if (slab == NULL) return NULL;
  *(void **)slab = s->slabs;
  s->slabs = slab;
  char *first = line ? (char *)rapi_align_up((uintptr_t)(slab + header), line) : slab + header;
  for (size_t i = s->per_slab; i-- > 1;) {
    void *obj = first + i * s->object_size;
    *(void **)obj = s->free_list;
    s->free_list = obj;
  }
  s->live++;
  return first;
}

void rapi_slab_destroy(rapi_slab *s) {
  void *slab = s->slabs;
  while (slab != NULL) {
    void *next = *(void **)slab;
    free(slab);
    slab = next;
  }
  s->slabs = s->free_list = NULL;
  s->live = 0;
}
