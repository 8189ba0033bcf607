/* test_cuda_sleep_threads.c — sleep and wake of a ThreadCache over rap's default device pool
 * (RAP_DEFAULT_DEVICE_SPEC, device 0) with four threads, each on its own CUDA stream: kernels
 * queued on the streams still fill live blocks when the sleep starts; the sleep settles every
 * thread's cache (its bins, a block another thread freed into it) back into the pool, gives the
 * device memory back and keeps the live blocks' bytes; while asleep every thread's allocation and
 * free is refused with the pool-is-asleep sentence and nothing cached is handed out; after the wake
 * each thread finds its kernels' bytes at the same pointers, and the caches serve again. Threads
 * move in steps the test opens (a stage and an arrival count under one mutex), no sleeps.
 * tests/c/test_sleep_threads.c runs the same logic over HOST_VMM in every CI build.
 */
#include "../c/rap_test.h"
#include "../c/shared_helpers.h"
#include "../c/test_util.h"
#include "../c/thread_steps.h"
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <rap/cuda.h>
#include <sched.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define THREADS 4
#define BLOCKS 24

static steps st_ = STEPS_INIT(THREADS);

typedef struct worker {
  rap_allocator *tc;
  rap_resource *r;
  unsigned id;
  void *live[BLOCKS];
  size_t size[BLOCKS];
  void *given, *taken;   /* a block this thread made for the next one to free; the one it frees */
  int errors, refused, wrong_sentence;
} worker;

static worker w_[THREADS];

/* Small blocks (the caches keep them) and a few of several MiB (the pool's). */
static size_t size_of(unsigned id, unsigned k) {
  return k % 6 == 5 ? (1 + (k + id) % 5) * MiB + 4096 : 256 + (size_t)(k * 997 + id * 131) % 60000;
}

static int value_of(unsigned id, unsigned k) { return 0x10 + (int)(id * BLOCKS + k) % 0xe0; }

static void *work(void *arg) {
  worker *w = arg;
  cudaStream_t s = rap_resource_cuda_stream(w->r);
  for (unsigned k = 0; k < BLOCKS; k++) {
    w->size[k] = size_of(w->id, k);
    if (rap_allocate(w->tc, &w->live[k], w->size[k], w->r) != RAP_OK) w->errors++;
    else if (gpu_fill(s, w->live[k], w->size[k], value_of(w->id, k)) != 0) w->errors++;
  }
  for (unsigned k = 1; k < BLOCKS; k += 2) {   /* freed on the stream: into the caches or pending */
    if (rap_deallocate(w->tc, w->live[k], w->r) != RAP_OK) w->errors++;
    w->live[k] = NULL;
  }
  if (rap_allocate(w->tc, &w->given, 500, w->r) != RAP_OK) w->errors++;
  steps_arrive_and_wait(&st_, 1);
  if (rap_deallocate(w->tc, w->taken, NULL) != RAP_OK) w->errors++;   /* another thread's block */
  steps_arrive_and_wait(&st_, 2);   /* the test sleeps the pool, the streams' kernels still queued */
  for (unsigned k = 0; k < 6; k++) {   /* sizes the bins held: refused, nothing handed out */
    void *p = NULL;
    int st = rap_allocate(w->tc, &p, size_of(w->id, 2 * k + 1), w->r);
    w->refused += st == RAP_ERR_BUSY && p == NULL;
    w->wrong_sentence += st == RAP_ERR_BUSY && strstr(rap_last_error(), "asleep") == NULL;
  }
  int st = rap_deallocate(w->tc, w->live[0], w->r);   /* live at sleep time: refused, kept */
  w->refused += st == RAP_ERR_BUSY;
  w->wrong_sentence += strstr(rap_last_error(), "asleep") == NULL;
  steps_arrive_and_wait(&st_, 3);   /* the test wakes it */
  for (unsigned k = 0; k < BLOCKS; k += 2) {
    if (!gpu_all_bytes(w->live[k], w->size[k], value_of(w->id, k))) w->errors++;
    if (rap_deallocate(w->tc, w->live[k], w->r) != RAP_OK) w->errors++;
  }
  for (unsigned k = 0; k < BLOCKS; k++) {   /* served again, through the caches, kernels run */
    void *p = NULL;
    if (rap_allocate(w->tc, &p, size_of(w->id, k), w->r) != RAP_OK) w->errors++;
    else {
      if (gpu_fill(s, p, size_of(w->id, k), 0x5a) != 0) w->errors++;
      if (rap_deallocate(w->tc, p, w->r) != RAP_OK) w->errors++;
    }
  }
  if (cudaStreamSynchronize(s) != cudaSuccess) w->errors++;
  steps_arrive_and_wait(&st_, 4);
  return NULL;
}

/* RAP_DEFAULT_DEVICE_SPEC on device 0, under a ThreadCache. */
static void default_under_thread_cache(char *buf, size_t cap) {
  default_spec_on_0(buf, cap, "ThreadCache(%s)");
}

