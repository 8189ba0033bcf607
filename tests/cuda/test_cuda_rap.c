/* test_cuda_rap.c — the ResourceAwarePool on CUDA streams: the race detector with a gated kernel
 * over DEVICE, PINNED and UM pools, cross_resource=wait under a busy owner, same-stream reuse with
 * no event recorded, and lifetimes: streams destroyed after many threads used them, a queued wait
 * outliving the stream it waits for; the same rule under a ThreadCache, with frees from other
 * threads and streams going while caches hold blocks. Skips where no device is usable. A HIP build
 * runs the same source on HIP streams (gpu_test.h: suites HipResourceAwarePool, ...).
 */
#include "../c/gate.h"
#include "gpu_test.h"
#include "kernels.h"
#include "rap_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

typedef struct env {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *r1, *r2;
  gpu_gate *gate;
} env;

static void setup(env *e, const char *strategy, const char *parent, const char *options) {
  RAP_CHECK_OK(rap_manager_create(&e->rm));
  rap_allocator *a;
  int st = rap_allocator_get(e->rm, parent, &a);
  if (st == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK_OK(rap_manager_destroy(e->rm));
    GPU_SKIP_NO_DEVICE();
  }
  RAP_CHECK_OK(st);
  RAP_CHECK_OK(rap_allocator_make(e->rm, "pool", strategy, parent, options, &e->pool));
  RAP_CHECK_OK(gpu_resource_create_stream(e->rm, &e->r1));
  RAP_CHECK_OK(gpu_resource_create_stream(e->rm, &e->r2));
  RAP_CHECK(gpu_gate_create(&e->gate) == 0);
}

static void teardown(env *e) {
  gpu_gate_open(e->gate);
  RAP_CHECK_OK(rap_resource_synchronize(e->r1));
  RAP_CHECK_OK(rap_resource_synchronize(e->r2));
  RAP_CHECK_OK(rap_allocator_check(e->pool));
  RAP_CHECK_OK(rap_manager_destroy(e->rm));
  gpu_gate_destroy(e->gate);
}

/* r1's kernel writes its block late; r2 allocates the same size and writes its own pattern. */
static void race(const char *strategy, const char *parent, bool expect_hazard) {
  env e;
  void *p, *q;
  setup(&e, strategy, parent, "initial_size=64MiB");
  RAP_CHECK_OK(rap_allocate(e.pool, &p, 4 * MiB, e.r1));
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, p, 4 * MiB, 0xAA) == 0);
  RAP_CHECK_OK(rap_deallocate(e.pool, p, e.r1));
  RAP_CHECK_OK(rap_allocate(e.pool, &q, 4 * MiB, e.r2));
  RAP_CHECK(gpu_fill(gpu_resource_stream(e.r2), q, 4 * MiB, 0x55) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(e.r2));
  gpu_gate_open(e.gate);
  RAP_CHECK_OK(rap_resource_synchronize(e.r1));
  RAP_CHECK_EQ(q == p, expect_hazard);
  RAP_CHECK_EQ(gpu_all_bytes(q, 4 * MiB, 0x55), !expect_hazard);
  RAP_CHECK_OK(rap_deallocate(e.pool, q, e.r2));
  teardown(&e);
}

GPU_TEST(ResourceAwarePool, RaceDetectorDevice) { race("ResourceAwarePool", "DEVICE", false); }
GPU_TEST(ResourceAwarePool, RaceDetectorPinned) { race("ResourceAwarePool", "PINNED", false); }
GPU_TEST(ResourceAwarePool, RaceDetectorManaged) { race("ResourceAwarePool", "UM", false); }
GPU_TEST(QuickPool, RaceDetectorShowsTheHazard) { race("QuickPool", "DEVICE", true); }

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

