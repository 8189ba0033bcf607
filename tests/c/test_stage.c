/* test_stage.c — the staged copy of a sleeping DEVICE_VMM pool (platforms/stage.c) through
 * ordinary memory: a "device" buffer with runs cut out of it, a small ring, and a platform whose
 * copies are done late, at the wait for their slot's mark (or at finish), as a device's queued
 * copies may be. A schedule that read a slot before its mark was reached, or wrote one the
 * platform had not yet copied out of, would move the wrong bytes. Also: every platform call on the
 * caller's thread, prefaults exactly of the bytes never touched, and after a failure (the
 * platform's, or a thread's prefault) the first sentence, nothing left queued, no thread left.
 */
#define _GNU_SOURCE 1   /* setenv, strdup, sched_setaffinity */
#include "platforms/stage.h"
#include "test_util.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS_MAX 8
#define PENDING_MAX 2048

typedef struct piece {
  size_t off;
  char *dev;
  size_t n;
  bool to_host;
} piece;

typedef struct fake {
  char *ring;
  size_t slot_size;
  piece pend[SLOTS_MAX][PENDING_MAX];
  unsigned npend[SLOTS_MAX];
  pthread_t caller;
  int wrong_thread;
  long queue_fail_at, queues;      /* the nth queue fails (0: none) */
  long prefault_fail_at, prefaults;   /* atomic: the nth prefault fails (0: none) */
  size_t prefaulted;               /* atomic: bytes */
} fake;

static void on_caller(fake *f) {
  if (!pthread_equal(pthread_self(), f->caller)) f->wrong_thread++;
}

static void run_pending(fake *f, unsigned slot) {
  for (unsigned i = 0; i < f->npend[slot]; i++) {
    piece *p = &f->pend[slot][i];
    char *h = f->ring + slot * f->slot_size + p->off;
    memcpy(p->to_host ? h : p->dev, p->to_host ? p->dev : h, p->n);
  }
  f->npend[slot] = 0;
}

static int fake_queue(void *ctx, unsigned slot, size_t off, char *dev, size_t n, bool to_host) {
  fake *f = ctx;
  on_caller(f);
  if (++f->queues == f->queue_fail_at)
    return rapi_fail(RAP_ERR_BACKEND, "the fake platform refused copy %ld", f->queues);
  RAP_CHECK(f->npend[slot] < PENDING_MAX);
  f->pend[slot][f->npend[slot]++] = (piece){off, dev, n, to_host};
  return RAP_OK;
}

static int fake_mark(void *ctx, unsigned slot) {
  (void)slot;
  on_caller(ctx);
  return RAP_OK;
}

static int fake_wait(void *ctx, unsigned slot) {
  on_caller(ctx);
  run_pending(ctx, slot);
  return RAP_OK;
}

static int fake_finish(void *ctx) {
  fake *f = ctx;
  on_caller(f);
  for (unsigned s = 0; s < SLOTS_MAX; s++) run_pending(f, s);
  return RAP_OK;
}

static int fake_prefault(void *ctx, void *p, size_t n) {
  fake *f = ctx;
  (void)p;
  if (__atomic_add_fetch(&f->prefaults, 1, __ATOMIC_RELAXED) == f->prefault_fail_at)
    return rapi_fail(RAP_ERR_NOMEM, "the fake host refused pages");
  __atomic_add_fetch(&f->prefaulted, n, __ATOMIC_RELAXED);
  return RAP_OK;
}

static const rapi_stage_ops fake_ops = {fake_queue, fake_mark, fake_wait, fake_finish, fake_prefault};

/* The runs: cut in order out of dev, sizes from 1 byte to a few slots, gaps between them. */
typedef struct runs_over {
  rapi_runs it;
  rapi_run *list;
  size_t n, at;
} runs_over;

static bool next_of(rapi_runs *runs, rapi_run *out) {
  runs_over *r = (runs_over *)runs;
  if (r->at == r->n) return false;
  *out = r->list[r->at++];
  return true;
}

static void restart(runs_over *r) {
  r->at = 0;
  r->it.next = next_of;
}