typedef struct prober {
  rap_allocator *tc;
  gpu_gate *g;
} prober;

/* Opens the gate once the sleep has started: the pool refuses another thread's call. */
static void *open_once_refused(void *arg) {
  prober *pr = arg;
  int unknown = 0;
  while (rap_deallocate(pr->tc, &unknown, NULL) != RAP_ERR_BUSY) sched_yield();
  gpu_gate_open(pr->g);
  return NULL;
}

static size_t device_free(void) {
  size_t f = 0, t = 0;
  RAP_CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess);
  return f;
}

RAP_TEST(CudaSleepThreads, ThreadCacheOverTheDefaultSettlesRefusesAndServesStreams) {
  char spec[512];
  default_under_thread_cache(spec, sizeof spec);
  rap_manager *rm = NULL;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *tc = make_or_skip(rm, "tc", spec);
  rap_allocator *pool = rap_allocator_parent(tc), *vmm = rap_allocator_parent(pool);
  gpu_gate *g = NULL;
  RAP_CHECK(gpu_gate_create(&g) == 0);
  pthread_t t[THREADS];
  steps_reset(&st_);
  for (unsigned i = 0; i < THREADS; i++) {
    memset(&w_[i], 0, sizeof w_[i]);
    w_[i].tc = tc;
    w_[i].id = i;
    RAP_CHECK_OK(rap_resource_create_cuda_stream(rm, &w_[i].r));
  }
  for (unsigned i = 0; i < THREADS; i++) RAP_CHECK(pthread_create(&t[i], NULL, work, &w_[i]) == 0);
  steps_wait_all(&st_);
  for (unsigned i = 0; i < THREADS; i++) w_[i].taken = w_[(i + THREADS - 1) % THREADS].given;
  steps_open(&st_, 1);
  steps_wait_all(&st_);
  /* Thread 0's stream is held by a gated kernel, which then rewrites its first block: the sleep
   * must copy what the kernel wrote, so it waits for the stream; the gate opens only once the
   * sleep has begun (another thread is refused). */
  cudaStream_t s0 = rap_resource_cuda_stream(w_[0].r);
  RAP_CHECK(gpu_gated_fill(s0, g, w_[0].live[0], w_[0].size[0], 0x6b) == 0);
  RAP_CHECK(tu_stats(tc).cached_count > 0);   /* the bins hold what was freed */
  size_t before = device_free();
  prober pr = {tc, g};
  pthread_t opener;
  RAP_CHECK(pthread_create(&opener, NULL, open_once_refused, &pr) == 0);
  RAP_CHECK_OK(rap_allocator_sleep(tc, RAP_SLEEP_BACKUP));
  pthread_join(opener, NULL);
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 1);
  RAP_CHECK_EQ(tu_stats(vmm).actual_bytes, 0);
  RAP_CHECK(device_free() > before);
  rap_stats asleep = tu_stats(tc);
  RAP_CHECK_EQ(asleep.cached_count, 0);   /* every cache went back to the pool */
  RAP_CHECK_EQ(asleep.allocation_count, THREADS * BLOCKS / 2);   /* the live ones, nothing else */
  RAP_CHECK_OK(rap_allocator_check(tc));
  RAP_CHECK_STATUS(rap_allocator_destroy(tc), RAP_ERR_BUSY);
  steps_open(&st_, 2);
  steps_wait_all(&st_);
  for (unsigned i = 0; i < THREADS; i++) {
    RAP_CHECK_EQ(w_[i].refused, 7);
    RAP_CHECK_EQ(w_[i].wrong_sentence, 0);
  }
  RAP_CHECK_EQ(tu_stats(tc).allocation_count, THREADS * BLOCKS / 2);
  RAP_CHECK_OK(rap_allocator_wake(tc));
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  RAP_CHECK(gpu_all_bytes(w_[0].live[0], w_[0].size[0], 0x6b));   /* the gated kernel's bytes */
  RAP_CHECK(gpu_fill(s0, w_[0].live[0], w_[0].size[0], value_of(0, 0)) == 0);
  RAP_CHECK(cudaStreamSynchronize(s0) == cudaSuccess);
  steps_open(&st_, 3);
  steps_wait_all(&st_);
  steps_open(&st_, 4);
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    RAP_CHECK_EQ(w_[i].errors, 0);
  }
  RAP_CHECK_OK(rap_allocator_check(tc));
  rap_stats after = tu_stats(tc);
  RAP_CHECK_EQ(after.allocation_count, 0);
  RAP_CHECK_EQ(after.current_bytes, 0);
  gpu_gate_destroy(g);
  RAP_CHECK_OK(rap_allocator_destroy(tc));
  for (unsigned i = 0; i < THREADS; i++) RAP_CHECK_OK(rap_resource_destroy(w_[i].r));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
