/* stream_ordered.c — StreamOrdered: CUDA's stream-ordered allocator (cudaMallocFromPoolAsync and
 * cudaFreeAsync) as a rap allocator, over the device's default memory pool or a pool it creates.
 *
 *   StreamOrdered(device=0, pool=default|new, release_threshold=SIZE|max,
 *                 follow_event_dependencies=0|1, allow_opportunistic=0|1,
 *                 allow_internal_dependencies=0|1, peers=all|1+3)
 *
 * A block allocated on a cuda resource is allocated on its stream and, freed without a resource,
 * freed on that stream; freed on a resource, on that one's stream (CUDA's own rule: the free is
 * ordered after the work queued there). The host resource (or none) means the legacy default
 * stream, synchronized after an allocation so that the block is ready for any use, as a host
 * caller expects. Other resource kinds are refused. Allocations on a stream that is being captured
 * into a CUDA graph become the graph's memory nodes (CUDA does this itself). rap_release trims the
 * pool (cudaMemPoolTrimTo 0); stats read the pool's reserved and used attributes. Safe for
 * concurrent callers (one lock). Only the CUDA build has it: elsewhere making one answers
 * RAP_ERR_UNSUPPORTED with a sentence.
 */
#include "rap_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

typedef struct so_rec {
  void *ptr;
  size_t bytes;
  cudaStream_t stream;
  rap_resource *r;                 /* NULL: the legacy stream */
} so_rec;

typedef struct stream_ordered {
  pthread_mutex_t lock;
  rap_allocator *self;
  cudaMemPool_t pool;
  bool created;                    /* pool=new: destroyed with the allocator */
  bool locked;                     /* the lock and the slab are made */
  int device;
  rapi_ptr_map map;
  rapi_slab recs;
  size_t current, hwm, count;
  rapi_watch_set watched;          /* the streams of live blocks, so that their destroy tells */
  rapi_platform platform;          /* what the chain above inherits (rap_internal.h) */
} stream_ordered;

static int cuda_fail(const stream_ordered *s, const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "%s: %s: %s",
                   rap_allocator_name(s->self), call, cudaGetErrorString(e));
}

/* The stream a call on r runs on; RAP_ERR_INVALID for a resource that is no stream. */
static int stream_of(stream_ordered *s, rap_resource *r, cudaStream_t *out) {
  if (r == NULL || strcmp(rap_resource_kind(r), "host") == 0) {
    *out = cudaStreamLegacy;
    return RAP_OK;
  }
  if (strcmp(rap_resource_kind(r), "cuda") != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: StreamOrdered allocates on cuda resources or the host, "
                     "not on a %s resource", rap_allocator_name(s->self), rap_resource_kind(r));
  *out = rap_resource_cuda_stream(r);
  return RAP_OK;
}

static int so_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  stream_ordered *s = state;
  cudaStream_t stream;
  int st = stream_of(s, r, &stream);
  if (st != RAP_OK) return st;
  bool host = stream == cudaStreamLegacy;
  rapi_held held;
  rapi_lock(&s->lock, &held);
  so_rec *rec = NULL;
  if ((st = rapi_map_reserve(&s->map)) != RAP_OK || (rec = rapi_slab_alloc(&s->recs)) == NULL) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a record", rap_allocator_name(s->self));
  }
  if (!host && (st = rapi_watch_set_add(&s->watched, r, s->self)) != RAP_OK) {
    rapi_slab_free(&s->recs, rec);
    rapi_unlock(&held);
    return st;
  }
  void *ptr = NULL;
  /* Zero bytes: one byte, so that the pointer is unique and valid as the contract says. */
  cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes ? bytes : 1, s->pool, stream);
  if (e == cudaSuccess && host && (e = cudaStreamSynchronize(cudaStreamLegacy)) != cudaSuccess)
    (void)cudaFreeAsync(ptr, stream);   /* not handed out: given back on its stream */
  if (e != cudaSuccess) {
    rapi_slab_free(&s->recs, rec);
    rapi_unlock(&held);
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return cuda_fail(s, host ? "cudaMallocFromPoolAsync on the legacy stream" : "cudaMallocFromPoolAsync",
                     e);
  }
  *rec = (so_rec){ptr, bytes, stream, host ? NULL : r};
  rapi_map_insert(&s->map, ptr, rec);
  s->current += bytes;
  s->count++;
  if (s->current > s->hwm) s->hwm = s->current;
  rapi_unlock(&held);
  *out = ptr;
  return RAP_OK;
}

