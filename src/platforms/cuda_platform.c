/* cuda_platform.c — the GPU platform allocators: DEVICE, DEVICE::N, PINNED, UM and Pinned.
 *
 * Each is the tracked body (tracked.c) over cudaMalloc, cudaMallocHost or cudaMallocManaged,
 * with its platform record (rapi_platform: what the memory is, its device, CUDA's peer access
 * and the device address of pinned memory); a HIP build compiles this same file spelled for HIP (gpu_runtime.h: hipMalloc,
 * hipHostMalloc, hipMallocManaged). Every runtime call is checked and turned into a status and a
 * sentence. A machine without a GPU or driver still loads rap (the CUDA runtime is linked
 * statically; ROCm's loads without a GPU): asking for one of these there is RAP_ERR_UNSUPPORTED.
 */
#include "rap_internal.h"
#include "platforms/platform_options.h"
#include "resources/gpu_runtime.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_DEVICE, KIND_PINNED, KIND_MANAGED };

typedef struct gpu_impl {
  rapi_platform platform;   /* first: what the chain above inherits */
  int kind;
  int device;
  unsigned host_flags;   /* Pinned(portable, mapped, write_combined): cudaHostAlloc's flags */
} gpu_impl;

static const char *call_name(int kind) {
  return kind == KIND_DEVICE ? GPU_PREFIX "Malloc" : kind == KIND_PINNED ? GPU_MALLOC_HOST
                                                                       : GPU_PREFIX "MallocManaged";
}

/* Runs f on the allocator's device, restoring the caller's current device afterwards. */
static int enter_device(rapi_tracked *p, int *saved) {
  gpu_impl *c = p->impl;
  gpuError_t e = gpuGetDevice(saved);
  if (e == gpuSuccess && *saved != c->device) e = gpuSetDevice(c->device);
  if (e != gpuSuccess)
    return rapi_fail(RAP_ERR_BACKEND, "%s: " GPU_PREFIX "SetDevice(%d): %s",
                     rap_allocator_name(p->self), c->device, gpuGetErrorString(e));
  return RAP_OK;
}

static void leave_device(rapi_tracked *p, int saved) {
  gpu_impl *c = p->impl;
  if (saved != c->device) (void)gpuSetDevice(saved);
}

static int gpu_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  (void)r;   /* cudaMalloc and hipMalloc are not stream-ordered */
  gpu_impl *c = p->impl;
  int saved = 0;
  int st = enter_device(p, &saved);
  if (st != RAP_OK) return st;
  void *ptr = NULL;
  gpuError_t e = c->kind == KIND_DEVICE   ? gpuMalloc(&ptr, bytes)
                 : c->kind == KIND_PINNED ? (c->host_flags ? gpuHostAlloc(&ptr, bytes, c->host_flags)
                                                           : gpuMallocHost(&ptr, bytes))
                                          : gpuMallocManaged(&ptr, bytes, gpuMemAttachGlobal);
  leave_device(p, saved);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();   /* clear the sticky copy of a non-sticky error */
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return rapi_fail(e == gpuErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND,
                     "%s: %s(%s): %s", rap_allocator_name(p->self), call_name(c->kind), sz,
                     gpuGetErrorString(e));
  }
  *out = ptr;
  return RAP_OK;
}

static int gpu_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)bytes;
  (void)r;
  gpu_impl *c = p->impl;
  int saved = 0;
  int st = enter_device(p, &saved);
  if (st != RAP_OK) return st;
  gpuError_t e = c->kind == KIND_PINNED ? gpuFreeHost(ptr) : gpuFree(ptr);
  leave_device(p, saved);
  if (e != gpuSuccess)
    return rapi_fail(RAP_ERR_BACKEND, "%s: %s(%p): %s", rap_allocator_name(p->self),
                     c->kind == KIND_PINNED ? GPU_FREE_HOST : GPU_PREFIX "Free", ptr,
                     gpuGetErrorString(e));
  return RAP_OK;
}

/* ---- peer access ----------------------------------------------------------------------------- */

#if !RAP_HAVE_HIP
/* peer_enabled[d] has bit o once device d reaches device o's cudaMalloc'd memory (enabled by rap or
 * found enabled). Process-wide, as peer access is; a cudaDeviceReset behind rap's back is not seen. */
static _Atomic uint64_t peer_enabled[64];
#endif

/* cudaMalloc'd memory: peer access is between the two devices' contexts, for all their memory
 * (platform.c has checked that device can reach own). Taking it back is rap's refusal only: other
 * memory of the device may rely on the mapping. */
static int device_peer(rap_allocator *root, int device, int enable) {
#if RAP_HAVE_HIP
  (void)device;
  (void)enable;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access('%s'): access between devices "
                   "is CUDA only in this release", rap_allocator_name(root));
