/* test_cuda_peers.c — device memory and the streams of other devices: refused until the device is
 * given access (cudaMalloc'd chunks, StreamOrdered's pool, DeviceVmm's mappings), then kernels on
 * device 1 read and write device 0's blocks; taken back, refused again; cross_resource=wait between
 * streams of two devices; one pool used by streams of both. Needs two CUDA devices with a peer path
 * between them, and skips otherwise (the refusals without a GPU are in tests/c/test_peers.c).
 */
#include "../c/rap_test.h"
#include "kernels.h"
#include "rap_internal.h"

#include <cuda_runtime_api.h>
#include <rap/cuda.h>
#include <pthread.h>
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

/* A ThreadCache over device 0's memory caches a block that device 1's stream freed; then device 1's
 * access is taken back. The cached block is the stream's still (its work may touch it), and it goes
 * back to the pool pending on that stream, never dropped: the stream's destroy succeeds and the
 * manager goes with nothing leaked. */
static int warnings_seen;
static char first_warning[512];
static void count_warnings(int level, const char *message, void *user) {
  (void)user;
  if (level < RAP_LOG_WARN) return;
  if (__atomic_fetch_add(&warnings_seen, 1, __ATOMIC_RELAXED) == 0)
    snprintf(first_warning, sizeof first_warning, "%s", message);
}

RAP_TEST(Peers, RevokedAccessKeepsCachedBlocks) {
  need_two_devices();
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(ResourceAwarePool(DEVICE::0, initial_size=8MiB))", &tc));
  rap_allocator *inner = rap_allocator_parent(tc);
  RAP_CHECK_OK(rap_allocator_set_peer_access(tc, 1, 1));
  rap_resource *r1 = stream_on(rm, 1);
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(tc, &p, 4096, r1));
  RAP_CHECK_OK(rap_deallocate(tc, p, r1));   /* into this thread's cache */
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(tc, &s));
  RAP_CHECK(s.cached_count >= 1);   /* the block, and what the cache's refill took with it */
  __atomic_store_n(&warnings_seen, 0, __ATOMIC_RELAXED);
  RAP_CHECK_OK(rap_log_set_handler(count_warnings, NULL));
  RAP_CHECK_OK(rap_allocator_set_peer_access(tc, 1, 0));
  RAP_CHECK_STATUS(rap_allocate(tc, &p, 4096, r1), RAP_ERR_INVALID);   /* not handed to r1 again */
  int st = rap_resource_destroy(r1);
  char why[512];
  snprintf(why, sizeof why, "%s", rap_last_error());
  RAP_CHECK_OK(rap_allocator_stats(inner, &s));
  int st_mgr = RAP_OK;
  if (st == RAP_OK) st_mgr = rap_manager_destroy(rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  if (st != RAP_OK) rap_test_fail(__FILE__, __LINE__, "rap_resource_destroy(device 1's stream): %s", why);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_OK(st_mgr);
  if (warnings_seen != 0) rap_test_fail(__FILE__, __LINE__, "%d warnings, the first: %s", warnings_seen, first_warning);
}

/* Threads free blocks of streams of both devices while their own current device is the other one:
 * real streams and each device's legacy default stream. Fences (events recorded on the streams),
 * polls, synchronizes and waits between the devices all succeed, nothing is logged, and every
 * block comes back; each thread's current device is what it set. */
typedef struct cross_arg {
  rap_allocator *pool;
  rap_resource *r[4];
  int mine;          /* the thread's current device: the other one than its streams' */
  int failures;
  char why[256];
} cross_arg;

static void *cross_thread(void *arg) {
  cross_arg *a = arg;
  if (cudaSetDevice(a->mine) != cudaSuccess) {
    a->failures++;
    return NULL;
  }
  void *p[40];
  for (int round = 0; round < 20; round++) {
    rap_resource *r = a->r[round % 4];
    int n = 20 + round % 20;   /* past the eager fence of 16 pending blocks */
    for (int i = 0; i < n; i++)
      if (rap_allocate(a->pool, &p[i], 4096 * (size_t)(1 + i % 7), r) != RAP_OK) {
        snprintf(a->why, sizeof a->why, "allocate: %s", rap_last_error());
        a->failures++;
        p[i] = NULL;
      }
    for (int i = 0; i < n; i++)
      if (p[i] != NULL && rap_deallocate(a->pool, p[i], r) != RAP_OK) {
        snprintf(a->why, sizeof a->why, "deallocate: %s", rap_last_error());
        a->failures++;
      }
    if (round % 5 == 4 && rap_resource_synchronize(r) != RAP_OK) {
      snprintf(a->why, sizeof a->why, "synchronize: %s", rap_last_error());
      a->failures++;
    }
  }
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || now != a->mine) {
    snprintf(a->why, sizeof a->why, "the thread's current device became %d", now);
    a->failures++;
  }
  return NULL;
}

RAP_TEST(Peers, StreamCallsWhateverTheCurrentDevice) {
  need_two_devices();
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ThreadSafe(ResourceAwarePool(DEVICE::0, initial_size=64MiB, cross_resource=wait))", &pool));
  RAP_CHECK_OK(rap_allocator_set_peer_access(pool, 1, 1));
  rap_resource *streams[2][4];
  for (int d = 0; d < 2; d++) {
    RAP_CHECK(cudaSetDevice(d) == cudaSuccess);
    for (int k = 0; k < 3; k++) RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &streams[d][k]));
    RAP_CHECK_OK(rap_resource_create_cuda(rm, (cudaStream_t)0, &streams[d][3]));   /* legacy default */
  }
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  __atomic_store_n(&warnings_seen, 0, __ATOMIC_RELAXED);
  RAP_CHECK_OK(rap_log_set_handler(count_warnings, NULL));
  cross_arg args[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    int dev = t % 2;   /* the streams' device; the thread runs with the other one current */
    args[t] = (cross_arg){.pool = pool, .mine = 1 - dev};
    for (int k = 0; k < 4; k++) args[t].r[k] = streams[dev][k];
    RAP_CHECK(pthread_create(&th[t], NULL, cross_thread, &args[t]) == 0);
  }
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  /* Blocks of device 1's streams handed to device 0's (the wait between the devices' streams). */
  for (int i = 0; i < 40; i++) {
    void *p = NULL;
    RAP_CHECK(cudaSetDevice(i % 2) == cudaSuccess);
    RAP_CHECK_OK(rap_allocate(pool, &p, 4096 * (size_t)(1 + i % 5), streams[i % 2][i % 4]));
    RAP_CHECK_OK(rap_deallocate(pool, p, streams[i % 2][i % 4]));
    RAP_CHECK_OK(rap_allocate(pool, &p, 4096 * (size_t)(1 + i % 5), streams[1 - i % 2][(i + 1) % 4]));
    RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  }
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 4; k++) RAP_CHECK_OK(rap_resource_synchronize(streams[d][k]));
  for (int t = 0; t < 4; t++)
    if (args[t].failures) rap_test_fail(__FILE__, __LINE__, "thread %d: %d failures, the last: %s", t, args[t].failures, args[t].why);
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(pool, &s));
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK(cudaSetDevice(1) == cudaSuccess);   /* the teardown's fences, from the other device too */
  int st = rap_manager_destroy(rm);
  RAP_CHECK(cudaSetDevice(0) == cudaSuccess);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  RAP_CHECK_OK(st);
  if (warnings_seen != 0) rap_test_fail(__FILE__, __LINE__, "%d warnings, the first: %s", warnings_seen, first_warning);
}
