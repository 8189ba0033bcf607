/* guard_stress.c — the thread guard of a plain pool at the moments it changes hands: many short
 * rounds, each a fresh manager and QuickPool that THREADS threads (4) start on at once (behind a
 * barrier) and hammer with allocate and free, ignoring a free's status as most callers do.
 *
 *   rap_guard_stress [--rounds N] [--threads N] [--ops N]
 *
 * A plain pool lets one thread in at a time; the others are refused (an allocation) or wait their
 * turn (a free). Each block a thread gets is filled with the thread's tag and checked just before
 * it is freed, so that a block handed to two threads at once shows; at the end of a round every
 * block must have gone back and the pool must be whole (rap_allocator_check). The first moments of
 * a round are the interesting ones: the pool goes from no owner to one thread, then from thread to
 * thread (a membarrier each) until its bias ends. Exit status 0 when every round was clean.
 */
#define _POSIX_C_SOURCE 200809L

#include <rap/rap.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct worker {
  rap_allocator *pool;
  pthread_barrier_t *start;
  int ops;
  uint64_t tag;
  long refused, bad;
} worker;

static void *hammer(void *arg) {
  worker *w = arg;
  pthread_barrier_wait(w->start);
  for (int i = 0; i < w->ops; i++) {
    size_t n = (size_t)(64 + 64 * (i % 16));
    uint64_t *p = NULL;
    if (rap_allocate(w->pool, (void **)&p, n, NULL) != RAP_OK) {
      w->refused++;
      continue;
    }
    for (size_t k = 0; k < n / sizeof *p; k++) p[k] = w->tag;
    for (size_t k = 0; k < n / sizeof *p; k++)
      if (p[k] != w->tag) {   /* another thread was handed the same memory */
        w->bad++;
        break;
      }
    (void)rap_deallocate(w->pool, p, NULL);
  }
  return NULL;
}

/* One round: 0 when it was clean, else a sentence on stderr and 1. */
static int round_once(int round, int threads, int ops) {
  rap_manager *rm = NULL;
  rap_allocator *pool = NULL;
  if (rap_manager_create(&rm) != RAP_OK ||
      rap_allocator_make(rm, "shared", "QuickPool", "HOST", "initial_size=64KiB", &pool) != RAP_OK) {
    fprintf(stderr, "round %d: setup failed: %s\n", round, rap_last_error());
    return 1;
  }
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  worker w[64];
  pthread_t t[64];
  for (int i = 0; i < threads; i++) {
    w[i] = (worker){pool, &start, ops, 0x0101010101010101ull * (uint64_t)(i + 1), 0, 0};
    pthread_create(&t[i], NULL, hammer, &w[i]);
  }
  long bad = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    bad += w[i].bad;
  }
  pthread_barrier_destroy(&start);
  rap_stats s;
  memset(&s, 0, sizeof s);
  int fail = 0;
  if (bad != 0) {
    fprintf(stderr, "round %d: %ld blocks were handed to two threads at once\n", round, bad);
    fail = 1;
  }
  if (rap_allocator_check(pool) != RAP_OK) {
    fprintf(stderr, "round %d: the pool is not whole: %s\n", round, rap_last_error());
    fail = 1;
  } else if (rap_allocator_stats(pool, &s) != RAP_OK || s.allocation_count != 0) {
    fprintf(stderr, "round %d: %zu blocks were lost\n", round, s.allocation_count);
    fail = 1;
  }
  if (rap_manager_destroy(rm) != RAP_OK) {
    fprintf(stderr, "round %d: rap_manager_destroy: %s\n", round, rap_last_error());
    fail = 1;
  }
  return fail;
}

int main(int argc, char **argv) {
  int rounds = 2000, threads = 4, ops = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--ops") == 0) ops = atoi(argv[i + 1]);
  }
  if (threads < 1 || threads > 64) threads = 4;
  rap_log_set_level(RAP_LOG_ERROR);   /* the guard's warning once per pool: once per round here */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int failed = 0;
  for (int r = 0; r < rounds; r++) failed += round_once(r, threads, ops);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("guard stress: %d rounds of %d threads x %d pairs, %d failed, %.1f s\n", rounds, threads,
         ops, failed, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  return failed != 0;
}