#else
  const char *who = rap_allocator_name(root);
  int own = root->platform->device;
  if (!enable) return RAP_OK;
  /* Asked once per pair of devices: enabling it again is an error CUDA reports to tools
   * (compute-sanitizer lists every such call), though it changes nothing. */
  uint64_t bit = rapi_device_bit(own);
  _Atomic uint64_t *done = device >= 0 && device < 64 ? &peer_enabled[device] : NULL;
  if (done != NULL && bit != 0 && (atomic_load(done) & bit) != 0) return RAP_OK;
  int saved = own;
  cudaError_t e = cudaGetDevice(&saved);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) {
    e = cudaDeviceEnablePeerAccess(own, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      e = cudaSuccess;
    }
    (void)cudaSetDevice(saved);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaDeviceEnablePeerAccess(%d) on device %d: %s", who, own,
                     device, cudaGetErrorString(e));
  }
  if (done != NULL) atomic_fetch_or(done, bit);
  return RAP_OK;
#endif
}

/* The address a kernel uses for a block of pinned memory: the mapping CUDA gives (the same address
 * where memory is unified, as on every 64-bit platform CUDA supports, but asked all the same). */
static int pinned_device_pointer(rap_allocator *a, const void *ptr, void **out) {
  void *d = NULL;
  gpuError_t e = gpuHostGetDevicePointer(&d, (void *)ptr, 0);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer('%s'): %p has no device address: %s",
                     rap_allocator_name(a), ptr, gpuGetErrorString(e));
  }
  *out = d;
  return RAP_OK;
}

/* The record the chain above inherits: device memory on c->device (with CUDA's peer access), or
 * pinned or managed memory that every device reaches. */
static void set_platform(rap_allocator *self, gpu_impl *c) {
  static const rapi_memory memory[] = {RAPI_MEMORY_DEVICE, RAPI_MEMORY_PINNED, RAPI_MEMORY_MANAGED};
  c->platform = (rapi_platform){.root = self, .memory = memory[c->kind], .device = c->device};
  if (c->kind == KIND_DEVICE) c->platform.peer = device_peer;
  if (c->kind == KIND_PINNED) c->platform.device_pointer = pinned_device_pointer;
  self->platform = &c->platform;
}

/* ---- the platforms ---------------------------------------------------------------------------- */

static int gpu_init(rap_allocator *self, void *state, rap_options *opts) {
  const char *kind = "device";
  uint64_t device = 0;
  int st = rap_options_get_string(opts, "kind", &kind);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "device", &device);
  if (st != RAP_OK) return st;
  if ((st = rapi_gpu_device_exists(self, device)) != RAP_OK) return st;
  gpu_impl *c = rapi_malloc(sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  c->kind = strcmp(kind, "pinned") == 0    ? KIND_PINNED
            : strcmp(kind, "managed") == 0 ? KIND_MANAGED
                                           : KIND_DEVICE;
  c->device = (int)device;
  c->host_flags = 0;
  set_platform(self, c);
  if (c->kind == KIND_DEVICE) self->devices_ok = rapi_device_bit(c->device);
  /* 256: the runtimes' documented least alignment */
  return rapi_tracked_init(state, self, c, gpu_raw_alloc, gpu_raw_free, false, 256);
}

/* Pinned(device=N, portable=0|1, mapped=0|1, write_combined=0|1): page-locked host memory with
 * cudaHostAlloc's flags, as a strategy without a parent (PINNED is the same with none). */
static int pinned_init(rap_allocator *self, void *state, rap_options *opts) {
  rapi_option_value o[RAPI_PINNED_OPTIONS];   /* read through Pinned's table (platform_options.c) */
  int st = rapi_platform_options(opts, &rapi_pinned_options, o);
  if (st != RAP_OK) return st;
  unsigned host_flags = (o[RAPI_PINNED_PORTABLE].u ? gpuHostAllocPortable : 0) |
                        (o[RAPI_PINNED_MAPPED].u ? gpuHostAllocMapped : 0) |
                        (o[RAPI_PINNED_WRITE_COMBINED].u ? gpuHostAllocWriteCombined : 0);
  uint64_t device = o[RAPI_PINNED_DEVICE].u;
  if ((st = rapi_gpu_device_exists(self, device)) != RAP_OK) return st;
  gpu_impl *c = rapi_malloc(sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  *c = (gpu_impl){.kind = KIND_PINNED, .device = (int)device, .host_flags = host_flags};
  set_platform(self, c);
  return rapi_tracked_init(state, self, c, gpu_raw_alloc, gpu_raw_free, false, 256);
}

const rap_strategy rapi_pinned_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Pinned",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = pinned_init,
    RAPI_TRACKED_METHODS,
};

const rap_strategy rapi_cuda_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = GPU_NAME,
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = gpu_init,
    RAPI_TRACKED_METHODS,
};