static int so_deallocate(void *state, void *ptr, rap_resource *r) {
  stream_ordered *s = state;
  cudaStream_t stream = cudaStreamLegacy;
  int st = r != NULL ? stream_of(s, r, &stream) : RAP_OK;
  if (st != RAP_OK) return st;
  rapi_held held;
  rapi_lock(&s->lock, &held);
  so_rec *rec = rapi_map_find(&s->map, ptr);
  if (rec == NULL) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_deallocate('%s'): %p is not a live block of it",
                     rap_allocator_name(s->self), ptr);
  }
  if (r == NULL) stream = rec->stream;
  cudaError_t e = cudaFreeAsync(ptr, stream);
  if (e != cudaSuccess) {
    rapi_unlock(&held);
    return cuda_fail(s, "cudaFreeAsync", e);
  }
  rapi_map_remove(&s->map, ptr);
  s->current -= rec->bytes;
  s->count--;
  rapi_slab_free(&s->recs, rec);
  rapi_unlock(&held);
  return RAP_OK;
}

static size_t attr(stream_ordered *s, enum cudaMemPoolAttr which) {
  uint64_t v = 0;
  if (cudaMemPoolGetAttribute(s->pool, which, &v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return (size_t)v;
}

/* CUDA resets a pool's high attributes to the current values when they are set to zero. */
static int so_reset_peaks(void *state) {
  stream_ordered *s = state;
  pthread_mutex_lock(&s->lock);
  s->hwm = s->current;
  pthread_mutex_unlock(&s->lock);
  uint64_t zero = 0;
  cudaError_t e = cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReservedMemHigh, &zero);
  if (e == cudaSuccess) e = cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrUsedMemHigh, &zero);
  return e == cudaSuccess ? RAP_OK : cuda_fail(s, "cudaMemPoolSetAttribute", e);
}

static int so_stats(void *state, rap_stats *out) {
  stream_ordered *s = state;
  pthread_mutex_lock(&s->lock);
  memset(out, 0, sizeof *out);
  out->current_bytes = s->current;
  out->high_watermark = s->hwm;
  out->allocation_count = s->count;
  out->block_count = s->count;
  pthread_mutex_unlock(&s->lock);
  /* The pool's own figures: a default pool's count every user of the device's default pool. */
  out->actual_bytes = attr(s, cudaMemPoolAttrReservedMemCurrent);
  out->actual_high_watermark = attr(s, cudaMemPoolAttrReservedMemHigh);
  out->used_bytes = attr(s, cudaMemPoolAttrUsedMemCurrent);
  out->free_bytes = out->actual_bytes > out->used_bytes ? out->actual_bytes - out->used_bytes : 0;
  out->releasable_bytes = out->free_bytes;
  return RAP_OK;
}

static int so_owns(void *state, const void *ptr) {
  stream_ordered *s = state;
  return rapi_map_contains_shared(&s->map, ptr);
}

static int so_release(void *state) {
  stream_ordered *s = state;
  cudaError_t e = cudaMemPoolTrimTo(s->pool, 0);
  return e == cudaSuccess ? RAP_OK : cuda_fail(s, "cudaMemPoolTrimTo", e);
}

static int so_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  stream_ordered *s = state;
  pthread_mutex_lock(&s->lock);
  so_rec *rec = rapi_map_find(&s->map, ptr);
  if (rec != NULL) *out = rec->r != NULL ? rec->r : &rap_allocator_manager(s->self)->host;
  pthread_mutex_unlock(&s->lock);
  return rec != NULL ? RAP_OK
                     : rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource('%s'): %p is not a "
                                 "live block of it", rap_allocator_name(s->self), ptr);
}

/* r is going: it has been synchronized, so its blocks' allocations are done; a later free without
 * a resource goes to the legacy stream. Nothing to refuse: the blocks stay valid. */
