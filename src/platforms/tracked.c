/* tracked.c — the tracked body of the platform allocators and pass-through wrappers, and HOST.
 *
 * A platform allocator hands out raw memory and remembers every live pointer with its size, so that
 * it can answer rap_allocator_find, refuse a double free or a foreign pointer, and report leaks.
 * The map is locked per allocator: many pools over one platform may run on many threads. Wrappers
 * on this body (Fault, SizeLimiter) call their parent under that lock, noted with rapi_lock so that
 * a pool below that must block the host lets it go meanwhile.
 */
#include "rap_internal.h"

#include <stdlib.h>
#include <string.h>

int rapi_tracked_init(rapi_tracked *p, rap_allocator *self, void *impl,
                      int (*raw_alloc)(rapi_tracked *, void **, size_t, rap_resource *),
                      int (*raw_free)(rapi_tracked *, void *, size_t, rap_resource *),
                      bool pass_through, size_t alignment) {
  if (pthread_mutex_init(&p->lock, NULL) != 0) {
    free(impl);
    return rapi_fail(RAP_ERR_BACKEND, "%s: pthread_mutex_init failed", rap_allocator_name(self));
  }
  if (rapi_map_init(&p->map) != RAP_OK) {
    pthread_mutex_destroy(&p->lock);
    free(impl);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  }
  rapi_slab_init(&p->recs, sizeof(rapi_prec), 256);
  p->self = self;
  p->impl = impl;
  p->raw_alloc = raw_alloc;
  p->raw_free = raw_free;
  p->pass_through = pass_through;
  self->counts_calls = !pass_through;
  rap_allocator_set_alignment(self, alignment);
  return RAP_OK;
}

void rapi_tracked_fini(rap_allocator *self, void *state) {
  rapi_tracked *p = state;
  rapi_prec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&p->map, &i)) != NULL;) {
    int st = p->raw_free(p, rec->ptr, rec->bytes, NULL);
    if (st != RAP_OK)
      rap_log(RAP_LOG_WARN, "%s: freeing %p at teardown failed: %s", rap_allocator_name(self),
              rec->ptr, rap_last_error());
  }
  rapi_map_fini(&p->map);
  rapi_slab_destroy(&p->recs);
  pthread_mutex_destroy(&p->lock);
  free(p->impl);
}

int rapi_tracked_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  rapi_tracked *p = state;
  void *ptr = NULL;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  if (rapi_map_reserve(&p->map) != RAP_OK) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for the pointer map",
                     rap_allocator_name(p->self));
  }
  /* Zero bytes: still a unique pointer. A wrapper passes the request on as asked: its parent
   * (a pool, or a platform) makes the unique pointer, and counts what the user asked for. */
  size_t raw = bytes || p->pass_through ? bytes : 1;
  int st = p->raw_alloc(p, &ptr, raw, r);
  if (st != RAP_OK) {
    rapi_unlock(&held);
    return st;
  }
  /* A pool below may have let this lock go while it waited (rapi_host_wait): the record and the
   * map's room are taken only now, so that nobody meanwhile saw a half-made entry, and if host
   * memory ran out the bytes go back rather than be lost track of. */
  rapi_prec *rec = rapi_map_reserve(&p->map) == RAP_OK ? rapi_slab_alloc(&p->recs) : NULL;
  if (rec == NULL) {
    p->raw_free(p, ptr, bytes, r);
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for block records",
                     rap_allocator_name(p->self));
  }
  rec->ptr = ptr;
  rec->bytes = bytes;
  rapi_map_insert(&p->map, ptr, rec);
  p->raw_allocs++;
  p->current += bytes;
  p->actual += raw;
  p->count++;
  if (p->current > p->hwm) p->hwm = p->current;
  if (p->actual > p->actual_hwm) p->actual_hwm = p->actual;
  rapi_unlock(&held);
  *out = ptr;
  return RAP_OK;
}

int rapi_tracked_deallocate(void *state, void *ptr, rap_resource *r) {
  rapi_tracked *p = state;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  rapi_prec *rec = rapi_map_find(&p->map, ptr);
  if (rec == NULL) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER,
                     "rap_deallocate('%s'): %p is not a live block of this allocator (double free, "
                     "interior or foreign pointer)", rap_allocator_name(p->self), ptr);
  }
  int st = p->raw_free(p, ptr, rec->bytes, r);
  if (st == RAP_OK) {
    p->raw_frees++;
    rapi_map_remove(&p->map, ptr);
    p->current -= rec->bytes;
    p->actual -= rec->bytes || p->pass_through ? rec->bytes : 1;
    p->count--;
    rapi_slab_free(&p->recs, rec);
  }
  rapi_unlock(&held);
  return st;
}