static size_t cut_runs(runs_over *r, char *dev, size_t dev_size, size_t slot, unsigned seed) {
  size_t at = 0, total = 0;
  r->n = 0;
  while (r->n < 256) {
    seed = seed * 1103515245u + 12345u;
    size_t gap = (seed >> 8) % 300, size = 1 + (seed >> 4) % (r->n % 7 == 0 ? 3 * slot : 200);
    if (at + gap + size > dev_size) break;
    r->list[r->n++] = (rapi_run){dev + at + gap, size};
    at += gap + size;
    total += size;
  }
  r->it.total = total;
  restart(r);
  return total;
}

static void fill(char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(seed + i * 131 + (i >> 9));
}

static int threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (d == NULL) return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The threads once those a copy joined are gone from /proc: a joined thread's entry can stay there
 * a moment after pthread_join returns (the kernel clears the thread's id before it reaps the
 * task), so the count is read again for up to two seconds while it is above want. */
static int threads_settle_to(int want) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int n = threads_now();
  while (n > want) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= 2) break;
    sched_yield();
    n = threads_now();
  }
  return n;
}

#define DEV_SIZE (256 * 1024)

typedef struct staged {
  fake *f;
  rapi_stage sg;
  char *dev, *copy, *backup;
  runs_over r;
  rapi_run list[256];
  size_t total;
} staged;

static void setup(staged *c, unsigned slots, size_t slot_size, size_t part, unsigned threads) {
  memset(c, 0, sizeof *c);
  c->f = calloc(1, sizeof *c->f);
  c->f->ring = malloc(slots * slot_size);
  c->f->slot_size = slot_size;
  c->f->caller = pthread_self();
  c->sg = (rapi_stage){&fake_ops, c->f, c->f->ring, slots, slot_size, part, threads};
  c->dev = malloc(DEV_SIZE);
  c->copy = malloc(DEV_SIZE);
  fill(c->dev, DEV_SIZE, slots * 7 + threads);
  memcpy(c->copy, c->dev, DEV_SIZE);
  c->r.list = c->list;
  c->total = cut_runs(&c->r, c->dev, DEV_SIZE, slot_size, slots + 31 * threads);
  c->backup = malloc(c->total);
}

static void teardown(staged *c) {
  free(c->f->ring);
  free(c->f);
  free(c->dev);
  free(c->copy);
  free(c->backup);
}

/* The backup holds the runs packed in order. */
static bool packed(const staged *c) {
  size_t off = 0;
  for (size_t i = 0; i < c->r.n; off += c->list[i++].size)
    if (memcmp(c->backup + off, c->copy + (c->list[i].ptr - c->dev), c->list[i].size) != 0) return false;
  return off == c->total;
}

RAP_TEST(Stage, SleepAndWakeMoveEveryByteInOrder) {
  static const unsigned slot_counts[] = {1, 2, 3, 8};
  static const unsigned thread_counts[] = {0, 1, 3, 8};
  for (unsigned s = 0; s < 4; s++)
    for (unsigned t = 0; t < 4; t++)
      for (int odd = 0; odd < 2; odd++) {
        staged c;
        setup(&c, slot_counts[s], 4096, odd ? 1000 : 1024, thread_counts[t]);
        RAP_CHECK_OK(rapi_stage_copy(&c.sg, c.backup, 0, &c.r.it, true));
        RAP_CHECK(packed(&c));
        RAP_CHECK_EQ(c.f->prefaulted, c.total);   /* every byte once: nothing was touched */
        for (size_t i = 0; i < c.r.n; i++) memset(c.list[i].ptr, 0, c.list[i].size);
        restart(&c.r);
        RAP_CHECK_OK(rapi_stage_copy(&c.sg, c.backup, c.total, &c.r.it, false));
        RAP_CHECK(memcmp(c.dev, c.copy, DEV_SIZE) == 0);   /* the runs back, the gaps untouched */
        RAP_CHECK_EQ(c.f->wrong_thread, 0);
        teardown(&c);
      }
}

RAP_TEST(Stage, PrefaultsOnlyWhatWasNeverTouched) {
  staged c;
  setup(&c, 3, 4096, 1024, 2);
  size_t touched = c.total / 3 + 17;
  RAP_CHECK_OK(rapi_stage_copy(&c.sg, c.backup, touched, &c.r.it, true));
  RAP_CHECK(packed(&c));
  RAP_CHECK_EQ(c.f->prefaulted, c.total - touched);
  c.f->prefaulted = 0;
  restart(&c.r);
  RAP_CHECK_OK(rapi_stage_copy(&c.sg, c.backup, c.total, &c.r.it, true));
  RAP_CHECK_EQ(c.f->prefaulted, 0);
  teardown(&c);
}

