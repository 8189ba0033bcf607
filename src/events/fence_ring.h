/* fence_ring.h — one resource's recorded fences, oldest first: the pools' way to know which of a
 * resource's batches have passed.
 *
 * A pool numbers the batches of blocks a resource frees and records one event on the resource for
 * a batch (a fence); the events complete in order, so the ring is queried from its oldest fence
 * and stops at the first one still pending. The ResourceAwarePool and Planned keep one ring per
 * resource. The ring does not hold its resource: every call that records, queries or releases
 * events is given it.
 */
#ifndef RAP_EVENTS_FENCE_RING_H
#define RAP_EVENTS_FENCE_RING_H

#include "rap_internal.h"

typedef struct rapi_fence {
  uint64_t batch;                 /* every batch up to this one has passed once ev has */
  rapi_event *ev;
} rapi_fence;

typedef struct rapi_fence_ring {  /* zeroed: empty */
  rapi_fence *f;
  size_t head, count, cap;
} rapi_fence_ring;

/* Records an event on r fencing batch, growing the ring first (RAP_ERR_NOMEM naming self). */
int rapi_fence_ring_record(rapi_fence_ring *fr, rap_resource *r, uint64_t batch,
                           const rap_allocator *self);
/* Gives every completed fence's event back, oldest first, moving *done to its batch; stops at the
 * first pending one. A negative status is the backend's error. */
int rapi_fence_ring_query(rapi_fence_ring *fr, rap_resource *r, uint64_t *done);
/* The event of the oldest fence covering batch, or NULL where none is recorded yet. */
rapi_event *rapi_fence_ring_find(const rapi_fence_ring *fr, uint64_t batch);
/* Gives every event back to r and frees the ring; it is left empty. */
void rapi_fence_ring_fini(rapi_fence_ring *fr, rap_resource *r);

/* The newest fence's event (the one covering every recorded batch), or NULL when empty. */
static inline rapi_event *rapi_fence_ring_newest(const rapi_fence_ring *fr) {
  return fr->count > 0 ? fr->f[(fr->head + fr->count - 1) % fr->cap].ev : NULL;
}

#endif /* RAP_EVENTS_FENCE_RING_H */
