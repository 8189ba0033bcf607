/* test_sleep_threads.c — sleep and wake through a ThreadCache over a ResourceAwarePool over
 * HOST_VMM, with several threads: the sleep settles every thread's cache (its bins, blocks other
 * threads freed into it, the shared depots) back into the pool before the pool sleeps; while
 * asleep each thread's allocation and free is refused with the pool-is-asleep sentence and nothing
 * cached is handed out; the wake serves every thread again, with the live blocks' bytes kept.
 * Threads move in steps the test opens (a stage and an arrival count under one mutex), no sleeps.
 */
#include "test_util.h"
#include "thread_steps.h"

#include <pthread.h>
#include <string.h>

#define KiB ((size_t)1024)
#define THREADS 4
#define BLOCKS 64

static steps st_ = STEPS_INIT(THREADS);

typedef struct worker {
  rap_allocator *tc;
  unsigned id;
  char *live[BLOCKS];
  size_t size[BLOCKS];
  char *given;        /* a block this worker made and the next one frees (another thread's free) */
  char *taken;        /* the one it frees of the worker before it */
  int errors, refused, wrong_sentence;
} worker;

static worker w_[THREADS];

static size_t size_of(unsigned id, unsigned k) { return 64 + (size_t)(k * 37 + id * 11) % (8 * KiB); }

static void *work(void *arg) {
  worker *w = arg;
  for (unsigned k = 0; k < BLOCKS; k++) {   /* half stays live, half goes to this thread's bins */
    w->size[k] = size_of(w->id, k);
    if (rap_allocate(w->tc, (void **)&w->live[k], w->size[k], NULL) != RAP_OK) w->errors++;
    else tu_fill(w->live[k], w->size[k], w->id * 100 + k);
  }
  for (unsigned k = 1; k < BLOCKS; k += 2) {
    if (rap_deallocate(w->tc, w->live[k], NULL) != RAP_OK) w->errors++;
    w->live[k] = NULL;
  }
  if (rap_allocate(w->tc, (void **)&w->given, 500, NULL) != RAP_OK) w->errors++;
  steps_arrive_and_wait(&st_, 1);
  /* Another thread's block, freed here: it goes to that thread's list of others' frees. */
  if (rap_deallocate(w->tc, w->taken, NULL) != RAP_OK) w->errors++;
  steps_arrive_and_wait(&st_, 2);   /* the test sleeps the chain */
  for (unsigned k = 0; k < 8; k++) {   /* every size a bin held: refused, nothing handed out */
    void *p = NULL;
    int st = rap_allocate(w->tc, &p, size_of(w->id, 2 * k + 1), NULL);
    w->refused += st == RAP_ERR_BUSY && p == NULL;
    w->wrong_sentence += st == RAP_ERR_BUSY && strstr(rap_last_error(), "is asleep") == NULL;
  }
  int st = rap_deallocate(w->tc, w->live[0], NULL);   /* live at sleep time: refused, kept */
  w->refused += st == RAP_ERR_BUSY;
  w->wrong_sentence += strstr(rap_last_error(), "asleep") == NULL;
  steps_arrive_and_wait(&st_, 3);   /* the test wakes it */
  for (unsigned k = 0; k < BLOCKS; k += 2) {
    if (!tu_intact(w->live[k], w->size[k], w->id * 100 + k)) w->errors++;
    if (rap_deallocate(w->tc, w->live[k], NULL) != RAP_OK) w->errors++;
  }
  for (unsigned k = 0; k < BLOCKS; k++) {   /* served again, through the caches */
    void *p = NULL;
    if (rap_allocate(w->tc, &p, size_of(w->id, k), NULL) != RAP_OK) w->errors++;
    else if (rap_deallocate(w->tc, p, NULL) != RAP_OK) w->errors++;
  }
  steps_arrive_and_wait(&st_, 4);
  return NULL;
}

RAP_TEST(ThreadCacheSleep, SettlesEveryThreadsCacheRefusesWhileAsleepAndServesAfter) {
  rap_manager *rm = tu_manager();
  rap_allocator *tc = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "tc", "ThreadCache(ResourceAwarePool(HostVmm("
                                       "reserve=64MiB, granularity=64KiB), initial_size=1MiB))", &tc));
  rap_allocator *pool = rap_allocator_parent(tc), *v = rap_allocator_parent(pool);
  pthread_t t[THREADS];
  steps_reset(&st_);
  for (unsigned i = 0; i < THREADS; i++) {
    memset(&w_[i], 0, sizeof w_[i]);
    w_[i].tc = tc;
    w_[i].id = i;
    RAP_CHECK(pthread_create(&t[i], NULL, work, &w_[i]) == 0);
  }
  steps_wait_all(&st_);
  for (unsigned i = 0; i < THREADS; i++) w_[i].taken = w_[(i + THREADS - 1) % THREADS].given;
  steps_open(&st_, 1);   /* each frees the block of the one before it */
  steps_wait_all(&st_);
  rap_stats before = tu_stats(tc);
  RAP_CHECK(before.cached_count >= THREADS * BLOCKS / 2);   /* the bins hold what was freed */
  RAP_CHECK_OK(rap_allocator_sleep(tc, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(rap_allocator_is_asleep(tc), 1);
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 1);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  rap_stats asleep = tu_stats(tc);
  RAP_CHECK_EQ(asleep.cached_count, 0);   /* every cache went back to the pool */
  RAP_CHECK_EQ(asleep.allocation_count, THREADS * BLOCKS / 2);   /* the live ones, nothing else */
  RAP_CHECK_OK(rap_allocator_check(tc));
  RAP_CHECK_STATUS(rap_allocator_sleep(tc, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);   /* twice */
  RAP_CHECK_STATUS(rap_allocator_destroy(tc), RAP_ERR_BUSY);
  steps_open(&st_, 2);   /* every thread tries while asleep */
  steps_wait_all(&st_);
  for (unsigned i = 0; i < THREADS; i++) {
    RAP_CHECK_EQ(w_[i].refused, 9);
    RAP_CHECK_EQ(w_[i].wrong_sentence, 0);
  }
  RAP_CHECK_EQ(tu_stats(tc).allocation_count, THREADS * BLOCKS / 2);   /* nothing changed */
  RAP_CHECK_EQ(tu_stats(tc).cached_count, 0);
  RAP_CHECK_OK(rap_allocator_wake(tc));
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
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
  RAP_CHECK_OK(rap_allocator_destroy(tc));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
