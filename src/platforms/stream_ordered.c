/* stream_ordered.c — StreamOrdered: CUDA's stream-ordered allocator (cudaMallocFromPoolAsync and
 * cudaFreeAsync) as a rap allocator, over the device's default memory pool or a pool it creates.
 *
 *   StreamOrdered(device=0, pool=default|new, release_threshold=SIZE|max,
 *                 follow_event_dependencies=0|1, allow_opportunistic=0|1,
 *                 allow_internal_dependencies=0|1, peers=all|1+3, export=posix|none)
 *
 * A block allocated on a cuda resource is allocated on its stream and, freed without a resource,
 * freed on that stream; freed on a resource, on that one's stream (CUDA's own rule: the free is
 * ordered after the work queued there). The host resource (or none) means the legacy default
 * stream, synchronized after an allocation so that the block is ready for any use, as a host
 * caller expects. Other resource kinds are refused. Allocations on a stream that is being captured
 * into a CUDA graph become the graph's memory nodes (CUDA does this itself). rap_release trims the
 * pool (cudaMemPoolTrimTo 0); stats read the pool's reserved and used attributes. Safe for
 * concurrent callers (one lock). export=posix (pool=new only) makes the pool with POSIX file
 * descriptor handles, so that blocks of a ResourceAwarePool over it go to other processes through
 * CUDA's pool IPC (ipc.c; the importer's calls are at the end of this file). Only the CUDA build
 * has it: elsewhere making one answers RAP_ERR_UNSUPPORTED with a sentence.
 */
#include "platforms/vmm.h"   /* memory across processes (ipc.c), the platforms' options */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

