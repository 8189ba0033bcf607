/* batch_clock.h — one resource's batches as a pool counts them: whether the resource has passed
 * the point where a block was freed, at the cost of one event per batch.
 *
 * What a pool frees on a resource carries the clock's open batch (rapi_clock_stamp). Fencing the
 * open batch records one event on the resource (its fence ring) and opens the next; a batch has
 * passed once a query finds its fence completed (done moves up to it), and on the host resource
 * (sync) every batch has passed at once. Another resource that may not wait on the host asks for
 * the event of a batch (rapi_clock_event) and queues a wait on it. The ResourceAwarePool and
 * Planned keep one clock per resource they serve; what each does while a resource captures a
 * graph (no event may be recorded then) is its own, so the clock does not look.
 */
#ifndef RAP_EVENTS_BATCH_CLOCK_H
#define RAP_EVENTS_BATCH_CLOCK_H

#include "events/fence_ring.h"

typedef struct rapi_batch_clock {
  bool sync;                      /* the host: every batch has passed */
  bool dirty;                     /* something carries the open batch */
  uint64_t open, done;            /* batches <= done have passed; open is not fenced yet */
  rapi_fence_ring fences;         /* recorded batches not known to have passed */
} rapi_batch_clock;

/* A new clock for r: batch 1 open, nothing passed (everything, on a resource with no events). */
static inline void rapi_clock_init(rapi_batch_clock *c, const rap_resource *r) {
  *c = (rapi_batch_clock){.sync = r->ops->record == NULL, .open = 1};
}

static inline bool rapi_clock_passed(const rapi_batch_clock *c, uint64_t batch) {
  return c->sync || batch <= c->done;
}

/* The batch that something freed now carries: the open one, which a fence must now cover. */
static inline uint64_t rapi_clock_stamp(rapi_batch_clock *c) {
  c->dirty = !c->sync;
  return c->open;
}

/* The resource was synchronized: every batch, the open one too, has passed. */
static inline void rapi_clock_pass_all(rapi_batch_clock *c) {
  c->done = c->open;
  c->dirty = false;
}

/* Moves done past every fence that has completed, oldest first (a negative status: the backend's). */
static inline int rapi_clock_query(rapi_batch_clock *c, rap_resource *r) {
  return rapi_fence_ring_query(&c->fences, r, &c->done);
}

/* The newest fence's event (the one covering every recorded batch), or NULL: none recorded. */
static inline rapi_event *rapi_clock_newest(const rapi_batch_clock *c) {
  return rapi_fence_ring_newest(&c->fences);
}

/* Records one event on r fencing the open batch, where something carries it, and opens the next;
 * traced as a "fence" line of self's, count naming the blocks the batch holds. */
int rapi_clock_fence(rapi_batch_clock *c, rap_resource *r, const rap_allocator *self, size_t count);
/* For a resource that waits for batch: *ev the event to wait on, or NULL where the batch has passed.
 * RAP_ERR_BUSY (no sentence) where no event covers it: the open batch is fenced by the pool first
 * (rapi_clock_fence, with what the pool does while its resource captures a graph). */
int rapi_clock_event(const rapi_batch_clock *c, uint64_t batch, rapi_event **ev);
/* Gives every event back to r; the clock is left empty. */
void rapi_clock_fini(rapi_batch_clock *c, rap_resource *r);

#endif /* RAP_EVENTS_BATCH_CLOCK_H */