/* The threads of the process once a staged copy has run (a sanitizer's own start with the first
 * thread made), which a copy that returned must have left as they were. */
static int threads_settled(void) {
  staged c;
  setup(&c, 2, 4096, 1024, 3);
  RAP_CHECK_OK(rapi_stage_copy(&c.sg, c.backup, 0, &c.r.it, true));
  teardown(&c);
  return threads_now();
}

RAP_TEST(Stage, APlatformFailureStopsAndLeavesNothingBehind) {
  int before = threads_settled();
  for (int to_host = 0; to_host < 2; to_host++)
    for (long nth = 1; nth < 40; nth += 7) {
      staged c;
      setup(&c, 4, 4096, 1024, 5);
      c.f->queue_fail_at = nth;
      RAP_CHECK_STATUS(rapi_stage_copy(&c.sg, c.backup, 0, &c.r.it, to_host), RAP_ERR_BACKEND);
      RAP_CHECK_STR(rap_last_error(), "the fake platform refused copy");
      for (unsigned s = 0; s < SLOTS_MAX; s++) RAP_CHECK_EQ(c.f->npend[s], 0);   /* finished */
      RAP_CHECK_EQ(threads_settle_to(before), before);
      RAP_CHECK_EQ(c.f->wrong_thread, 0);
      teardown(&c);
    }
}

RAP_TEST(Stage, AThreadsFailureIsTheCallersSentence) {
  int before = threads_settled();
  for (long nth = 1; nth < 30; nth += 4) {
    staged c;
    setup(&c, 4, 4096, 1024, 4);
    c.f->prefault_fail_at = nth;
    RAP_CHECK_STATUS(rapi_stage_copy(&c.sg, c.backup, 0, &c.r.it, true), RAP_ERR_NOMEM);
    RAP_CHECK_STR(rap_last_error(), "the fake host refused pages");
    for (unsigned s = 0; s < SLOTS_MAX; s++) RAP_CHECK_EQ(c.f->npend[s], 0);
    RAP_CHECK_EQ(threads_settle_to(before), before);
    teardown(&c);
  }
}

RAP_TEST(Stage, ThreadsComeFromTheEnvironment) {
  const char *saved = getenv("RAP_SLEEP_THREADS");
  char *keep = saved ? strdup(saved) : NULL;
  unsetenv("RAP_SLEEP_THREADS");
  /* One a CPU the caller may run on besides the caller, 8 to 32: the caller held to one CPU
   * starts 8, however many the host has. */
  cpu_set_t all, one;
  RAP_CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  RAP_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  unsigned held = rapi_stage_threads();
  RAP_CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
  RAP_CHECK_EQ(held, 8);
  unsigned want = rapi_stage_threads_for(CPU_COUNT(&all));
  RAP_CHECK_EQ(rapi_stage_threads(), want);
  setenv("RAP_SLEEP_THREADS", "3", 1);
  RAP_CHECK_EQ(rapi_stage_threads(), 3);
  setenv("RAP_SLEEP_THREADS", "0", 1);
  RAP_CHECK_EQ(rapi_stage_threads(), 0);
  setenv("RAP_SLEEP_THREADS", "65", 1);
  RAP_CHECK_EQ(rapi_stage_threads(), want);
  setenv("RAP_SLEEP_THREADS", "four", 1);
  RAP_CHECK_EQ(rapi_stage_threads(), want);
  if (keep) setenv("RAP_SLEEP_THREADS", keep, 1);
  else unsetenv("RAP_SLEEP_THREADS");
  free(keep);
}

RAP_TEST(Stage, DefaultThreadsAreOneACpuBesidesTheCallerFrom8To32) {
  const long cpus[] = {-1, 0, 1, 2, 9, 10, 16, 33, 34, 128, 1L << 40};
  const unsigned want[] = {8, 8, 8, 8, 8, 9, 15, 32, 32, 32, 32};
  for (size_t i = 0; i < sizeof cpus / sizeof *cpus; i++) RAP_CHECK_EQ(rapi_stage_threads_for(cpus[i]), want[i]);
}
