/* cuda_platform.c — the GPU platform allocators: DEVICE, DEVICE::N, PINNED and UM.
 *
 * Each is the shared platform body (platform.c) over cudaMalloc, cudaMallocHost or
 * cudaMallocManaged; a HIP build compiles this same file spelled for HIP (gpu_runtime.h: hipMalloc,
 * hipHostMalloc, hipMallocManaged). Every runtime call is checked and turned into a status and a
 * sentence. A machine without a GPU or driver still loads rap (the CUDA runtime is linked
 * statically; ROCm's loads without a GPU): asking for one of these there is RAP_ERR_UNSUPPORTED.
 */
#include "rap_internal.h"
#include "resources/gpu_runtime.h"
#include "platforms/vmm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { KIND_DEVICE, KIND_PINNED, KIND_MANAGED };

typedef struct gpu_impl {
  int kind;
  int device;
  unsigned host_flags;   /* Pinned(portable, mapped, write_combined): cudaHostAlloc's flags */
} gpu_impl;

bool rapi_cuda_compiled(void) { return true; }

/* How many devices there are, or RAP_ERR_UNSUPPORTED with a sentence that says why none is usable:
 * no driver at all (the runtime then reports an "insufficient driver", which reads as too old), a
 * driver older than the runtime rap was built with, or no device. On AMD the driver is the amdgpu
 * kernel module, which ROCm reaches through /dev/kfd. */
int rapi_cuda_devices(const char *who, int *count) {
  *count = 0;
  gpuError_t e = gpuGetDeviceCount(count);
  if (e == gpuSuccess && *count > 0) return RAP_OK;
  (void)gpuGetLastError();
#if RAP_GPU_AMD
  if (access("/dev/kfd", F_OK) != 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no HIP device is usable here: no AMD GPU driver is "
                     "loaded (/dev/kfd does not exist)", who);
  if (access("/dev/kfd", R_OK | W_OK) != 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no HIP device is usable here: /dev/kfd is not open "
                     "to this user (the render or video group)", who);
#else
  int driver = 0;
  (void)gpuDriverGetVersion(&driver);
  (void)gpuGetLastError();
  if (driver == 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here: no CUDA "
                     "driver is installed (libcuda was not found)", who);
  if (e == gpuErrorInsufficientDriver)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here: the driver "
                     "supports CUDA %d.%d, older than the CUDA %d.%d rap was built with; update the "
                     "driver", who, driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                     CUDART_VERSION % 1000 / 10);
#endif
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no " GPU_NAME " device is usable here (%s)", who,
                   e != gpuSuccess ? gpuGetErrorString(e) : "the driver found no device");
}

/* RAP_OK if device N is usable; else why not (no driver or device: UNSUPPORTED; past the count:
 * NOT_FOUND). */
int rapi_gpu_device_exists(rap_allocator *self, uint64_t device) {
  int count = 0;
  if (rapi_cuda_devices(rap_allocator_name(self), &count) != RAP_OK) return RAP_ERR_UNSUPPORTED;
  if (device >= (uint64_t)count)
    return rapi_fail(RAP_ERR_NOT_FOUND, "%s: device %llu does not exist; this machine has %d",
                     rap_allocator_name(self), (unsigned long long)device, count);
  return RAP_OK;
}

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
  if (c->kind == KIND_DEVICE) self->devices_ok = rapi_device_bit(c->device);
  /* 256: the runtimes' documented least alignment */
  return rapi_tracked_init(state, self, c, gpu_raw_alloc, gpu_raw_free, false, 256);
}

/* Pinned(device=N, portable=0|1, mapped=0|1, write_combined=0|1): page-locked host memory with
 * cudaHostAlloc's flags, as a strategy without a parent (PINNED is the same with none). */