GPU_TEST(ResourceAwarePool, CrossResourceWaitUnderBusyOwner) {
  env e;
  void *p, *q;
  setup(&e, "ResourceAwarePool", "DEVICE",
        "initial_size=4MiB next_size=4MiB heuristic=never cross_resource=wait");
  RAP_CHECK_OK(rap_allocate(e.pool, &p, 4 * MiB, e.r1));
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, p, 4 * MiB, 0xAA) == 0);
  RAP_CHECK_OK(rap_deallocate(e.pool, p, e.r1));
  double t0 = seconds();
  RAP_CHECK_OK(rap_allocate(e.pool, &q, 4 * MiB, e.r2));   /* no host block: r1 is still gated */
  RAP_CHECK(seconds() - t0 < 1.0);
  RAP_CHECK(q == p);
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(e.pool, &s));
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK(gpu_fill(gpu_resource_stream(e.r2), q, 4 * MiB, 0x55) == 0);
  gpu_gate_open(e.gate);
  RAP_CHECK_OK(rap_resource_synchronize(e.r2));
  RAP_CHECK(gpu_all_bytes(q, 4 * MiB, 0x55));   /* r2's fill ran after r1's */
  RAP_CHECK_OK(rap_deallocate(e.pool, q, e.r2));
  teardown(&e);
}

GPU_TEST(ResourceAwarePool, SameStreamReuseRecordsNoEvent) {
  env e;
  void *p;
  setup(&e, "ResourceAwarePool", "DEVICE", "initial_size=64MiB");
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, NULL, 0, 0) == 0);
  for (int i = 0, n = gpu_test_rounds(10000); i < n; i++) {
    RAP_CHECK_OK(rap_allocate(e.pool, &p, (size_t)(i % 7 + 1) * 4096, e.r1));
    RAP_CHECK_OK(rap_deallocate(e.pool, p, e.r1));
  }
  RAP_CHECK_EQ(e.r1->events_created, 0);
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(e.pool, &s));
  RAP_CHECK_EQ(s.chunk_count, 1);
  teardown(&e);
}

GPU_TEST(ResourceAwarePool, WrappedStreamsAreOneStream) {
  env e;
  void *p;
  setup(&e, "ResourceAwarePool", "DEVICE", "initial_size=64MiB");
  rap_resource *alias;
  RAP_CHECK_OK(gpu_resource_create(e.rm, gpu_resource_stream(e.r1), &alias));
  RAP_CHECK_OK(rap_allocate(e.pool, &p, 4096, e.r1));
  RAP_CHECK_OK(rap_deallocate(e.pool, p, alias));   /* same stream: not a wrong resource */
  rap_resource *legacy;
  RAP_CHECK_OK(gpu_resource_create(e.rm, 0, &legacy));
  RAP_CHECK_OK(rap_allocate(e.pool, &p, 4096, legacy));
  RAP_CHECK_STATUS(rap_deallocate(e.pool, p, e.r2), RAP_ERR_WRONG_RESOURCE);
  RAP_CHECK_OK(rap_deallocate(e.pool, p, legacy));
  teardown(&e);
}

/* ---- lifetimes ---------------------------------------------------------------------------------
 * 16 threads run one ThreadSafe(ResourceAwarePool(DEVICE)) over 8 streams, recording some blocks
 * on a second stream before freeing them. Once the device is synchronized every stream may go:
 * a stream's uses have passed, and blocks still waiting on another stream's use move to it. */
enum { LT_THREADS = 16, LT_STREAMS = 8, LT_OPS = 2000 };
typedef struct lt_arg {
  rap_allocator *ts;
  rap_resource **streams;
  int id, failures;
} lt_arg;

static void *lt_worker(void *p) {
  lt_arg *a = p;
  rap_resource *mine = a->streams[a->id % LT_STREAMS], *other = a->streams[(a->id + 1) % LT_STREAMS];
  void *ring[8] = {0};
  for (int i = 0, n = gpu_test_rounds(LT_OPS); i < n; i++) {
    int k = i % 8;
    if (ring[k] != NULL) {
      if (rap_deallocate(a->ts, ring[k], mine) != RAP_OK) a->failures++;
      ring[k] = NULL;
    }
    if (rap_allocate(a->ts, &ring[k], (size_t)(256 << (i % 9)), mine) != RAP_OK) {
      a->failures++;
      continue;
    }
    if (gpu_fill(gpu_resource_stream(mine), ring[k], 256, a->id) != 0) a->failures++;
    if (i % 5 == 0 && rap_record_resource(a->ts, ring[k], other) != RAP_OK) a->failures++;
  }
  for (int k = 0; k < 8; k++)
    if (ring[k] != NULL && rap_deallocate(a->ts, ring[k], mine) != RAP_OK) a->failures++;
  return NULL;
}

