/* test_cuda_stream_ordered.c — StreamOrdered (CUDA's cudaMallocFromPoolAsync/cudaFreeAsync as a rap
 * allocator), device memory figures and shares of them, on a CUDA device: blocks on streams and on
 * the host, the race detector with a gated kernel, rap_release trimming a created pool, a stream
 * destroyed while its blocks live, and a CUDA graph that allocates, fills and frees through rap,
 * replayed and compared with the same work run eagerly, and a user's wrapper that the capture may
 * use only when it says it keeps no blocks. CUDA only; skips without a device.
 */
#include "gpu_test.h"
#include "kernels.h"
#include "rap_internal.h"

#include <rap/strategy.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static rap_allocator *make(rap_manager *rm, const char *spec) {
  rap_allocator *a = NULL;
  int st = rap_allocator_make_spec(rm, "so", spec, &a);
  if (st == RAP_ERR_UNSUPPORTED) return NULL;
  RAP_CHECK_OK(st);
  return a;
}

#define SETUP(spec)                                                                                \
  rap_manager *rm;                                                                                 \
  RAP_CHECK_OK(rap_manager_create(&rm));                                                           \
  rap_allocator *so = make(rm, spec);                                                              \
  if (so == NULL) {                                                                                \
    RAP_CHECK_OK(rap_manager_destroy(rm));                                                         \
    GPU_SKIP_NO_DEVICE();                                                                          \
  }

RAP_TEST(StreamOrdered, BlocksOnStreamsAndOnTheHost) {
  SETUP("StreamOrdered(device=0, pool=new, release_threshold=max)");
  rap_resource *r1, *host;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  void *a, *b, *z;
  RAP_CHECK_OK(rap_allocate(so, &a, 4 * MiB, r1));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r1), a, 4 * MiB, 0x3C) == 0);
  RAP_CHECK_OK(rap_allocate(so, &b, 1 * MiB, host));   /* ready for any use when it returns */
  RAP_CHECK(gpu_fill(gpuStreamLegacy, b, 1 * MiB, 0x11) == 0);
  RAP_CHECK_OK(rap_allocate(so, &z, 0, r1));
  RAP_CHECK(z != NULL);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK(gpu_all_bytes(a, 4 * MiB, 0x3C));
  rap_resource *owner;
  RAP_CHECK_OK(rap_pointer_resource(so, a, &owner));
  RAP_CHECK(owner == r1);
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(so, &s));
  RAP_CHECK_EQ(s.current_bytes, 5 * MiB);
  RAP_CHECK_EQ(s.allocation_count, 3);
  RAP_CHECK(s.actual_bytes >= 5 * MiB);   /* the pool's reserved memory */
  RAP_CHECK_OK(rap_allocator_check(so));
  RAP_CHECK_OK(rap_deallocate(so, a, NULL));   /* on r1, where it was allocated */
  RAP_CHECK_OK(rap_deallocate(so, b, host));
  RAP_CHECK_OK(rap_deallocate(so, z, r1));
  RAP_CHECK_STATUS(rap_deallocate(so, a, NULL), RAP_ERR_UNKNOWN_POINTER);
  /* A host_async queue is no stream. */
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_STATUS(rap_allocate(so, &a, 64, q), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "cuda resources or the host");
  /* release_threshold=max keeps the freed bytes; rap_release trims them once the frees ran. */
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  RAP_CHECK_OK(rap_allocator_stats(so, &s));
  RAP_CHECK(s.actual_bytes >= 5 * MiB);
  RAP_CHECK_OK(rap_release(so));
  RAP_CHECK_OK(rap_allocator_stats(so, &s));
  RAP_CHECK_EQ(s.actual_bytes, 0);
  RAP_CHECK(s.actual_high_watermark >= 5 * MiB);
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_resource_destroy(r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* r1's kernel writes its block late; r1 frees it; r2 allocates the same size at once. The pool
 * may hand r2 those bytes only once r1's free has run, after the kernel: r2's pattern stays.
 * (allow_internal_dependencies=0: otherwise CUDA may make r2 wait for r1's free, and r2's
 * synchronize below would wait for the gate.) */
RAP_TEST(StreamOrdered, RaceDetector) {
  SETUP("StreamOrdered(device=0, pool=new, release_threshold=max, allow_internal_dependencies=0)");
  rap_resource *r1, *r2;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r2));
  gpu_gate *gate;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  void *p, *q;
  RAP_CHECK_OK(rap_allocate(so, &p, 4 * MiB, r1));
  RAP_CHECK(gpu_gated_fill(rap_resource_cuda_stream(r1), gate, p, 4 * MiB, 0xAA) == 0);
  RAP_CHECK_OK(rap_deallocate(so, p, r1));
  RAP_CHECK_OK(rap_allocate(so, &q, 4 * MiB, r2));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r2), q, 4 * MiB, 0x55) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(r2));
  gpu_gate_open(gate);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK(gpu_all_bytes(q, 4 * MiB, 0x55));
  RAP_CHECK_OK(rap_deallocate(so, q, r2));
  gpu_gate_destroy(gate);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The stream goes while a block allocated on it lives: the block stays valid, and its free
 * without a resource goes to the legacy stream. */