typedef struct so_rec {
  void *ptr;
  size_t bytes;
  cudaStream_t stream;
  rap_resource *r;                 /* NULL: the legacy stream */
  uint64_t id;                     /* export=: names the allocation to importers */
  bool exported;                   /* export=: data holds cudaMemPoolExportPointer's */
  unsigned char data[64];
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
  int export_fd;                   /* export=posix: the pool's shareable handle, else -1 */
  rapi_ipc_export *ipc;            /* export=posix: the shared table importers read (ipc.c) */
  uint64_t next_id;
  so_rec **by_addr;                /* export=posix: the live allocations in address order */
  size_t naddr, addr_cap;
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

/* ---- export=posix: where a block lies ------------------------------------------------------------
 * An exporting pool keeps its live allocations in address order, so that a block of a pool over it
 * finds its allocation by a binary search (an exporting pool holds few, large allocations: the
 * chunks of the pool over it). */

static int index_reserve(stream_ordered *s) {
  if (s->naddr < s->addr_cap) return RAP_OK;
  size_t cap = s->addr_cap ? 2 * s->addr_cap : 64;
  so_rec **more = rapi_realloc(s->by_addr, cap * sizeof *more);
  if (more == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a record", rap_allocator_name(s->self));
  s->by_addr = more;
  s->addr_cap = cap;
  return RAP_OK;
}

/* The number of allocations that start at or below p. */
static size_t index_upper(const stream_ordered *s, const char *p) {
  size_t lo = 0, hi = s->naddr;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((const char *)s->by_addr[mid]->ptr <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void index_insert(stream_ordered *s, so_rec *rec) {
  size_t i = index_upper(s, rec->ptr);
  memmove(&s->by_addr[i + 1], &s->by_addr[i], (s->naddr - i) * sizeof *s->by_addr);
  s->by_addr[i] = rec;
  s->naddr++;
}

static void index_remove(stream_ordered *s, so_rec *rec) {
  size_t i = index_upper(s, rec->ptr);
  if (i == 0 || s->by_addr[i - 1] != rec) return;
  memmove(&s->by_addr[i - 1], &s->by_addr[i], (s->naddr - i) * sizeof *s->by_addr);
  s->naddr--;
}

/* ipc.c asks, when a pool over this one exports [ptr, ptr+bytes): the allocation it lies in and
 * that allocation's export data, made at its first export and kept. An allocation above
 * RAPI_SO_EXPORT_MAX is not exported: on the H100 with driver 580.159.04 an importer's
 * cudaMemPoolImportPointer of one pool allocation of 5 632 MiB or more (5 120 MiB worked) ends the
 * importing process with a segmentation fault inside the driver, CUDA's own pool IPC alike
 * (docs/DESIGN.md). */
#define RAPI_SO_EXPORT_MAX ((size_t)4 << 30)
static int so_locate(rap_allocator *self, void *ptr, size_t bytes, rapi_ipc_place *out) {
  stream_ordered *s = self->state;
  rapi_held held;
  rapi_lock(&s->lock, &held);
  size_t i = index_upper(s, ptr);
  so_rec *rec = i > 0 ? s->by_addr[i - 1] : NULL;
  size_t off = rec != NULL ? (size_t)((char *)ptr - (char *)rec->ptr) : 0;
  size_t size = rec != NULL ? (rec->bytes ? rec->bytes : 1) : 0;
  if (rec == NULL || off >= size || bytes > size - off) {
    rapi_unlock(&held);
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_export: [%p, +%zu) is not inside one live allocation "
                     "of '%s'", ptr, bytes, rap_allocator_name(self));
  }
  if (size > RAPI_SO_EXPORT_MAX) {
    rapi_unlock(&held);
    char sz[32];
    rapi_format_size(sz, sizeof sz, size);
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export: [%p, +%zu) lies in an allocation of %s of "
                     "'%s'; CUDA's pool IPC crashes the importing process on allocations above about "
                     "5 GiB (cudaMemPoolImportPointer, driver 580), so StreamOrdered exports from "
                     "allocations of at most 4 GiB: keep the pool's chunks at most that (initial_size=, "
                     "next_size=), or use DeviceVmm(export=posix), which has no such limit",
                     ptr, bytes, sz, rap_allocator_name(self));
  }
  int st = RAP_OK;
  if (!rec->exported) {
    struct cudaMemPoolPtrExportData data;
    cudaError_t e = cudaMemPoolExportPointer(&data, rec->ptr);
    if (e != cudaSuccess) {
      st = cuda_fail(s, "cudaMemPoolExportPointer", e);
    } else {
      memcpy(rec->data, &data, sizeof rec->data);
      rec->exported = true;
    }
  }
  if (st == RAP_OK) {
    out->alloc = rec->id;
    out->offset = off;
    memcpy(out->data, rec->data, sizeof out->data);
  }
  rapi_unlock(&held);
  return st;
}

_Static_assert(sizeof(struct cudaMemPoolPtrExportData) == 64, "a ticket holds the export data");

static rapi_ipc_export *so_export_state(rap_allocator *self) {
  return ((stream_ordered *)self->state)->ipc;
}

/* The export entry of the record (rap_internal.h): how ipc.c reaches this platform. */
static const rapi_platform_export so_export = {"pool=new, export=posix", so_export_state, so_locate};

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
  if (s->ipc != NULL && (st = index_reserve(s)) != RAP_OK) {
    rapi_slab_free(&s->recs, rec);
    rapi_unlock(&held);
    return st;
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
  *rec = (so_rec){ptr, bytes, stream, host ? NULL : r, ++s->next_id, false, {0}};
  rapi_map_insert(&s->map, ptr, rec);
  if (s->ipc != NULL) index_insert(s, rec);
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
  if (s->ipc != NULL) index_remove(s, rec);
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
  so_rec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&s->map, &i)) != NULL;) {
    if (rec->r == r) {
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
  const so_rec *rec;
  for (size_t i = 0; (rec = rapi_map_next(&s->map, &i)) != NULL;) {
    n++;
    bytes += rec->bytes;
  }
  bool ok = n == s->count && bytes == s->current;
  size_t indexed = s->naddr;   /* export=: every live allocation in the address index, in order */
  bool index_ok = s->ipc == NULL || indexed == n;
  for (size_t i = 1; index_ok && i < indexed; i++)
    index_ok = (char *)s->by_addr[i - 1]->ptr < (char *)s->by_addr[i]->ptr;
  pthread_mutex_unlock(&s->lock);
  if (!index_ok)
    return rapi_fail(RAP_ERR_CORRUPT, "%s: the address index holds %zu allocations, not %zu in "
                     "order", rap_allocator_name(s->self), indexed, n);
  return ok ? RAP_OK
            : rapi_fail(RAP_ERR_CORRUPT, "%s: the map holds %zu blocks of %zu bytes, the counters "
                        "say %zu of %zu", rap_allocator_name(s->self), n, bytes, s->count, s->current);
}

/* Importers are refused from now (the table says gone before the handle's number is let go). */
static void export_end(stream_ordered *s) {
  rapi_ipc_pool_export_stop(s->ipc);
  s->ipc = NULL;
  if (s->export_fd >= 0) close(s->export_fd);
  s->export_fd = -1;
  free(s->by_addr);
  s->by_addr = NULL;
}

static void so_fini(rap_allocator *self, void *state) {
  stream_ordered *s = state;
  (void)self;
  so_rec *rec;   /* leaked blocks: freed on their streams */
  for (size_t i = 0; (rec = rapi_map_next(&s->map, &i)) != NULL;)
    (void)cudaFreeAsync(rec->ptr, rec->stream);
  rapi_watch_set_clear(&s->watched, s->self);
  export_end(s);
  /* A created pool with frees still in flight is released by CUDA once they are done. */
  if (s->created && s->pool != NULL) (void)cudaMemPoolDestroy(s->pool);
  (void)cudaGetLastError();
  rapi_map_fini(&s->map);
  rapi_slab_destroy(&s->recs);
  pthread_mutex_destroy(&s->lock);
}

static int set_reuse(stream_ordered *s, const rapi_option_value *o, enum cudaMemPoolAttr which) {
  if (!o->given) return RAP_OK;   /* absent: leave the pool's */
  int on = (int)o->u;
  cudaError_t e = cudaMemPoolSetAttribute(s->pool, which, &on);
  return e == cudaSuccess ? RAP_OK : cuda_fail(s, "cudaMemPoolSetAttribute", e);
}

static int so_init_steps(rap_allocator *self, stream_ordered *s, const rapi_option_value *o);

/* The manager does not call fini when init fails: what init made is undone here. */
static int so_init(rap_allocator *self, void *state, rap_options *opts) {
  stream_ordered *s = state;
  s->self = self;
  s->export_fd = -1;
  rapi_option_value o[RAPI_SO_OPTIONS];
  int st = rapi_platform_options(opts, &rapi_stream_ordered_options, o);
  if (st == RAP_OK) st = so_init_steps(self, s, o);
  if (st != RAP_OK) {
    export_end(s);
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

/* The options were read through the platform's table (platform_options.c), which checked each
 * value and the rule between export= and pool=. */
static int so_init_steps(rap_allocator *self, stream_ordered *s, const rapi_option_value *o) {
  uint64_t device = o[RAPI_SO_DEVICE].u;
  const char *pool = o[RAPI_SO_POOL].text != NULL ? o[RAPI_SO_POOL].text : "default";
  int st = RAP_OK, mode = (int)o[RAPI_SO_EXPORT].u;
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
    if (mode != 0) props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    e = cudaMemPoolCreate(&s->pool, &props);
    if (e != cudaSuccess) return cuda_fail(s, mode != 0 ? "cudaMemPoolCreate (export=posix)" : "cudaMemPoolCreate", e);
    s->created = true;
    if (mode != 0) {
      int fd = -1;
      e = cudaMemPoolExportToShareableHandle(&fd, s->pool, cudaMemHandleTypePosixFileDescriptor, 0);
      if (e != cudaSuccess) return cuda_fail(s, "cudaMemPoolExportToShareableHandle", e);
      s->export_fd = fd;
    }
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
  if (o[RAPI_SO_THRESHOLD].given) {
    uint64_t v = o[RAPI_SO_THRESHOLD].u;   /* max: UINT64_MAX */
    e = cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReleaseThreshold, &v);
    if (e != cudaSuccess) return cuda_fail(s, "cudaMemPoolSetAttribute(release threshold)", e);
  }
  if ((st = set_reuse(s, &o[RAPI_SO_FOLLOW], cudaMemPoolReuseFollowEventDependencies)) != RAP_OK ||
      (st = set_reuse(s, &o[RAPI_SO_OPPORTUNISTIC], cudaMemPoolReuseAllowOpportunistic)) != RAP_OK ||
      (st = set_reuse(s, &o[RAPI_SO_INTERNAL], cudaMemPoolReuseAllowInternalDependencies)) != RAP_OK)
    return st;
  rap_allocator_set_alignment(self, 256);
  s->platform = (rapi_platform){.root = self, .memory = RAPI_MEMORY_DEVICE,
                                .source = RAPI_SOURCE_STREAM_ORDERED, .device = s->device,
                                .capture_ok = true, .peer = rapi_stream_ordered_peer,
                                .exporter = &so_export};
  self->platform = &s->platform;
  self->devices_ok = rapi_device_bit(s->device);
  st = rapi_gpu_peers_option(self, s->device, o[RAPI_SO_PEERS].text);
  if (st == RAP_OK && mode != 0)
    st = rapi_ipc_pool_export_start(self, s->device, s->export_fd, &s->ipc);
  return st;
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

/* ---- the importer's side of CUDA's pool IPC (ipc.c) ------------------------------------------------
 * Each call runs with the pool's device current (put back after). */

static int imp_fail(const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "rap_ipc: %s: %s",
                   call, cudaGetErrorString(e));
}

static int imp_enter(int device, int *saved) {
  cudaError_t e = cudaGetDevice(saved);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  return e == cudaSuccess ? RAP_OK : imp_fail("cudaSetDevice", e);
}

/* Imported pools are accessible from their own device (the exporter's, found by its bus id). */
int rapi_ipc_pool_open(int device, int fd, void **pool) {
  int saved = 0, st = imp_enter(device, &saved);
  if (st != RAP_OK) return st;
  cudaMemPool_t mp = NULL;
  cudaError_t e = cudaMemPoolImportFromShareableHandle(&mp, (void *)(uintptr_t)fd,
                                                       cudaMemHandleTypePosixFileDescriptor, 0);
  (void)cudaSetDevice(saved);
  if (e != cudaSuccess) return imp_fail("cudaMemPoolImportFromShareableHandle", e);
  *pool = mp;
  return RAP_OK;
}

void rapi_ipc_pool_close(int device, void *pool) {
  int saved = 0;
  if (imp_enter(device, &saved) != RAP_OK) return;
  cudaError_t e = cudaMemPoolDestroy((cudaMemPool_t)pool);
  (void)cudaSetDevice(saved);
  if (e != cudaSuccess) {
    imp_fail("cudaMemPoolDestroy (an imported pool)", e);
    rap_log(RAP_LOG_WARN, "%s", rap_last_error());
  }
}

/* An import used on another device: that device is given access to the imported pool (an imported
 * pool is accessible from its own device only), once per device (*granted: bits). The device is
 * the stream's for an import on a CUDA stream, and the calling thread's current device for one on
 * the host (no resource): where that thread's kernels will run. */
int rapi_ipc_pool_reach(int device, void *pool, rap_resource *r, uint64_t *granted) {
  bool stream = r != NULL && strcmp(rap_resource_kind(r), "cuda") == 0;
  if (r != NULL && !stream && r->ops->record != NULL) return RAP_OK;   /* refused by the caller */
  int dev = device;
  cudaError_t e = stream ? cudaStreamGetDevice(rap_resource_cuda_stream(r), &dev) : cudaGetDevice(&dev);
  if (e != cudaSuccess) return imp_fail(stream ? "cudaStreamGetDevice" : "cudaGetDevice", e);
  if (dev == device || (dev < 64 && (*granted >> dev & 1))) return RAP_OK;
  struct cudaMemAccessDesc desc;
  memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = dev;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  int saved = 0, st = imp_enter(device, &saved);
  if (st != RAP_OK) return st;
  e = cudaMemPoolSetAccess((cudaMemPool_t)pool, &desc, 1);
  (void)cudaSetDevice(saved);
  if (e != cudaSuccess) return imp_fail("cudaMemPoolSetAccess (an imported pool, for its stream's device)", e);
  if (dev < 64) *granted |= (uint64_t)1 << dev;
  return RAP_OK;
}

int rapi_ipc_pool_import(int device, void *pool, const unsigned char data[64], void **ptr) {
  int saved = 0, st = imp_enter(device, &saved);
  if (st != RAP_OK) return st;
  struct cudaMemPoolPtrExportData d;
  memcpy(&d, data, sizeof d);
  void *p = NULL;
  cudaError_t e = cudaMemPoolImportPointer(&p, (cudaMemPool_t)pool, &d);
  (void)cudaSetDevice(saved);
  if (e != cudaSuccess) return imp_fail("cudaMemPoolImportPointer", e);
  *ptr = p;
  return RAP_OK;
}

/* On a CUDA resource: its stream waits for the events, then frees (the exporter learns of the close
 * through an event recorded after this). On the host: the events and the free are waited for, as
 * CUDA asks that an importer's free completes before the exporter's. */
int rapi_ipc_pool_free(int device, void *ptr, rap_resource *r, void *const *events, unsigned n) {
  cudaStream_t s = r != NULL ? rap_resource_cuda_stream(r) : cudaStreamLegacy;
  cudaError_t e = r != NULL ? cudaStreamGetDevice(s, &device) : cudaSuccess;   /* the stream's own */
  if (e != cudaSuccess) return imp_fail("cudaStreamGetDevice", e);
  int saved = 0, st = imp_enter(device, &saved);
  if (st != RAP_OK) return st;
  for (unsigned i = 0; i < n && e == cudaSuccess; i++)
    e = r != NULL ? cudaStreamWaitEvent(s, (cudaEvent_t)events[i], 0)
                  : cudaEventSynchronize((cudaEvent_t)events[i]);
  if (e != cudaSuccess) st = imp_fail(r != NULL ? "cudaStreamWaitEvent" : "cudaEventSynchronize", e);
  else if ((e = cudaFreeAsync(ptr, s)) != cudaSuccess) st = imp_fail("cudaFreeAsync (an imported allocation)", e);
  else if (r == NULL && (e = cudaStreamSynchronize(s)) != cudaSuccess) st = imp_fail("cudaStreamSynchronize", e);
  (void)cudaSetDevice(saved);
  return st;
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

static int no_pool_ipc(void) {
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc: a StreamOrdered pool's blocks are imported by a "
                   "CUDA build of rap, and " SO_BUILD);
}
int rapi_ipc_pool_open(int device, int fd, void **pool) {
  (void)device, (void)fd, (void)pool;
  return no_pool_ipc();
}
void rapi_ipc_pool_close(int device, void *pool) { (void)device, (void)pool; }
int rapi_ipc_pool_import(int device, void *pool, const unsigned char data[64], void **ptr) {
  (void)device, (void)pool, (void)data, (void)ptr;
  return no_pool_ipc();
}
int rapi_ipc_pool_reach(int device, void *pool, rap_resource *r, uint64_t *granted) {
  (void)device, (void)pool, (void)r, (void)granted;
  return no_pool_ipc();
}
int rapi_ipc_pool_free(int device, void *ptr, rap_resource *r, void *const *events, unsigned n) {
  (void)device, (void)ptr, (void)r, (void)events, (void)n;
  return no_pool_ipc();
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