GPU_TEST(Lifetimes, StreamsGoAfterDeviceSynchronize) {
  env e;
  setup(&e, "ResourceAwarePool", "DEVICE", "initial_size=64MiB");
  rap_allocator *ts;
  RAP_CHECK_OK(rap_allocator_make(e.rm, "ts", "ThreadSafe", "pool", NULL, &ts));
  rap_resource *streams[LT_STREAMS];
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(gpu_resource_create_stream(e.rm, &streams[i]));
  pthread_t th[LT_THREADS];
  lt_arg args[LT_THREADS];
  for (int i = 0; i < LT_THREADS; i++) {
    args[i] = (lt_arg){ts, streams, i, 0};
    RAP_CHECK(pthread_create(&th[i], NULL, lt_worker, &args[i]) == 0);
  }
  int failures = 0;
  for (int i = 0; i < LT_THREADS; i++) {
    pthread_join(th[i], NULL);
    failures += args[i].failures;
  }
  RAP_CHECK_EQ(failures, 0);
  RAP_CHECK(gpuDeviceSynchronize() == gpuSuccess);
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(rap_resource_destroy(streams[i]));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(e.pool, &s));
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.pending_count, 0);   /* every stream has passed everything */
  RAP_CHECK_OK(rap_allocator_check(e.pool));
  teardown(&e);
}

/* A host_async queue waits (cross_resource=wait) for a gated stream's event; the stream is then
 * destroyed before the queued wait runs: the wait must still find the event (the resource's memory
 * stays while the wait refers to it), and the queue's write lands after the stream's. */
static void lt_fill_host(void *arg) {
  void **p = arg;
  memset(*p, 0x33, 4096);
}

GPU_TEST(Lifetimes, QueuedWaitOutlivesTheStream) {
  env e;
  setup(&e, "ResourceAwarePool", "PINNED",
        "initial_size=1MiB next_size=1MiB heuristic=never cross_resource=wait wait_above=0");
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(e.rm, &q));
  gate hold;
  gate_init(&hold);
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, &hold));   /* the wait runs only after r1 is gone */
  void *p, *mine;
  RAP_CHECK_OK(rap_allocate(e.pool, &p, 1 * MiB, e.r1));
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, p, 4096, 0xAA) == 0);
  RAP_CHECK_OK(rap_deallocate(e.pool, p, e.r1));
  RAP_CHECK_OK(rap_allocate(e.pool, &mine, 1 * MiB, q));   /* queues a wait for r1's event */
  RAP_CHECK(mine == p);
  RAP_CHECK_OK(rap_resource_submit(q, lt_fill_host, &mine));
  gpu_gate_open(e.gate);
  RAP_CHECK_OK(rap_resource_destroy(e.r1));   /* legal: r1 owns nothing live */
  gate_open(&hold);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK(all_bytes(mine, 4096, 0x33));
  RAP_CHECK_OK(rap_deallocate(e.pool, mine, q));
  RAP_CHECK_OK(rap_resource_synchronize(e.r2));
  RAP_CHECK_OK(rap_allocator_check(e.pool));
  RAP_CHECK_OK(rap_manager_destroy(e.rm));
  gpu_gate_destroy(e.gate);
  gate_destroy(&hold);
}

/* ---- ThreadCache over the ResourceAwarePool ----------------------------------------------------
 * A block in a thread's cache is pending on its stream like any other: the stream that freed it may
 * have it back at once, another stream only once the stream's work on it has passed. Also when the
 * block was freed by another thread than the one whose cache handed it out. */
