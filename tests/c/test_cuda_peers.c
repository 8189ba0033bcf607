/* test_cuda_peers.c — device memory and the streams of other devices: refused until the device is
 * given access (cudaMalloc'd chunks, StreamOrdered's pool, DeviceVmm's mappings), then kernels on
 * device 1 read and write device 0's blocks; taken back, refused again; cross_resource=wait between
 * streams of two devices; one pool used by streams of both. Needs two CUDA devices with a peer path
 * between them, and skips otherwise (the refusals without a GPU are in test_peers.c).
 */
#include "../cuda/kernels.h"
#include "rap_internal.h"
#include "rap_test.h"

#include <cuda_runtime_api.h>
#include <rap/cuda.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static void need_two_devices(void) {
  int n = 0, can = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2 ||
      cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    RAP_SKIP("needs two CUDA devices, the second able to reach the first's memory (%d found)", n);
  }
}

static rap_resource *stream_on(rap_manager *rm, int device) {
  rap_resource *r = NULL;
  RAP_CHECK(cudaSetDevice(device) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  return r;
}

/* Device 1's kernels fill a block of device 0's memory, copy it into device 1's own memory, and
 * the bytes are checked on both sides. */
static void kernels_on_device1(rap_resource *r1, void *block, int value) {
  void *mine = NULL;
  RAP_CHECK(cudaSetDevice(1) == cudaSuccess);
  RAP_CHECK(cudaMalloc(&mine, MiB) == cudaSuccess);
  cudaStream_t s = rap_resource_cuda_stream(r1);
  RAP_CHECK(gpu_fill(s, block, MiB, value) == 0);
  RAP_CHECK(gpu_copy(s, mine, block, MiB) == 0);
  RAP_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  RAP_CHECK(gpu_all_bytes(block, MiB, value));
  RAP_CHECK(gpu_all_bytes(mine, MiB, value));
  RAP_CHECK(cudaFree(mine) == cudaSuccess);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
}

static void refused_then_granted(const char *spec) {
  need_two_devices();
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", spec, &pool));
  rap_resource *r0 = stream_on(rm, 0), *r1 = stream_on(rm, 1);
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, MiB, r1), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "is a stream of device 1");
  RAP_CHECK_OK(rap_allocate(pool, &p, MiB, r0));
  RAP_CHECK_STATUS(rap_deallocate(pool, p, r1), RAP_ERR_INVALID);   /* the block stays r0's */
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));          /* twice: no harm */
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 0, 1));          /* its own device: nothing */
  kernels_on_device1(r1, p, 0x3C);   /* r0's block, used on device 1 (which synchronizes) */
  RAP_CHECK_OK(rap_deallocate(pool, p, r0));
  void *q = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &q, MiB, r1));
  kernels_on_device1(r1, q, 0x5A);
  RAP_CHECK_OK(rap_deallocate(pool, q, r1));
  rap_allocator *above;   /* made after the grant: it inherits it */
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "above", "ThreadSafe(pool)", &above));
  RAP_CHECK_OK(rap_allocate(above, &q, MiB, r1));
  RAP_CHECK_OK(rap_deallocate(above, q, r1));
  RAP_CHECK_OK(rap_allocator_set_peer_access(above, 1, 0));         /* taken back, for both */
  RAP_CHECK_STATUS(rap_allocate(pool, &q, MiB, r1), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocate(above, &q, MiB, r1), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Peers, QuickPoolOverDevice) { refused_then_granted("QuickPool(DEVICE::0, initial_size=4MiB)"); }

RAP_TEST(Peers, ResourceAwarePoolOverDevice) {
  refused_then_granted("ResourceAwarePool(DEVICE::0, initial_size=4MiB)");
}

RAP_TEST(Peers, StreamOrderedPool) { refused_then_granted("StreamOrdered(device=0, pool=new)"); }

RAP_TEST(Peers, PoolOverDeviceVmm) {
  refused_then_granted("QuickPool(DeviceVmm(device=0, reserve=1GiB), initial_size=2MiB, next_size=2MiB)");
}

/* peers= on the platform: the pool serves device 1's streams from the start, and memory mapped
 * after the grant (the pool grows) is reachable too. */