RAP_TEST(StreamOrdered, StreamDestroyedWhileItsBlockLives) {
  SETUP("StreamOrdered(device=0)");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  void *p;
  RAP_CHECK_OK(rap_allocate(so, &p, 1 * MiB, r1));
  RAP_CHECK(gpu_fill(rap_resource_cuda_stream(r1), p, 1 * MiB, 0x7E) == 0);
  RAP_CHECK_OK(rap_resource_destroy(r1));
  RAP_CHECK(gpu_all_bytes(p, 1 * MiB, 0x7E));
  rap_resource *owner;
  RAP_CHECK_OK(rap_pointer_resource(so, p, &owner));
  RAP_CHECK(strcmp(rap_resource_kind(owner), "host") == 0);
  RAP_CHECK_OK(rap_deallocate(so, p, NULL));
  RAP_CHECK_OK(rap_allocator_check(so));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Capture: allocate through rap on the capturing stream, fill, copy out, free; the graph replays
 * it three times and the output is what the eager run wrote. Allocations in a capture are the
 * graph's memory nodes: rap's figures count them while capturing and are back to zero after. */
RAP_TEST(StreamOrdered, GraphCaptureAllocatesThroughRap) {
  SETUP("StreamOrdered(device=0)");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  cudaStream_t s = rap_resource_cuda_stream(r1);
  void *out_eager, *out_graph, *tmp;
  RAP_CHECK(cudaMalloc(&out_eager, 2 * MiB) == cudaSuccess);
  RAP_CHECK(cudaMalloc(&out_graph, 2 * MiB) == cudaSuccess);
  /* Eager. */
  RAP_CHECK_OK(rap_allocate(so, &tmp, 2 * MiB, r1));
  RAP_CHECK(gpu_fill(s, tmp, 2 * MiB, 0x5A) == 0);
  RAP_CHECK(cudaMemcpyAsync(out_eager, tmp, 2 * MiB, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(so, tmp, r1));
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  /* Captured. */
  RAP_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  RAP_CHECK_OK(rap_allocate(so, &tmp, 2 * MiB, r1));
  RAP_CHECK(gpu_fill(s, tmp, 2 * MiB, 0x5A) == 0);
  RAP_CHECK(cudaMemcpyAsync(out_graph, tmp, 2 * MiB, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(so, tmp, r1));
  cudaGraph_t graph;
  RAP_CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec;
  RAP_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 3; i++) {
    RAP_CHECK(cudaMemsetAsync(out_graph, 0, 2 * MiB, s) == cudaSuccess);
    RAP_CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
  }
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK(gpu_all_bytes(out_eager, 2 * MiB, 0x5A));
  RAP_CHECK(gpu_all_bytes(out_graph, 2 * MiB, 0x5A));
  rap_stats st;
  RAP_CHECK_OK(rap_allocator_stats(so, &st));
  RAP_CHECK_EQ(st.current_bytes, 0);
  RAP_CHECK_EQ(st.allocation_count, 0);
  RAP_CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  RAP_CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  RAP_CHECK(cudaFree(out_eager) == cudaSuccess);
  RAP_CHECK(cudaFree(out_graph) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_destroy(r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The device's figures, and SizeLimiter(DEVICE, limit=50%) refusing what passes half of them. */
RAP_TEST(StreamOrdered, DeviceMemoryAndAShareOfIt) {
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *dev, *pinned, *lim;
  if (rap_allocator_get(rm, "DEVICE", &dev) != RAP_OK) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    GPU_SKIP_NO_DEVICE();
  }
  size_t f = 0, t = 0, hf = 0, ht = 0, pf = 0, pt = 0;
  RAP_CHECK_OK(rap_allocator_memory_info(dev, &f, &t));
  size_t cf = 0, ct = 0;
  RAP_CHECK(cudaMemGetInfo(&cf, &ct) == cudaSuccess);
  RAP_CHECK_EQ(t, ct);
  RAP_CHECK(f > 0 && f <= t);
  RAP_CHECK_OK(rap_allocator_get(rm, "PINNED", &pinned));
  RAP_CHECK_OK(rap_allocator_memory_info(pinned, &pf, &pt));
  RAP_CHECK_OK(rapi_host_memory_info(&hf, &ht));
  RAP_CHECK_EQ(pt, ht);   /* pinned bytes are the host's */
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "half", "SizeLimiter(DEVICE, limit=50%)", &lim));
  void *p;
  RAP_CHECK_STATUS(rap_allocate(lim, &p, t / 2 + 4096, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "would pass the limit of");
  RAP_CHECK_OK(rap_allocate(lim, &p, 64 * MiB, NULL));
  RAP_CHECK_OK(rap_deallocate(lim, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A capture begun through rap: a ResourceAwarePool on the capturing stream refuses with a sentence
 * (its block would stay in the graph), and a block of that stream freed meanwhile stays its own;
 * ThreadSafe(StreamOrdered) serves the capture as graph memory nodes;
 * the graph replays; once the capture ended, the pool serves the stream again. */
RAP_TEST(StreamOrdered, CaptureThroughRapRefusesPoolsServesStreamOrdered) {
  SETUP("ThreadSafe(StreamOrdered(device=0))");
  rap_allocator *pool;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(DEVICE, initial_size=16MiB)", &pool));
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r1));
  cudaStream_t s = rap_resource_cuda_stream(r1);
  void *out, *tmp, *early, *p = NULL;
  RAP_CHECK(cudaMalloc(&out, 1 * MiB) == cudaSuccess);
  RAP_CHECK_OK(rap_allocate(pool, &early, 1 * MiB, r1));
  RAP_CHECK_OK(rap_resource_cuda_begin_capture(r1, cudaStreamCaptureModeRelaxed));
  RAP_CHECK_STATUS(rap_resource_cuda_begin_capture(r1, cudaStreamCaptureModeRelaxed), RAP_ERR_BUSY);
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 1 * MiB, r1), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "is capturing a graph");
  /* Freed without a resource, r1's block stays r1's, unfenced, until the capture ends: another
   * stream does not get it (the pool grows for it). */
  RAP_CHECK_OK(rap_deallocate(pool, early, NULL));
  rap_resource *r2;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r2));
  void *other;
  RAP_CHECK_OK(rap_allocate(pool, &other, 1 * MiB, r2));
  RAP_CHECK(other != early);
  RAP_CHECK_OK(rap_deallocate(pool, other, r2));
  RAP_CHECK_OK(rap_allocate(so, &tmp, 1 * MiB, r1));
  RAP_CHECK(gpu_fill(s, tmp, 1 * MiB, 0x6B) == 0);
  RAP_CHECK(cudaMemcpyAsync(out, tmp, 1 * MiB, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  RAP_CHECK_OK(rap_deallocate(so, tmp, r1));
  cudaGraph_t graph;
  RAP_CHECK_OK(rap_resource_cuda_end_capture(r1, &graph));
  RAP_CHECK_STATUS(rap_resource_cuda_end_capture(r1, &graph), RAP_ERR_INVALID);
  cudaGraphExec_t exec;
  RAP_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  RAP_CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK(gpu_all_bytes(out, 1 * MiB, 0x6B));
  RAP_CHECK_OK(rap_allocate(pool, &p, 1 * MiB, r1));   /* the capture is over */
  RAP_CHECK_OK(rap_deallocate(pool, p, r1));
  RAP_CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  RAP_CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  RAP_CHECK(cudaFree(out) == cudaSuccess);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_resource_destroy(r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The reuse switches are 0 or 1: any other value, 2 too, is refused with a sentence (2 once stood
 * for "not given" and was silently the pool's own setting). */
RAP_TEST(StreamOrdered, ReuseSwitchesAreZeroOrOne) {
  SETUP("StreamOrdered(device=0, pool=new, allow_opportunistic=0, follow_event_dependencies=1)");
  rap_allocator *bad = NULL;
  static const char *const specs[] = {"StreamOrdered(device=0, pool=new, allow_opportunistic=2)",
                                      "StreamOrdered(device=0, pool=new, follow_event_dependencies=2)",
                                      "StreamOrdered(device=0, pool=new, allow_internal_dependencies=3)"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", specs[i], &bad), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), "is 0 or 1");
    RAP_CHECK(bad == NULL);
  }
  (void)so;
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A user's wrapper that hands each request straight to its parent: with RAP_STRATEGY_PASS_THROUGH
 * a capturing stream may use it over StreamOrdered, as ThreadSafe; without the flag the manager
 * cannot know it keeps no blocks and refuses the capture with a sentence. */
typedef struct relay {
  rap_allocator *parent;
  void *live;   /* the one block this test keeps at a time */
} relay;

static int relay_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)opts;
  ((relay *)state)->parent = rap_allocator_parent(self);
  return RAP_OK;
}
static void relay_fini(rap_allocator *self, void *state) {
  (void)self;
  (void)state;
}
static int relay_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  relay *y = state;
  int st = rap_allocate(y->parent, out, bytes, r);
  if (st == RAP_OK) y->live = *out;
  return st;
}
static int relay_deallocate(void *state, void *ptr, rap_resource *r) {
  relay *y = state;
  int st = rap_deallocate(y->parent, ptr, r);
  if (st == RAP_OK && ptr == y->live) y->live = NULL;
  return st;
}
static int relay_stats(void *state, rap_stats *out) {
  return rap_allocator_stats(((relay *)state)->parent, out);
}
static int relay_owns(void *state, const void *ptr) { return ptr != NULL && ptr == ((relay *)state)->live; }

#define RELAY_TABLE(table_name, strategy_name, extra_flags)                                        \
  static const rap_strategy table_name = {                                                         \
      .version = RAP_STRATEGY_VERSION,                                                             \
      .name = strategy_name,                                                                       \
      .flags = RAP_STRATEGY_NEEDS_PARENT | (extra_flags),                                          \
      .state_size = sizeof(relay),                                                                 \
      .init = relay_init,                                                                          \
      .fini = relay_fini,                                                                          \
      .allocate = relay_allocate,                                                                  \
      .deallocate = relay_deallocate,                                                              \
      .stats = relay_stats,                                                                        \
      .owns = relay_owns,                                                                          \
  }
RELAY_TABLE(relay_pass_through, "RelayPassThrough", RAP_STRATEGY_PASS_THROUGH);
RELAY_TABLE(relay_plain, "RelayPlain", 0);

RAP_TEST(StreamOrdered, CaptureFollowsThePassThroughFlagOfAUserStrategy) {
  SETUP("StreamOrdered(device=0)");
  RAP_CHECK_OK(rap_strategy_register(rm, &relay_pass_through));
  RAP_CHECK_OK(rap_strategy_register(rm, &relay_plain));
  rap_allocator *through, *plain;
  RAP_CHECK_OK(rap_allocator_make(rm, "through", "RelayPassThrough", "so", "", &through));
  RAP_CHECK_OK(rap_allocator_make(rm, "plain", "RelayPlain", "so", "", &plain));
  rap_resource *r;
  RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &r));
  RAP_CHECK_OK(rap_resource_cuda_begin_capture(r, cudaStreamCaptureModeRelaxed));
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(plain, &p, 1 * MiB, r), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "is capturing a graph");
  RAP_CHECK_OK(rap_allocate(through, &p, 1 * MiB, r));   /* a memory node of the graph */
  RAP_CHECK_OK(rap_deallocate(through, p, r));
  cudaGraph_t graph;
  RAP_CHECK_OK(rap_resource_cuda_end_capture(r, &graph));
  RAP_CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  RAP_CHECK_OK(rap_allocate(plain, &p, 1 * MiB, r));   /* the capture is over */
  RAP_CHECK_OK(rap_deallocate(plain, p, r));
  RAP_CHECK_OK(rap_resource_synchronize(r));
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* What the device's default pool (cudaMallocAsync's, the one CuPy's MemoryAsyncPool and PyTorch's
 * cudaMallocAsync backend use) holds, in bytes: reserved and in use. */