static void tc_setup(env *e) {
  setup(e, "ResourceAwarePool", "DEVICE", "initial_size=64MiB");
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_make(e->rm, "tc", "ThreadCache", "pool", NULL, &tc));
}

GPU_TEST(ThreadCache, RaceDetectorDevice) {
  env e;
  tc_setup(&e);
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_get(e.rm, "tc", &tc));
  void *p, *q, *again;
  RAP_CHECK_OK(rap_allocate(tc, &p, 64 << 10, e.r1));
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, p, 64 << 10, 0xAA) == 0);
  rap_stats before, s;
  RAP_CHECK_OK(rap_allocator_stats(tc, &before));   /* the refill brought a few more */
  RAP_CHECK_OK(rap_deallocate(tc, p, e.r1));   /* into this thread's cache, for r1 */
  RAP_CHECK_OK(rap_allocator_stats(tc, &s));
  RAP_CHECK_EQ(s.cached_count, before.cached_count + 1);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_OK(rap_allocate(tc, &q, 64 << 10, e.r2));
  RAP_CHECK(q != p);
  RAP_CHECK(gpu_fill(gpu_resource_stream(e.r2), q, 64 << 10, 0x55) == 0);
  RAP_CHECK_OK(rap_allocate(tc, &again, 64 << 10, e.r1));   /* r1's own order makes it safe */
  RAP_CHECK(again == p);
  RAP_CHECK(gpu_fill(gpu_resource_stream(e.r1), again, 64 << 10, 0x11) == 0);
  RAP_CHECK_OK(rap_resource_synchronize(e.r2));
  gpu_gate_open(e.gate);
  RAP_CHECK_OK(rap_resource_synchronize(e.r1));
  RAP_CHECK(gpu_all_bytes(q, 64 << 10, 0x55));
  RAP_CHECK(gpu_all_bytes(again, 64 << 10, 0x11));   /* after r1's gated fill, in r1's order */
  RAP_CHECK_OK(rap_deallocate(tc, q, e.r2));
  RAP_CHECK_OK(rap_deallocate(tc, again, NULL));
  RAP_CHECK_OK(rap_allocator_check(tc));
  teardown(&e);
}

typedef struct tc_handoff {
  rap_allocator *tc;
  rap_resource *r;
  void *p;
  int st;
} tc_handoff;

static void *tc_free_elsewhere(void *arg) {
  tc_handoff *h = arg;
  h->st = rap_deallocate(h->tc, h->p, h->r);
  return NULL;
}

GPU_TEST(ThreadCache, ForeignFreeStaysPendingOnItsStream) {
  env e;
  tc_setup(&e);
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_get(e.rm, "tc", &tc));
  void *p, *q, *again;
  RAP_CHECK_OK(rap_allocate(tc, &p, 4096, e.r1));
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(e.r1), e.gate, p, 4096, 0xAA) == 0);
  tc_handoff h = {tc, e.r1, p, -1};
  pthread_t th;
  RAP_CHECK(pthread_create(&th, NULL, tc_free_elsewhere, &h) == 0);
  pthread_join(th, NULL);
  RAP_CHECK_OK(h.st);   /* back to this thread's cache through its list of foreign frees */
  RAP_CHECK_OK(rap_allocate(tc, &q, 4096, e.r2));
  RAP_CHECK(q != p);
  RAP_CHECK(gpu_fill(gpu_resource_stream(e.r2), q, 4096, 0x55) == 0);
  RAP_CHECK_OK(rap_allocate(tc, &again, 4096, e.r1));
  RAP_CHECK(again == p);
  RAP_CHECK_OK(rap_resource_synchronize(e.r2));
  gpu_gate_open(e.gate);
  RAP_CHECK_OK(rap_resource_synchronize(e.r1));
  RAP_CHECK(gpu_all_bytes(q, 4096, 0x55));
  RAP_CHECK_OK(rap_deallocate(tc, q, e.r2));
  RAP_CHECK_OK(rap_deallocate(tc, again, e.r1));
  RAP_CHECK_OK(rap_release(tc));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(tc, &s));
  RAP_CHECK_EQ(s.cached_bytes, 0);
  RAP_CHECK_EQ(s.current_bytes, 0);
  teardown(&e);
}