static int pinned_init(rap_allocator *self, void *state, rap_options *opts) {
  static const struct {
    const char *key;
    unsigned flag;
  } flags[] = {{"portable", gpuHostAllocPortable}, {"mapped", gpuHostAllocMapped},
               {"write_combined", gpuHostAllocWriteCombined}};
  unsigned host_flags = 0;
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    uint64_t on = 0;
    int st = rap_options_get_uint(opts, flags[i].key, &on);
    if (st != RAP_OK) return st;
    if (on > 1)
      return rapi_fail(RAP_ERR_INVALID, "%s: option '%s' is 0 or 1", rap_allocator_name(self),
                       flags[i].key);
    if (on) host_flags |= flags[i].flag;
  }
  uint64_t device = 0;
  int st = rap_options_get_uint(opts, "device", &device);
  if (st != RAP_OK) return st;
  if ((st = rapi_gpu_device_exists(self, device)) != RAP_OK) return st;
  gpu_impl *c = rapi_malloc(sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  *c = (gpu_impl){KIND_PINNED, (int)device, host_flags};
  return rapi_tracked_init(state, self, c, gpu_raw_alloc, gpu_raw_free, false, 256);
}

/* The address a kernel uses for a block under a's platform: the block itself for device and
 * managed memory; for pinned memory the mapping CUDA gives (the same address where memory is
 * unified, as on every 64-bit platform CUDA supports, but asked all the same). */
int rap_device_pointer(rap_allocator *a, const void *ptr, void **out) {
  if (a == NULL || ptr == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer: allocator, pointer or out is NULL");
  rap_allocator *root = a;
  while (rap_allocator_parent(root) != NULL) root = rap_allocator_parent(root);
  if (root->strategy == &rapi_stream_ordered_strategy ||
      root->strategy == &rapi_device_vmm_strategy) {   /* device memory */
    *out = (void *)ptr;
    return RAP_OK;
  }
  if (root->strategy != &rapi_cuda_platform && root->strategy != &rapi_pinned_strategy)
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer('%s'): its memory comes from '%s', which a "
                     "device cannot address (use PINNED or Pinned(mapped=1))", rap_allocator_name(a),
                     rap_allocator_name(root));
  gpu_impl *c = ((rapi_tracked *)root->state)->impl;
  if (c->kind != KIND_PINNED) {
    *out = (void *)ptr;
    return RAP_OK;
  }
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

int rapi_gpu_memory_info(rap_allocator *platform, size_t *free_bytes, size_t *total_bytes) {
  if (platform->strategy == &rapi_stream_ordered_strategy)
    return rapi_stream_ordered_memory_info(platform, free_bytes, total_bytes);
  rapi_tracked *p = platform->state;
  gpu_impl vmm = {KIND_DEVICE, 0, 0};
  rapi_tracked as_device = {.self = platform, .impl = &vmm};   /* lives as long as p may point here */
  if (platform->strategy == &rapi_device_vmm_strategy) {   /* its impl is the engine's */
    vmm.device = rapi_device_vmm_device(platform);
    p = &as_device;
  }
  gpu_impl *c = p->impl;
  if (c->kind == KIND_PINNED) return RAPI_HOST_MEMORY;
  int saved = 0;
  int st = enter_device(p, &saved);
  if (st != RAP_OK) return st;
  size_t f = 0, t = 0;
  gpuError_t e = gpuMemGetInfo(&f, &t);
  leave_device(p, saved);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: " GPU_PREFIX "MemGetInfo on device %d: %s",
                     rap_allocator_name(platform), c->device, gpuGetErrorString(e));
  }
  *free_bytes = f;
  *total_bytes = t;
  return RAP_OK;
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

/* ---- peer access ----------------------------------------------------------------------------- */

#if !RAP_HAVE_HIP
/* peer_enabled[d] has bit o once device d reaches device o's cudaMalloc'd memory (enabled by rap or
 * found enabled). Process-wide, as peer access is; a cudaDeviceReset behind rap's back is not seen. */
static _Atomic uint64_t peer_enabled[64];
#endif

