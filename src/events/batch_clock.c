/* batch_clock.c — one resource's batches as a pool counts them (batch_clock.h). */
#include "events/batch_clock.h"

int rapi_clock_fence(rapi_batch_clock *c, rap_resource *r, const rap_allocator *self, size_t count) {
  if (c->sync || !c->dirty) return RAP_OK;
  int st = rapi_fence_ring_record(&c->fences, r, c->open, self);
  if (st != RAP_OK) return st;
  RAPI_TRACE("fence", self, r, NULL, count, ",\"batch\":%llu", (unsigned long long)c->open);
  c->open++;
  c->dirty = false;
  return RAP_OK;
}

int rapi_clock_event(const rapi_batch_clock *c, uint64_t batch, rapi_event **ev) {
  *ev = NULL;
  if (rapi_clock_passed(c, batch)) return RAP_OK;
  *ev = rapi_fence_ring_find(&c->fences, batch);
  return *ev != NULL ? RAP_OK : RAP_ERR_BUSY;
}

void rapi_clock_fini(rapi_batch_clock *c, rap_resource *r) {
  rapi_fence_ring_fini(&c->fences, r);
}