/* Sixteen threads over eight streams through one ThreadCache: each fills its blocks on its stream,
 * hands every third block to the next thread to free, and the streams then go one by one while
 * the caches still hold their blocks. */
enum { TC_OPS = 300 };   /* racecheck takes minutes over LT_OPS */
static void *tc_worker(void *p) {
  lt_arg *a = p;
  rap_resource *mine = a->streams[a->id % LT_STREAMS];
  void *ring[8] = {0};
  for (int i = 0; i < TC_OPS; i++) {
    int k = i % 8;
    if (ring[k] != NULL) {
      if (rap_deallocate(a->ts, ring[k], i % 3 ? mine : NULL) != RAP_OK) a->failures++;
      ring[k] = NULL;
    }
    if (rap_allocate(a->ts, &ring[k], (size_t)(256 << (i % 9)), mine) != RAP_OK) {
      a->failures++;
      continue;
    }
    if (gpu_fill(gpu_resource_stream(mine), ring[k], 256, a->id) != 0) a->failures++;
  }
  for (int k = 0; k < 8; k++)
    if (ring[k] != NULL && rap_deallocate(a->ts, ring[k], mine) != RAP_OK) a->failures++;
  return NULL;
}

GPU_TEST(ThreadCache, StreamsGoWhileCachesHoldTheirBlocks) {
  env e;
  tc_setup(&e);
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_get(e.rm, "tc", &tc));
  rap_resource *streams[LT_STREAMS];
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(gpu_resource_create_stream(e.rm, &streams[i]));
  pthread_t th[LT_THREADS];
  lt_arg args[LT_THREADS];
  for (int i = 0; i < LT_THREADS; i++) {
    args[i] = (lt_arg){tc, streams, i, 0};
    RAP_CHECK(pthread_create(&th[i], NULL, tc_worker, &args[i]) == 0);
  }
  int failures = 0;
  for (int i = 0; i < LT_THREADS; i++) {
    pthread_join(th[i], NULL);
    failures += args[i].failures;
  }
  RAP_CHECK_EQ(failures, 0);
  RAP_CHECK_OK(rap_allocator_check(tc));
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(rap_resource_destroy(streams[i]));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(tc, &s));
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.cached_count, 0);   /* the threads ended, and the streams took theirs */
  RAP_CHECK_OK(rap_allocator_stats(e.pool, &s));
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_OK(rap_allocator_check(tc));
  teardown(&e);
}

/* The race detector at the machine's scale: RAP_TEST_THREADS threads (default 16, at most 256) over
 * eight streams through one ThreadCache(ResourceAwarePool(DEVICE)). Each thread allocates blocks of
 * 4..64 KiB on its stream and fills each with its own tag; a kernel behind the fill waits a few
 * microseconds (a window for another stream's write to land) and counts the words that are not the
 * tag. Every third block goes to the next thread, which frees it without naming a resource (so it
 * goes pending on its owner's stream through a cache of another thread). A block handed to one
 * stream while another stream's work on it was still queued shows as foreign words.
 * `RAP_DEVICE_RUN=scale bash scripts/device-run.sh` runs it at the top thread count it measures. */
enum { SC_OPS = 400, SC_MAX_THREADS = 256, SC_MAILBOX = 64 };

typedef struct sc_mailbox {
  pthread_mutex_t lock;
  void *p[SC_MAILBOX];
  int n;
} sc_mailbox;

typedef struct sc_arg {
  rap_allocator *tc;
  rap_resource **streams;
  sc_mailbox *boxes;
  unsigned long long *foreign;   /* device memory */
  int id, nthreads, failures, blocks;
} sc_arg;

static int sc_threads(void) {
  const char *v = getenv("RAP_TEST_THREADS");
  long n = v && *v ? strtol(v, NULL, 10) : 16;
  return n < 1 ? 1 : n > SC_MAX_THREADS ? SC_MAX_THREADS : (int)n;
}