RAP_TEST(Peers, PeersOptionOnThePlatforms) {
  need_two_devices();
  static const char *const specs[] = {
      "ResourceAwarePool(DeviceVmm(device=0, reserve=1GiB, peers=all), initial_size=2MiB, next_size=2MiB)",
      "ThreadSafe(StreamOrdered(device=0, pool=new, peers=1))",
  };
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    rap_manager *rm;
    RAP_CHECK_OK(rap_manager_create(&rm));
    rap_allocator *pool;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", specs[i], &pool));
    rap_resource *r1 = stream_on(rm, 1);
    void *p[8];
    for (int k = 0; k < 8; k++) {   /* 8 MiB: the DeviceVmm pool grows past its first granule */
      RAP_CHECK_OK(rap_allocate(pool, &p[k], MiB, r1));
      kernels_on_device1(r1, p[k], 0x10 + k);
    }
    for (int k = 0; k < 8; k++) RAP_CHECK_OK(rap_deallocate(pool, p[k], r1));
    RAP_CHECK_OK(rap_resource_synchronize(r1));
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *bad;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "StreamOrdered(device=0, peers=1-2)", &bad),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "option 'peers'");
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "StreamOrdered(device=0, peers=4000)", &bad),
                   RAP_ERR_NOT_FOUND);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A block freed on device 1's stream while a gated kernel there still writes it: a stream of
 * device 0 takes it (cross_resource=wait) and waits for device 1's event on the GPU, so its own
 * fill lands after device 1's. */
RAP_TEST(Peers, CrossResourceWaitBetweenDevices) {
  need_two_devices();
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(DEVICE::0, initial_size=4MiB, "
                                       "next_size=4MiB, heuristic=never, cross_resource=wait)", &pool));
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));
  rap_resource *r0 = stream_on(rm, 0), *r1 = stream_on(rm, 1);
  gpu_gate *gate;
  /* The kernels are loaded on each device before the gated one runs: lazy loading on device 0
   * would otherwise wait for device 1's gated kernel inside gpu_fill, not in the pool. */
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  gpu_gate_destroy(gate);
  RAP_CHECK(cudaSetDevice(1) == cudaSuccess);
  RAP_CHECK(gpu_gate_create(&gate) == 0);   /* mapped for device 1's kernel */
  void *p, *q;
  RAP_CHECK_OK(rap_allocate(pool, &p, 4 * MiB, r1));
  RAP_CHECK(gpu_gated_fill(rap_resource_cuda_stream(r1), gate, p, 4 * MiB, 0xAA) == 0);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(pool, p, r1));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RAP_CHECK_OK(rap_allocate(pool, &q, 4 * MiB, r0));   /* no host wait: device 1 is still gated */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  if (waited >= 1.0) fprintf(stderr, "rap_allocate on device 0's stream took %.2f s\n", waited);
  RAP_CHECK(waited < 1.0);
  RAP_CHECK(q == p);
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(pool, &s));
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r0), q, 4 * MiB, 0x55) == 0);
  RAP_CHECK(cudaStreamQuery(rap_resource_cuda_stream(r0)) == cudaErrorNotReady);   /* behind device 1 */
  (void)cudaGetLastError();
  gpu_gate_open(gate);
  RAP_CHECK_OK(rap_resource_synchronize(r0));
  RAP_CHECK(gpu_all_bytes(q, 4 * MiB, 0x55));   /* device 0's fill ran after device 1's */
  RAP_CHECK_OK(rap_deallocate(pool, q, r0));
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  gpu_gate_destroy(gate);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* One ResourceAwarePool of device 0 serving streams of both devices at once: blocks made on one
 * device's stream, written there, freed on the other's after it read them. */
RAP_TEST(Peers, OnePoolStreamsOfBothDevices) {
  need_two_devices();
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(DEVICE::0, initial_size=8MiB)", &pool));
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));
  rap_resource *r[2] = {stream_on(rm, 0), stream_on(rm, 1)};
  void *out[2] = {NULL, NULL};
  for (int d = 0; d < 2; d++) {
    RAP_CHECK(cudaSetDevice(d) == cudaSuccess);
    RAP_CHECK(cudaMalloc(&out[d], 64 * 1024) == cudaSuccess);
  }
  for (int i = 0; i < 200; i++) {
    int a = i % 2, b = 1 - a;
    void *p;
    size_t n = (size_t)(i % 16 + 1) * 4096;
    RAP_CHECK_OK(rap_allocate(pool, &p, n, r[a]));
    RAP_CHECK(cudaSetDevice(a) == cudaSuccess);
    RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r[a]), p, n, i & 0xFF) == 0);
    RAP_CHECK(cudaStreamSynchronize(rap_resource_cuda_stream(r[a])) == cudaSuccess);
    RAP_CHECK(cudaSetDevice(b) == cudaSuccess);
    RAP_CHECK_OK(rap_record_resource(pool, p, r[b]));
    RAP_CHECK(gpu_copy(rap_resource_cuda_stream(r[b]), out[b], p, n < 65536 ? n : 65536) == 0);
    RAP_CHECK_OK(rap_deallocate(pool, p, r[a]));
    RAP_CHECK(cudaStreamSynchronize(rap_resource_cuda_stream(r[b])) == cudaSuccess);
    RAP_CHECK(gpu_all_bytes(out[b], n < 65536 ? n : 65536, i & 0xFF));
  }
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  RAP_CHECK_OK(rap_allocator_check(pool));
  for (int d = 0; d < 2; d++) RAP_CHECK(cudaFree(out[d]) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_synchronize(r[0]));
  RAP_CHECK_OK(rap_resource_synchronize(r[1]));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