static int so_resource_gone(void *state, rap_resource *r, int commit) {
  stream_ordered *s = state;
  if (!commit) return RAP_OK;
  pthread_mutex_lock(&s->lock);   /* other threads may be allocating on other streams */
  for (size_t i = 0; i <= s->map.mask; i++) {
    so_rec *rec = s->map.slots[i].value;
    if (s->map.slots[i].key != 0 && rec->r == r) {
      rec->r = NULL;
      rec->stream = cudaStreamLegacy;
    }
  }
  rapi_watch_set_forget(&s->watched, r, s->self);
  pthread_mutex_unlock(&s->lock);
  return RAP_OK;
}

static int so_check(void *state) {
  stream_ordered *s = state;
  pthread_mutex_lock(&s->lock);
  size_t n = 0, bytes = 0;
  for (size_t i = 0; i <= s->map.mask; i++)
    if (s->map.slots[i].key != 0) {
      n++;
      bytes += ((so_rec *)s->map.slots[i].value)->bytes;
    }
  bool ok = n == s->count && bytes == s->current;
  pthread_mutex_unlock(&s->lock);
  return ok ? RAP_OK
            : rapi_fail(RAP_ERR_CORRUPT, "%s: the map holds %zu blocks of %zu bytes, the counters "
                        "say %zu of %zu", rap_allocator_name(s->self), n, bytes, s->count, s->current);
}

static void so_fini(rap_allocator *self, void *state) {
  stream_ordered *s = state;
  (void)self;
  if (s->map.slots != NULL)
    for (size_t i = 0; i <= s->map.mask; i++)
      if (s->map.slots[i].key != 0) {   /* leaked blocks: freed on their streams */
        so_rec *rec = s->map.slots[i].value;
        (void)cudaFreeAsync(rec->ptr, rec->stream);
      }
  rapi_watch_set_clear(&s->watched, s->self);
  /* A created pool with frees still in flight is released by CUDA once they are done. */
  if (s->created && s->pool != NULL) (void)cudaMemPoolDestroy(s->pool);
  (void)cudaGetLastError();
  rapi_map_fini(&s->map);
  rapi_slab_destroy(&s->recs);
  pthread_mutex_destroy(&s->lock);
}

static int set_reuse(stream_ordered *s, rap_options *opts, const char *key, enum cudaMemPoolAttr which) {
  uint64_t v = 0;
  if (!rapi_options_given(opts, key)) return RAP_OK;   /* absent: leave the pool's */
  int st = rap_options_get_uint(opts, key, &v);
  if (st != RAP_OK) return st;
  if (v > 1)
    return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' is 0 or 1", rap_allocator_name(s->self), key);
  int on = (int)v;
  cudaError_t e = cudaMemPoolSetAttribute(s->pool, which, &on);
  return e == cudaSuccess ? RAP_OK : cuda_fail(s, "cudaMemPoolSetAttribute", e);
}

static int so_init_steps(rap_allocator *self, stream_ordered *s, rap_options *opts);

/* The manager does not call fini when init fails: what init made is undone here. */
static int so_init(rap_allocator *self, void *state, rap_options *opts) {
  stream_ordered *s = state;
  s->self = self;
  int st = so_init_steps(self, s, opts);
  if (st != RAP_OK) {
    if (s->created && s->pool != NULL) (void)cudaMemPoolDestroy(s->pool);
    (void)cudaGetLastError();
    if (s->map.slots != NULL) rapi_map_fini(&s->map);
    if (s->locked) {
      rapi_slab_destroy(&s->recs);
      pthread_mutex_destroy(&s->lock);
    }
    memset(s, 0, sizeof *s);
  }
  return st;
}