/* Frees what the thread before this one handed over. */
static int sc_drain(rap_allocator *tc, sc_mailbox *box) {
  void *got[SC_MAILBOX];
  pthread_mutex_lock(&box->lock);
  int n = box->n, failures = 0;
  memcpy(got, box->p, (size_t)n * sizeof *got);
  box->n = 0;
  pthread_mutex_unlock(&box->lock);
  for (int j = 0; j < n; j++) failures += rap_deallocate(tc, got[j], NULL) != RAP_OK;
  return failures;
}

static void *sc_worker(void *p) {
  sc_arg *a = p;
  rap_resource *mine = a->streams[a->id % LT_STREAMS];
  gpuStream_t s = gpu_resource_stream(mine);
  sc_mailbox *out = &a->boxes[(a->id + 1) % a->nthreads];
  int tag = 1 + a->id % 254;
  for (int i = 0, n = gpu_test_rounds(SC_OPS); i < n; i++) {
    size_t bytes = (size_t)4096 << (i % 5);
    void *b;
    if (rap_allocate(a->tc, &b, bytes, mine) != RAP_OK) {
      a->failures++;
      continue;
    }
    a->blocks++;
    if (gpu_fill(s, b, bytes, tag) != 0 || gpu_count_foreign(s, b, bytes, tag, 5000, a->foreign) != 0)
      a->failures++;
    int handed = 0;
    if (i % 3 == 2 && a->nthreads > 1) {
      pthread_mutex_lock(&out->lock);
      if (out->n < SC_MAILBOX) out->p[out->n++] = b, handed = 1;
      pthread_mutex_unlock(&out->lock);
    }
    if (!handed && rap_deallocate(a->tc, b, mine) != RAP_OK) a->failures++;
    a->failures += sc_drain(a->tc, &a->boxes[a->id]);
  }
  return NULL;
}

GPU_TEST(ThreadCache, RaceDetectorAtScale) {
  env e;
  tc_setup(&e);
  rap_allocator *tc;
  RAP_CHECK_OK(rap_allocator_get(e.rm, "tc", &tc));
  int n = sc_threads();
  rap_resource *streams[LT_STREAMS];
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(gpu_resource_create_stream(e.rm, &streams[i]));
  unsigned long long *foreign;
  RAP_CHECK(gpu_counter_create(&foreign) == 0);
  static pthread_t th[SC_MAX_THREADS];
  static sc_arg args[SC_MAX_THREADS];
  static sc_mailbox boxes[SC_MAX_THREADS];
  for (int i = 0; i < n; i++) {
    pthread_mutex_init(&boxes[i].lock, NULL);
    boxes[i].n = 0;
  }
  for (int i = 0; i < n; i++) {
    args[i] = (sc_arg){tc, streams, boxes, foreign, i, n, 0, 0};
    RAP_CHECK(pthread_create(&th[i], NULL, sc_worker, &args[i]) == 0);
  }
  int failures = 0, blocks = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    failures += args[i].failures;
    blocks += args[i].blocks;
  }
  for (int i = 0; i < n; i++) failures += sc_drain(tc, &boxes[i]);
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(rap_resource_synchronize(streams[i]));
  unsigned long long words = ~0ull;
  RAP_CHECK(gpu_counter_read(foreign, &words) == 0);
  printf("ThreadCache race detector: %d threads, 8 streams, %d blocks, %llu foreign words\n", n,
         blocks, words);
  RAP_CHECK_EQ(failures, 0);
  RAP_CHECK_EQ(words, 0);
  gpu_counter_destroy(foreign);
  for (int i = 0; i < n; i++) pthread_mutex_destroy(&boxes[i].lock);
  RAP_CHECK_OK(rap_allocator_check(tc));
  for (int i = 0; i < LT_STREAMS; i++) RAP_CHECK_OK(rap_resource_destroy(streams[i]));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(tc, &s));
  RAP_CHECK_EQ(s.current_bytes, 0);
  teardown(&e);
}

