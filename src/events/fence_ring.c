/* fence_ring.c — one resource's recorded fences, oldest first (fence_ring.h). */
#include "events/fence_ring.h"

#include <stdlib.h>

int rapi_fence_ring_record(rapi_fence_ring *fr, rap_resource *r, uint64_t batch,
                           const rap_allocator *self) {
  if (fr->count == fr->cap) {
    size_t cap = fr->cap ? fr->cap * 2 : 8;
    rapi_fence *f = rapi_malloc(cap * sizeof *f);
    if (f == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for events",
                                    rap_allocator_name(self));
    for (size_t i = 0; i < fr->count; i++) f[i] = fr->f[(fr->head + i) % fr->cap];
    free(fr->f);
    fr->f = f;
    fr->head = 0;
    fr->cap = cap;
  }
  rapi_event *ev;
  int st = rapi_resource_record(r, &ev);
  if (st != RAP_OK) return st;
  fr->f[(fr->head + fr->count++) % fr->cap] = (rapi_fence){batch, ev};
  return RAP_OK;
}

int rapi_fence_ring_query(rapi_fence_ring *fr, rap_resource *r, uint64_t *done) {
  while (fr->count > 0) {
    rapi_fence *f = &fr->f[fr->head];
    int q = r->ops->query(f->ev);
    if (q < 0) return q;
    if (q == 0) break;
    *done = f->batch;
    r->ops->event_release(f->ev);
    fr->head = (fr->head + 1) % fr->cap;
    fr->count--;
  }
  return RAP_OK;
}

rapi_event *rapi_fence_ring_find(const rapi_fence_ring *fr, uint64_t batch) {
  for (size_t i = 0; i < fr->count; i++) {
    const rapi_fence *f = &fr->f[(fr->head + i) % fr->cap];
    if (f->batch >= batch) return f->ev;
  }
  return NULL;
}

void rapi_fence_ring_fini(rapi_fence_ring *fr, rap_resource *r) {
  for (size_t i = 0; i < fr->count; i++) r->ops->event_release(fr->f[(fr->head + i) % fr->cap].ev);
  free(fr->f);
  *fr = (rapi_fence_ring){0};
}