static int so_init_steps(rap_allocator *self, stream_ordered *s, rap_options *opts) {
  uint64_t device = 0;
  const char *pool = "default", *threshold = NULL;
  int st = rap_options_get_uint(opts, "device", &device);
  if (st == RAP_OK) st = rap_options_get_string(opts, "pool", &pool);
  if (st == RAP_OK) st = rap_options_get_string(opts, "release_threshold", &threshold);
  if (st != RAP_OK) return st;
  if (strcmp(pool, "default") != 0 && strcmp(pool, "new") != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'pool' is 'default' (the device's) or 'new', not "
                     "'%s'", rap_allocator_name(self), pool);
  uint64_t max_threshold = UINT64_MAX;
  size_t limit = 0;
  if (threshold != NULL && strcmp(threshold, "max") != 0 && rapi_parse_size(threshold, &limit) != RAP_OK)
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'release_threshold' is a size or 'max', not '%s'",
                     rap_allocator_name(self), threshold);
  if ((st = rapi_gpu_device_exists(self, device)) != RAP_OK) return st;
  s->device = (int)device;
  int supported = 0;
  cudaError_t e = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, s->device);
  if (e != cudaSuccess) return cuda_fail(s, "cudaDeviceGetAttribute", e);
  if (!supported)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: device %d has no stream-ordered memory pools",
                     rap_allocator_name(self), s->device);
  if (strcmp(pool, "new") == 0) {
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = s->device;
    e = cudaMemPoolCreate(&s->pool, &props);
    if (e != cudaSuccess) return cuda_fail(s, "cudaMemPoolCreate", e);
    s->created = true;
  } else {
    e = cudaDeviceGetDefaultMemPool(&s->pool, s->device);
    if (e != cudaSuccess) return cuda_fail(s, "cudaDeviceGetDefaultMemPool", e);
  }
  if (pthread_mutex_init(&s->lock, NULL) != 0)
    return rapi_fail(RAP_ERR_BACKEND, "%s: pthread_mutex_init failed", rap_allocator_name(self));
  rapi_slab_init(&s->recs, sizeof(so_rec), 256);
  s->locked = true;
  if (rapi_map_init(&s->map) != RAP_OK)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  if (threshold != NULL) {
    uint64_t v = strcmp(threshold, "max") == 0 ? max_threshold : (uint64_t)limit;
    e = cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReleaseThreshold, &v);
    if (e != cudaSuccess) return cuda_fail(s, "cudaMemPoolSetAttribute(release threshold)", e);
  }
  if ((st = set_reuse(s, opts, "follow_event_dependencies", cudaMemPoolReuseFollowEventDependencies)) != RAP_OK ||
      (st = set_reuse(s, opts, "allow_opportunistic", cudaMemPoolReuseAllowOpportunistic)) != RAP_OK ||
      (st = set_reuse(s, opts, "allow_internal_dependencies", cudaMemPoolReuseAllowInternalDependencies)) != RAP_OK)
    return st;
  rap_allocator_set_alignment(self, 256);
  s->platform = (rapi_platform){.root = self, .memory = RAPI_MEMORY_DEVICE,
                                .source = RAPI_SOURCE_STREAM_ORDERED, .device = s->device,
                                .capture_ok = true, .peer = rapi_stream_ordered_peer};
  self->platform = &s->platform;
  self->devices_ok = rapi_device_bit(s->device);
  return rapi_gpu_peers_option(self, s->device, opts);
}

/* A peer's access to the pool's memory: every block of the pool, now and later (a default pool's
 * access is the device's, for every user of that pool). */
int rapi_stream_ordered_peer(rap_allocator *a, int device, int enable) {
  stream_ordered *s = a->state;
  struct cudaMemAccessDesc desc;
  memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = device;
  desc.flags = enable ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
  cudaError_t e = cudaMemPoolSetAccess(s->pool, &desc, 1);
  return e == cudaSuccess ? RAP_OK : cuda_fail(s, "cudaMemPoolSetAccess", e);
}

const rap_strategy rapi_stream_ordered_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "StreamOrdered",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(stream_ordered),
    .init = so_init,
    .fini = so_fini,
    .allocate = so_allocate,
    .deallocate = so_deallocate,
    .stats = so_stats,
    .reset_peaks = so_reset_peaks,
    .owns = so_owns,
    .release = so_release,
    .check = so_check,
    .pointer_resource = so_pointer_resource,
    .resource_gone = so_resource_gone,
};

#else /* no CUDA backend: the name is known, and says why it cannot be made */

#if RAP_HAVE_HIP
#define SO_BUILD "this is a HIP build"
#else
#define SO_BUILD "this rap was built without CUDA"
#endif

static int so_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)state;
  (void)opts;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: StreamOrdered is CUDA's stream-ordered allocator, and "
                   SO_BUILD, rap_allocator_name(self));
}

int rapi_stream_ordered_peer(rap_allocator *a, int device, int enable) {
  (void)device;
  (void)enable;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: " SO_BUILD, rap_allocator_name(a));
}

/* The tracked body's methods: never reached, since making one fails (as no_cuda.c's platforms). */
const rap_strategy rapi_stream_ordered_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "StreamOrdered",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = so_init,
    RAPI_TRACKED_METHODS,
};
#endif