static void default_pool_bytes(cudaMemPool_t pool, uint64_t *reserved, uint64_t *used) {
  RAP_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, reserved) == cudaSuccess);
  RAP_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, used) == cudaSuccess);
}

/* rap's pools take nothing from the device's default pool, whatever their platform (only
 * StreamOrdered's default `pool=` does, by asking for it): blocks of several sizes allocated,
 * written and freed on a stream, the pool released and destroyed, leave the default pool's reserved
 * and used bytes as they were. */
RAP_TEST(StreamOrdered, OtherPoolsLeaveTheDefaultPoolAlone) {
  static const char *const specs[] = {
      "ResourceAwarePool(DEVICE, initial_size=64MiB, next_size=32MiB, heuristic=never)",
      "ResourceAwarePool(DEVICE_VMM, initial_size=2MiB, next_size=2MiB)",
      "ResourceAwarePool(DeviceVmm(export=posix), initial_size=64MiB, next_size=2MiB)",
      "ResourceAwarePool(StreamOrdered(pool=new), initial_size=8MiB)",
      "QuickPool(PINNED)",
  };
  cudaMemPool_t dflt;
  if (cudaDeviceGetDefaultMemPool(&dflt, 0) != cudaSuccess) GPU_SKIP_NO_DEVICE();
  RAP_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  RAP_CHECK(cudaMemPoolTrimTo(dflt, 0) == cudaSuccess);
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    uint64_t r0, u0, r1, u1;
    default_pool_bytes(dflt, &r0, &u0);
    SETUP(specs[k]);
    rap_resource *s;
    RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &s));
    void *p[6];
    for (int i = 0; i < 6; i++) {
      RAP_CHECK_OK(rap_allocate(so, &p[i], ((size_t)1 << (10 + 3 * i)) + 512, s));
      if (k + 1 < sizeof specs / sizeof *specs)
        RAP_CHECK(cudaMemsetAsync(p[i], i, 4096, rap_resource_cuda_stream(s)) == cudaSuccess);
    }
    for (int i = 0; i < 6; i++) RAP_CHECK_OK(rap_deallocate(so, p[i], s));
    RAP_CHECK_OK(rap_resource_synchronize(s));
    RAP_CHECK_OK(rap_release(so));
    default_pool_bytes(dflt, &r1, &u1);
    if (r1 != r0 || u1 != u0)
      rap_test_fail(__FILE__, __LINE__, "%s: the default pool went from %llu reserved, %llu used to "
                    "%llu, %llu", specs[k], (unsigned long long)r0, (unsigned long long)u0,
                    (unsigned long long)r1, (unsigned long long)u1);
    RAP_CHECK_OK(rap_resource_destroy(s));
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}