int rapi_tracked_reset_peaks(void *state) {
  rapi_tracked *p = state;
  pthread_mutex_lock(&p->lock);
  p->hwm = p->current;
  p->actual_hwm = p->actual;
  pthread_mutex_unlock(&p->lock);
  return RAP_OK;
}

int rapi_tracked_stats(void *state, rap_stats *out) {
  rapi_tracked *p = state;
  pthread_mutex_lock(&p->lock);
  out->current_bytes = p->current;
  out->high_watermark = p->hwm;
  out->actual_bytes = p->actual;
  out->actual_high_watermark = p->actual_hwm;
  out->allocation_count = p->count;
  out->block_count = p->count;
  out->used_bytes = p->actual;
  out->maps = p->raw_allocs;
  out->unmaps = p->raw_frees;
  pthread_mutex_unlock(&p->lock);
  return RAP_OK;
}

int rapi_tracked_owns(void *state, const void *ptr) {
  rapi_tracked *p = state;
  pthread_mutex_lock(&p->lock);
  int owns = rapi_map_find(&p->map, ptr) != NULL;
  pthread_mutex_unlock(&p->lock);
  return owns;
}

int rapi_tracked_check(void *state) {
  rapi_tracked *p = state;
  pthread_mutex_lock(&p->lock);
  size_t n = 0, bytes = 0;
  const rapi_prec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&p->map, &i)) != NULL;) {
    n++;
    bytes += rec->bytes;
  }
  int ok = n == p->count && bytes == p->current && p->recs.live == n;
  pthread_mutex_unlock(&p->lock);
  if (!ok)
    return rapi_fail(RAP_ERR_CORRUPT, "%s: the pointer map holds %zu blocks of %zu bytes, the "
                     "counters say %zu of %zu", rap_allocator_name(p->self), n, bytes, p->count,
                     p->current);
  return RAP_OK;
}

/* ---- HOST ------------------------------------------------------------------------------------ */

static int host_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  (void)r;   /* host memory is not stream-ordered: any resource may have it at once */
  /* No object may exceed PTRDIFF_MAX; asking malloc anyway aborts under sanitizers. */
  void *ptr = bytes <= (size_t)PTRDIFF_MAX ? malloc(bytes) : NULL;
  if (ptr == NULL) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return rapi_fail(RAP_ERR_NOMEM, "%s: the host has no %s to give (malloc failed)",
                     rap_allocator_name(p->self), sz);
  }
  *out = ptr;
  return RAP_OK;
}

static int host_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)p;
  (void)r;
  (void)bytes;
  free(ptr);
  return RAP_OK;
}

/* HOST's record: host memory, and nothing to remember per instance. */
static const rapi_platform host_record = {.memory = RAPI_MEMORY_HOST, .device = -1};

static int host_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)opts;
  self->platform = &host_record;
  /* 16: what glibc's malloc guarantees on 64-bit targets */
  return rapi_tracked_init(state, self, NULL, host_raw_alloc, host_raw_free, false, 16);
}

const rap_strategy rapi_host_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = "HOST",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = host_init,
    RAPI_TRACKED_METHODS,
};

/* ---- the optional calls, answered alike by platforms and by wrappers (which pass them on) -- */

/* A platform tracks no resources; a wrapper passes the question on. */
int rapi_tracked_record_resource(void *state, void *ptr, rap_resource *r) {
  rapi_tracked *p = state;
  if (!p->pass_through)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_record_resource('%s'): %s does not track resources",
                     rap_allocator_name(p->self), rap_allocator_strategy(p->self));
  if (!rapi_tracked_owns(state, ptr))
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_record_resource('%s'): %p is not a live block",
                     rap_allocator_name(p->self), ptr);
  return rap_record_resource(rap_allocator_parent(p->self), ptr, r);
}

int rapi_tracked_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  rapi_tracked *p = state;
  if (ptr == NULL || !rapi_tracked_owns(state, ptr))
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource('%s'): %p is not a live block",
                     rap_allocator_name(p->self), ptr);
  if (!p->pass_through) {
    *out = &rap_allocator_manager(p->self)->host;   /* raw memory belongs to no stream */
    return RAP_OK;
  }
  return rap_pointer_resource(rap_allocator_parent(p->self), ptr, out);
}

int rapi_tracked_release(void *state) {
  rapi_tracked *p = state;
  return p->pass_through ? rap_release(rap_allocator_parent(p->self)) : RAP_OK;
}