/* A stream may be destroyed as soon as a free on it has returned (RMM's rule), where its resource
 * is call-scoped: the block freed while the stream's gated kernel still writes it is fenced before
 * the free returns, the stream goes, and the pool goes on: another stream's request is kept off
 * the block while the kernel runs, the pool is released and checked, and the block comes back once
 * the kernel has passed; the resource's end waits for its last event, never touching the stream. */
static void stream_gone_after_free(const char *wrapper) {
  env e = {0};
  /* Room for q without growing: a cudaMalloc or cudaFree while the gated kernel runs may wait for
   * it (compute-sanitizer makes them synchronous), and the kernel would end at its timeout. */
  setup(&e, "ResourceAwarePool", "DEVICE", "initial_size=4MiB, next_size=1MiB");
  rap_allocator *a = e.pool;
  if (wrapper != NULL) RAP_CHECK_OK(rap_allocator_make(e.rm, "over", wrapper, "pool", "", &a));
  gpuStream_t s = NULL;
  RAP_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking) == gpuSuccess);
  rap_resource *r = NULL;
  RAP_CHECK_OK(gpu_resource_create(e.rm, s, &r));
  RAP_CHECK_OK(rap_resource_set_call_scoped(r, 1));
  void *p = NULL, *moved = NULL, *q = NULL;
  RAP_CHECK_OK(rap_allocate(a, &p, MiB, r));
  RAP_CHECK_OK(rap_allocate(a, &moved, MiB / 4, r));
  gpuEvent_t filled = NULL;   /* the test's own mark of the kernel's end */
  RAP_CHECK(gpuEventCreateWithFlags(&filled, gpuEventDisableTiming) == gpuSuccess);
  RAP_CHECK(gpu_gated_fill(s, e.gate, p, MiB, 7) == 0);
  RAP_CHECK(gpuEventRecord(filled, s) == gpuSuccess);
  RAP_CHECK_OK(rap_deallocate(a, p, r));
  RAP_CHECK(gpuStreamDestroy(s) == gpuSuccess);   /* its kernel still waits at the gate */
  RAP_CHECK_OK(rap_record_resource(a, moved, e.r2));   /* a buffer moved to r2, freed there */
  RAP_CHECK_OK(rap_deallocate(a, moved, NULL));
  RAP_CHECK_OK(rap_allocate(a, &q, MiB, e.r2));
  /* Under compute-sanitizer a call above waits for the kernel, which then ends at its timeout:
   * p is free by then, and taking it is right. */
  if (gpuEventQuery(filled) != gpuSuccess)
    RAP_CHECK((char *)q + MiB <= (char *)p || (char *)p + MiB <= (char *)q);
  (void)gpuGetLastError();   /* gpuErrorNotReady is no error */
  RAP_CHECK(gpuEventDestroy(filled) == gpuSuccess);
  RAP_CHECK_OK(rap_deallocate(a, q, e.r2));
  RAP_CHECK_OK(rap_release(a));
  RAP_CHECK_OK(rap_allocator_check(a));
  gpu_gate_open(e.gate);
  RAP_CHECK(gpuDeviceSynchronize() == gpuSuccess);
  RAP_CHECK_OK(rap_release(a));
  rap_stats st;
  RAP_CHECK_OK(rap_allocator_resource_stats(e.pool, r, &st));
  RAP_CHECK_EQ(st.pending_count, 0);   /* the kernel passed: p came back */
  RAP_CHECK_EQ(st.allocation_count, 0);
  RAP_CHECK_OK(rap_resource_destroy(r));
  RAP_CHECK_OK(rap_allocator_check(a));
  if (a != e.pool) RAP_CHECK_OK(rap_allocator_destroy(a));
  teardown(&e);
}

GPU_TEST(CallScoped, StreamDestroyedAfterAFreeOnIt) { stream_gone_after_free(NULL); }
GPU_TEST(CallScoped, StreamDestroyedAfterAFreeOnItThreadCache) {
  stream_gone_after_free("ThreadCache");
}
