/* test_cuda_unmap_order.c — physical memory leaves a growable range only after every stream that
 * used it has passed: a kernel on another stream, or on another device, still writes a freed block
 * (held at a gate) while the pool wants its pages back (a release, growth past its peak). Nothing
 * is unmapped under the kernel (no fault), nothing else is placed there meanwhile (no foreign
 * write), no device or stream synchronize is made for it, and once the kernel's stream has passed
 * the pages go back. Run on the GPU machine also under compute-sanitizer's memcheck, racecheck and
 * synccheck. CUDA only; skips, saying why, where no device (or no second device) is usable.
 */
#include "../c/rap_test.h"
#include "../c/shared_helpers.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <rap/cuda.h>
#include <rap/strategy.h>   /* rap_allocator_alignment: the granularity */

#define MiB ((size_t)1 << 20)

static size_t mapped(rap_allocator *a) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s.actual_bytes;
}

static rap_resource *stream_on(rap_manager *rm, int device) {
  rap_resource *r = NULL;
  RAP_CHECK(cudaSetDevice(device) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  return r;
}

/* A block b of 32 pieces, allocated and freed on r, is written by a gated kernel on user (a
 * stream of `device`) that r's frees know of only through rap_record_resource. */
static void pages_wait_for(rap_manager *rm, rap_allocator *pool, rap_resource *r,
                           rap_resource *user, int device) {
  rap_allocator *vmm = rap_allocator_parent(pool);
  size_t g = rap_allocator_alignment(vmm);
  char *b = NULL, *other = NULL, *grown = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, 32 * g, r));
  gpu_gate *gate = NULL;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  RAP_CHECK(cudaSetDevice(device) == cudaSuccess);
  RAP_CHECK(gpu_gated_fill(rap_resource_cuda_stream(user), gate, b, 32 * g, 0x5A) == 0);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  RAP_CHECK_OK(rap_record_resource(pool, b, user));
  RAP_CHECK_OK(rap_deallocate(pool, b, r));
  size_t held = mapped(vmm);
  /* The pool wants its pages back: a release, then growth past its peak, which gives free pieces
   * back first. b's pages stay: its use on user has not passed. */
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(mapped(vmm), held);
  RAP_CHECK_OK(rap_allocate(pool, (void **)&grown, held + 4 * g, r));
  RAP_CHECK(grown + held + 4 * g <= b || grown >= b + 32 * g);
  /* Nor is b placed again, on r or anywhere: r's new block is written and must stay as written. */
  RAP_CHECK_OK(rap_allocate(pool, (void **)&other, 32 * g, r));
  RAP_CHECK(other + 32 * g <= b || other >= b + 32 * g);
  cudaStream_t s = rap_resource_cuda_stream(r);
  RAP_CHECK(gpu_fill(s, other, 32 * g, 0x11) == 0);
  RAP_CHECK(gpu_fill(s, grown, held + 4 * g, 0x22) == 0);
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  gpu_gate_open(gate);
  RAP_CHECK(cudaSetDevice(device) == cudaSuccess);
  RAP_CHECK(cudaStreamSynchronize(rap_resource_cuda_stream(user)) == cudaSuccess);   /* no fault */
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  gpu_gate_destroy(gate);
  RAP_CHECK(gpu_all_bytes(other, 32 * g, 0x11));   /* no foreign write */
  RAP_CHECK(gpu_all_bytes(grown, held + 4 * g, 0x22));
  RAP_CHECK_OK(rap_allocator_check(pool));
  /* The kernel's stream has passed: now b's pages go back. */
  RAP_CHECK_OK(rap_deallocate(pool, other, r));
  RAP_CHECK_OK(rap_deallocate(pool, grown, r));
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(mapped(vmm) < 32 * g);
  RAP_CHECK_OK(rap_allocator_check(pool));
  (void)rm;
}

/* The pool over pieces (piece=2MiB), or the default one (RAP_DEFAULT_DEVICE_SPEC on device 0: its
 * release gives back the mappings wholly inside free blocks). */
static rap_allocator *pool_or_skip(rap_manager *rm, bool the_default) {
  char spec[512] = "ResourceAwarePool(DeviceVmm(piece=2MiB), initial_size=64MiB, next_size=2MiB)";
  if (the_default) default_spec_on_0(spec, sizeof spec, "%s");
  rap_allocator *pool = make_or_skip(rm, "pool", spec);
  if (rap_allocator_alignment(rap_allocator_parent(pool)) != 2 * MiB) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("the device's granularity is not the 2 MiB piece this test is sized for");
  }
  return pool;
}

static void on_another_stream(bool the_default) {
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = pool_or_skip(rm, the_default);
  pages_wait_for(rm, pool, stream_on(rm, 0), stream_on(rm, 0), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

static void on_another_device(bool the_default) {
  int n = 0, can = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2 ||
      cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    RAP_SKIP("needs two CUDA devices, the second able to reach the first's memory (%d found)", n);
  }
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool = pool_or_skip(rm, the_default);
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));
  pages_wait_for(rm, pool, stream_on(rm, 0), stream_on(rm, 1), 1);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(CudaUnmapOrder, PagesWaitForAnotherStreamsKernel) { on_another_stream(false); }
RAP_TEST(CudaUnmapOrder, PagesWaitForAnotherDevicesKernel) { on_another_device(false); }
/* The default pool has no pieces: its release gives back whole mappings inside free blocks. */
RAP_TEST(CudaUnmapOrder, TheDefaultsPagesWaitForAnotherStreamsKernel) { on_another_stream(true); }
RAP_TEST(CudaUnmapOrder, TheDefaultsPagesWaitForAnotherDevicesKernel) { on_another_device(true); }
