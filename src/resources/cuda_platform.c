/* cuda_platform.c — the CUDA platform allocators: DEVICE, DEVICE::N, PINNED and UM.
 *
 * Each is the shared platform body (platform.c) over cudaMalloc, cudaMallocHost or
 * cudaMallocManaged. Every CUDA call is checked and turned into a status and a sentence. The
 * runtime is linked statically, so a machine without a GPU or driver still loads rap: asking for
 * one of these there is RAP_ERR_UNSUPPORTED.
 */
#include "rap_internal.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_DEVICE, KIND_PINNED, KIND_MANAGED };

typedef struct cuda_impl {
  int kind;
  int device;
} cuda_impl;

bool rapi_cuda_compiled(void) { return true; }

/* How many devices there are, or RAP_ERR_UNSUPPORTED with a sentence that says why none is usable:
 * no driver at all (the runtime then reports an "insufficient driver", which reads as too old), a
 * driver older than the runtime rap was built with, or no device. */
int rapi_cuda_devices(const char *who, int *count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaSuccess && *count > 0) return RAP_OK;
  (void)cudaGetLastError();
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaGetLastError();
  if (driver == 0)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no CUDA device is usable here: no CUDA driver is "
                     "installed (libcuda was not found)", who);
  if (e == cudaErrorInsufficientDriver)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no CUDA device is usable here: the driver supports "
                     "CUDA %d.%d, older than the CUDA %d.%d rap was built with; update the driver",
                     who, driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                     CUDART_VERSION % 1000 / 10);
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: no CUDA device is usable here (%s)", who,
                   e != cudaSuccess ? cudaGetErrorString(e) : "the driver found no device");
}

static const char *call_name(int kind) {
  return kind == KIND_DEVICE ? "cudaMalloc" : kind == KIND_PINNED ? "cudaMallocHost"
                                                                  : "cudaMallocManaged";
}

/* Runs f on the allocator's device, restoring the caller's current device afterwards. */
static int enter_device(rapi_tracked *p, int *saved) {
  cuda_impl *c = p->impl;
  cudaError_t e = cudaGetDevice(saved);
  if (e == cudaSuccess && *saved != c->device) e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaSetDevice(%d): %s", rap_allocator_name(p->self),
                     c->device, cudaGetErrorString(e));
  return RAP_OK;
}

static void leave_device(rapi_tracked *p, int saved) {
  cuda_impl *c = p->impl;
  if (saved != c->device) (void)cudaSetDevice(saved);
}

static int cuda_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  (void)r;   /* cudaMalloc is not stream-ordered */
  cuda_impl *c = p->impl;
  int saved = 0;
  int st = enter_device(p, &saved);
  if (st != RAP_OK) return st;
  void *ptr = NULL;
  cudaError_t e = c->kind == KIND_DEVICE   ? cudaMalloc(&ptr, bytes)
                  : c->kind == KIND_PINNED ? cudaMallocHost(&ptr, bytes)
                                           : cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal);
  leave_device(p, saved);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();   /* clear the sticky copy of a non-sticky error */
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND,
                     "%s: %s(%s): %s", rap_allocator_name(p->self), call_name(c->kind), sz,
                     cudaGetErrorString(e));
  }
  *out = ptr;
  return RAP_OK;
}

static int cuda_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)bytes;
  (void)r;
  cuda_impl *c = p->impl;
  int saved = 0;
  int st = enter_device(p, &saved);
  if (st != RAP_OK) return st;
  cudaError_t e = c->kind == KIND_PINNED ? cudaFreeHost(ptr) : cudaFree(ptr);
  leave_device(p, saved);
  if (e != cudaSuccess)
    return rapi_fail(RAP_ERR_BACKEND, "%s: %s(%p): %s", rap_allocator_name(p->self),
                     c->kind == KIND_PINNED ? "cudaFreeHost" : "cudaFree", ptr,
                     cudaGetErrorString(e));
  return RAP_OK;
}

static int cuda_init(rap_allocator *self, void *state, rap_options *opts) {
  const char *kind = "device";
  uint64_t device = 0;
  int st = rap_options_get_string(opts, "kind", &kind);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "device", &device);
  if (st != RAP_OK) return st;
  int count = 0;
  if (rapi_cuda_devices(rap_allocator_name(self), &count) != RAP_OK) return RAP_ERR_UNSUPPORTED;
  if (device >= (uint64_t)count)
    return rapi_fail(RAP_ERR_NOT_FOUND, "%s: device %llu does not exist; this machine has %d",
                     rap_allocator_name(self), (unsigned long long)device, count);
  cuda_impl *c = rapi_malloc(sizeof *c);
  if (c == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  c->kind = strcmp(kind, "pinned") == 0    ? KIND_PINNED
            : strcmp(kind, "managed") == 0 ? KIND_MANAGED
                                           : KIND_DEVICE;
  c->device = (int)device;
  /* 256: the runtime's documented least alignment */
  return rapi_tracked_init(state, self, c, cuda_raw_alloc, cuda_raw_free, false, 256);
}

const rap_strategy rapi_cuda_platform = {
    .version = RAP_STRATEGY_VERSION,
    .name = "CUDA",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = cuda_init,
    RAPI_TRACKED_METHODS,
};