int rapi_gpu_peer_access(rap_allocator *root, int device, int enable, int *owner) {
  *owner = -1;
  const char *who = rap_allocator_name(root);
  bool so = root->strategy == &rapi_stream_ordered_strategy;
  bool vmm = root->strategy == &rapi_device_vmm_strategy;
  int own;
  if (root->strategy == &rapi_cuda_platform || root->strategy == &rapi_pinned_strategy) {
    gpu_impl *c = ((rapi_tracked *)root->state)->impl;
    if (c->kind != KIND_DEVICE) return RAP_OK;   /* pinned and managed: every device reaches it */
    own = c->device;
  } else if (so || vmm) {
    own = so ? rapi_stream_ordered_device(root) : rapi_device_vmm_device(root);
  } else {
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access: the memory comes from '%s' "
                     "(%s), host memory, which a device reaches only when it is pinned (PINNED)", who,
                     root->strategy->name);
  }
  int st = rapi_gpu_device_exists(root, (uint64_t)device);
  if (st != RAP_OK) return st;
  *owner = own;
  if (device == own) return RAP_OK;
#if RAP_HAVE_HIP
  (void)enable;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access('%s'): access between devices "
                   "is CUDA only in this release", who);
#else
  int can = 0;
  cudaError_t e = cudaDeviceCanAccessPeer(&can, device, own);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaDeviceCanAccessPeer(%d, %d): %s", who, device, own,
                     cudaGetErrorString(e));
  }
  if (!can)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: device %d cannot reach device %d's memory: the two "
                     "have no peer path (cudaDeviceCanAccessPeer)", who, device, own);
  if (so) return rapi_stream_ordered_peer(root, device, enable);
  if (vmm) return rapi_device_vmm_peer(root, device, enable);
  /* cudaMalloc'd memory: peer access is between the two devices' contexts, for all their memory.
   * Taking it back is rap's refusal only: other memory of the device may rely on the mapping. */
  if (!enable) return RAP_OK;
  /* Asked once per pair of devices: enabling it again is an error CUDA reports to tools
   * (compute-sanitizer lists every such call), though it changes nothing. */
  uint64_t bit = rapi_device_bit(own);
  _Atomic uint64_t *done = device >= 0 && device < 64 ? &peer_enabled[device] : NULL;
  if (done != NULL && bit != 0 && (atomic_load(done) & bit) != 0) return RAP_OK;
  int saved = own;
  e = cudaGetDevice(&saved);
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

/* peers=all (every other device that can reach this one's memory) or peers=1+3 (each must). */
int rapi_gpu_peers_option(rap_allocator *self, int owner, rap_options *opts) {
  const char *peers = NULL;
  int st = rap_options_get_string(opts, "peers", &peers);
  if (st != RAP_OK || peers == NULL) return st;
  int count = 0;
  if ((st = rapi_cuda_devices(rap_allocator_name(self), &count)) != RAP_OK) return st;
  bool all = strcmp(peers, "all") == 0;
  const char *s = peers;
  for (int d = 0; all ? d < count : *s != 0; d++) {
    int device = d;
    if (!all) {
      char *end;
      long v = strtol(s, &end, 10);
      if (end == s || v < 0 || v > 4096 || (*end != 0 && *end != '+'))
        return rapi_fail(RAP_ERR_INVALID, "%s: option 'peers' is 'all' or device numbers joined by "
                         "'+' (peers=1+3), not '%s'", rap_allocator_name(self), peers);
      device = (int)v;
      s = *end == '+' ? end + 1 : end;
    }
    if (device == owner) continue;
    int own = -1;
    st = rapi_gpu_peer_access(self, device, 1, &own);
    if (st == RAP_ERR_UNSUPPORTED && all) continue;   /* all: those that can */
    if (st != RAP_OK) return st;
    self->devices_ok |= rapi_device_bit(device);
  }
  return RAP_OK;
}
