/* test_lifecycle.c — the life cycle of resources, managers and specs (docs/errors.md, "Lifetimes, threads and callbacks").
 *
 * Destroying a resource: it is refused (RAP_ERR_BUSY) only while the resource owns a live block,
 * and a refused destroy changes nothing, so what it frees later is still pending on it; uses
 * recorded with rap_record_resource never make it busy, and a block whose owner went away stays
 * pending on a busy use. A queue that waits (cross_resource=wait) on another queue's event keeps
 * working when that queue is destroyed, and rap_manager_destroy finishes every queue's work before
 * it frees any pool, whatever order the queues were made in. Specs nested deeper than 64 levels
 * are refused by column, never by a stack overflow. A failing host allocation of the library's own
 * (the rapi_host_fail_at seam) while a pending block is being taken leaves the pool exactly as
 * before. Pool calls from work functions and from a thread holding a ThreadSafe wrapper never
 * deadlock, and a queue's own work cannot synchronize or destroy that queue.
 * Busy queues are held by gates; calls that could hang run under a watchdog (watchdog.h), which
 * opens the gates and fails the check instead of hanging; no sleeps.
 */
#define _GNU_SOURCE   /* setenv, syscall(SYS_gettid) */

#include "gate.h"
#include "test_util.h"
#include "watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The seam of src/core/host_mem.c: the nth host allocation of the library's own on this thread
 * (counted from now) fails, and every later one too if keep_failing; 0 turns it off. */
void rapi_host_fail_at(long nth, bool keep_failing);
unsigned long rapi_host_allocs(void);

#define KiB ((size_t)1024)
/* Chunks of exactly 64 KiB that never coalesce on their own: a block of 64 KiB is a whole chunk. */
#define ONE_BLOCK "initial_size=64KiB next_size=64KiB heuristic=never"

/* ---- fixture: a ResourceAwarePool over HOST, three queues with a gate each -------------------
 * Heap-allocated: a failed check ends the body and leaves it (and any queue blocked on a gate) be. */
typedef struct lc {
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *host, *q[4];   /* q[1..3] */
  gate *g[4];                  /* g[i] holds q[i] once lc_busy(x, i) submitted it */
} lc;

static lc *lc_setup(const char *options) {
  lc *x = calloc(1, sizeof *x);
  RAP_CHECK(x != NULL);
  x->rm = tu_manager();
  x->pool = tu_make(x->rm, "pool", "ResourceAwarePool", "HOST", options);
  RAP_CHECK_OK(rap_resource_host(x->rm, &x->host));
  for (int i = 1; i <= 3; i++) {
    RAP_CHECK_OK(rap_resource_create_host_async(x->rm, &x->q[i]));
    x->g[i] = malloc(sizeof(gate));
    RAP_CHECK(x->g[i] != NULL);
    gate_init(x->g[i]);
  }
  return x;
}

static void lc_busy(lc *x, int i) { RAP_CHECK_OK(rap_resource_submit(x->q[i], gate_job, x->g[i])); }

static void lc_teardown(lc *x) {
  for (int i = 1; i <= 3; i++) gate_open(x->g[i]);
  TU_CHECK(x->pool);
  RAP_CHECK_OK(rap_manager_destroy(x->rm));   /* nothing leaked */
  for (int i = 1; i <= 3; i++) {
    gate_destroy(x->g[i]);
    free(x->g[i]);
  }
  free(x);
}

static void *lc_alloc(lc *x, size_t n, rap_resource *r) {
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(x->pool, &p, n, r));
  RAP_CHECK(p != NULL);
  return p;
}


static bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* Work that checks a block still holds what it was given (seed), then writes the next pattern
 * (seed + 1) - only if it was intact, so memory that was freed under it is not scribbled on. */
typedef struct check_fill {
  void *p;
  size_t n;
  unsigned seed;
  atomic_int intact;   /* -1 not run yet, 0 damaged, 1 intact */
} check_fill;

static void check_fill_job(void *arg) {
  check_fill *f = arg;
  bool ok = tu_intact(f->p, f->n, f->seed);
  if (ok) tu_fill(f->p, f->n, f->seed + 1);
  atomic_store(&f->intact, ok ? 1 : 0);
}

static check_fill *new_check_fill(void *p, size_t n, unsigned seed) {
  check_fill *f = malloc(sizeof *f);   /* leaked if the body fails: queued work may still run */
  RAP_CHECK(f != NULL);
  f->p = p;
  f->n = n;
  f->seed = seed;
  atomic_init(&f->intact, -1);
  tu_fill(p, n, seed);
  return f;
}

static void quiet_log(int level, const char *message, void *user) {
  (void)level, (void)message, (void)user;
}

/* ---- 1. a refused destroy changes nothing ------------------------------------------------------ */

/* q1 owns a live block, so destroying it is refused. Afterwards q1 is busy and frees another
 * block: that block is pending on q1 like any other, and q2 must get new memory, not it. */
RAP_TEST(Lifecycle, RefusedDestroyKeepsLaterFreesPending) {
  lc *x = lc_setup(ONE_BLOCK);
  void *live = lc_alloc(x, 32 * KiB, x->q[1]);
  void *p = lc_alloc(x, 32 * KiB, x->q[1]);   /* the chunk is full */
  rap_stats before = tu_stats(x->pool);
  RAP_CHECK_STATUS(rap_resource_destroy(x->q[1]), RAP_ERR_BUSY);
  rap_stats after = tu_stats(x->pool);
  TU_STATS_EQ(before, after);
  lc_busy(x, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, p, x->q[1]));
  RAP_CHECK_EQ(tu_rstats(x->pool, x->q[1]).pending_bytes, 32 * KiB);
  void *o = lc_alloc(x, 32 * KiB, x->q[2]);   /* q1 has not passed the free: a new chunk */
  RAP_CHECK(!overlaps(o, 32 * KiB, p, 32 * KiB));
  TU_EXPECT(x->pool, chunk_count, 2);
  TU_EXPECT(x->pool, pending_count, 1);
  TU_CHECK(x->pool);
  RAP_CHECK_OK(rap_deallocate(x->pool, o, x->q[2]));
  RAP_CHECK_OK(rap_deallocate(x->pool, live, x->q[1]));
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_resource_destroy(x->q[1]));   /* it owns nothing live now */
  RAP_CHECK_OK(rap_resource_synchronize(x->q[2]));
  RAP_CHECK_OK(rap_release(x->pool));
  TU_EXPECT(x->pool, pending_count, 0);
  TU_EXPECT(x->pool, chunk_count, 0);
  lc_teardown(x);
}

/* ---- 2. uses never make a destroy busy -------------------------------------------------------- */

/* The contract's case: owned by q1, recorded on q2, freed on q1 while q2 is busy. q1 is idle, so
 * destroying it succeeds; the block stays pending on q2 (q3 gets new memory) until q2 passes. */
RAP_TEST(Lifecycle, DestroyOwnerWhileItsUseIsBusy) {
  lc *x = lc_setup(ONE_BLOCK);
  void *p = lc_alloc(x, 64 * KiB, x->q[1]);
  RAP_CHECK_OK(rap_record_resource(x->pool, p, x->q[2]));
  lc_busy(x, 2);
  RAP_CHECK_OK(rap_deallocate(x->pool, p, x->q[1]));
  RAP_CHECK_OK(rap_resource_destroy(x->q[1]));
  TU_EXPECT(x->pool, pending_count, 1);
  TU_CHECK(x->pool);
  void *o = lc_alloc(x, 64 * KiB, x->q[3]);
  RAP_CHECK(o != p);
  TU_EXPECT(x->pool, chunk_count, 2);
  TU_EXPECT(x->pool, pending_count, 1);
  gate_open(x->g[2]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q[2]));
  RAP_CHECK_OK(rap_release(x->pool));   /* q2 has passed: p is free, and its chunk goes back */
  TU_EXPECT(x->pool, pending_count, 0);
  TU_EXPECT(x->pool, chunk_count, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, o, x->q[3]));
  lc_teardown(x);
}

/* A live block recorded on q2: destroying q2 drops the use. The block is then freed on a busy q1
 * and is pending on q1 alone - the pool must not look at q2's state any more (ASan). */
RAP_TEST(Lifecycle, DestroyUseOfALiveBlock) {
  lc *x = lc_setup(ONE_BLOCK);
  void *p = lc_alloc(x, 64 * KiB, x->q[1]);
  RAP_CHECK_OK(rap_record_resource(x->pool, p, x->q[2]));
  RAP_CHECK_OK(rap_resource_destroy(x->q[2]));
  TU_CHECK(x->pool);
  lc_busy(x, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, p, x->q[1]));
  void *o = lc_alloc(x, 64 * KiB, x->q[3]);
  RAP_CHECK(o != p);
  TU_EXPECT(x->pool, pending_count, 1);
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q[1]));
  RAP_CHECK_OK(rap_release(x->pool));
  TU_EXPECT(x->pool, pending_count, 0);
  TU_EXPECT(x->pool, chunk_count, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, o, x->q[3]));
  lc_teardown(x);
}

/* A block recorded on q2 and freed on a busy q1: destroying the idle q2 drops the use; the block
 * is still pending on q1 and comes back once q1 passes. */
RAP_TEST(Lifecycle, DestroyUseOfAPendingBlock) {
  lc *x = lc_setup(ONE_BLOCK);
  void *p = lc_alloc(x, 64 * KiB, x->q[1]);
  RAP_CHECK_OK(rap_record_resource(x->pool, p, x->q[2]));
  lc_busy(x, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, p, x->q[1]));
  RAP_CHECK_OK(rap_resource_destroy(x->q[2]));
  TU_EXPECT(x->pool, pending_count, 1);
  TU_CHECK(x->pool);
  void *o = lc_alloc(x, 64 * KiB, x->q[3]);
  RAP_CHECK(o != p);
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q[1]));
  RAP_CHECK_OK(rap_release(x->pool));
  TU_EXPECT(x->pool, pending_count, 0);
  TU_EXPECT(x->pool, chunk_count, 1);
  RAP_CHECK_OK(rap_deallocate(x->pool, o, x->q[3]));
  lc_teardown(x);
}

/* ---- 3. queued waits on a destroyed resource's events ----------------------------------------- */

static int sync_call(void *arg) { return rap_resource_synchronize(arg); }
static int manager_destroy_call(void *arg) { return rap_manager_destroy(arg); }

/* q2 takes q1's pending block behind a queued wait for q1's event, and q2 is still busy when q1
 * finishes and is destroyed: the queued wait must not touch q1's freed state when it runs. */
RAP_TEST(Lifecycle, DestroyQueueThatAnotherQueueWaitsFor) {
  lc *x = lc_setup(ONE_BLOCK " cross_resource=wait");
  lc_busy(x, 2);
  lc_busy(x, 1);
  void *p = lc_alloc(x, 64 * KiB, x->q[1]);
  RAP_CHECK_OK(rap_deallocate(x->pool, p, x->q[1]));
  void *o = lc_alloc(x, 64 * KiB, x->q[2]);   /* q2 waits for q1 in its queue */
  RAP_CHECK(o == p);
  check_fill *f = new_check_fill(o, 64 * KiB, 5);
  RAP_CHECK_OK(rap_resource_submit(x->q[2], check_fill_job, f));
  gate_open(x->g[1]);
  RAP_CHECK_OK(rap_resource_destroy(x->q[1]));   /* q1 finished and owns nothing */
  gate_open(x->g[2]);                            /* now q2 runs its wait for q1's event */
  wd_call *c = wd_start(sync_call, x->q[2]);
  RAP_CHECK(c != NULL);
  int st = -1;
  WD_FINISH(c, x->g, 4, &st, "rap_resource_synchronize(q2)");
  RAP_CHECK_OK(st);
  RAP_CHECK_EQ(atomic_load(&f->intact), 1);
  RAP_CHECK(tu_intact(o, 64 * KiB, 6));
  free(f);
  RAP_CHECK_OK(rap_deallocate(x->pool, o, x->q[2]));
  lc_teardown(x);
}

typedef struct order_param {
  const char *label;
  bool waiter_first;   /* the queue that waits was created before the queue it waits for */
} order_param;

static const order_param order_params[] = {{"WaiterCreatedFirst", true}, {"OwnerCreatedFirst", false}};

/* rap_manager_destroy while a queue holds a queued wait for another queue's event, then work on a
 * block it took and leaked: every queue's work must run before any queue or pool goes away. The
 * destroy runs on a helper thread; the waiting queue's gate opens once that thread blocks (in the
 * synchronize that comes first, or - at 18253d9 - joining a queue after the pools were freed). */
RAP_TEST_P(Lifecycle, ManagerDestroyWithAQueuedWait, order_param, order_params) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "HOST",
                                ONE_BLOCK " cross_resource=wait alignment=16");
  rap_resource *w = NULL, *o = NULL;
  if (param->waiter_first) {
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &w));
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &o));
  } else {
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &o));
    RAP_CHECK_OK(rap_resource_create_host_async(rm, &w));
  }
  gate *g[2] = {malloc(sizeof(gate)), malloc(sizeof(gate))};   /* leaked if the body fails */
  RAP_CHECK(g[0] != NULL && g[1] != NULL);
  gate_init(g[0]);
  gate_init(g[1]);
  RAP_CHECK_OK(rap_resource_submit(o, gate_job, g[0]));
  RAP_CHECK_OK(rap_resource_submit(w, gate_job, g[1]));
  void *p = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, 64 * KiB, o));
  void *guard = malloc(256);   /* keeps the chunk off the top of the heap once it is freed */
  RAP_CHECK_OK(rap_deallocate(pool, p, o));
  RAP_CHECK_OK(rap_allocate(pool, &b, 64 * KiB, w));   /* behind a queued wait for o */
  RAP_CHECK(b == p);
  check_fill *f = new_check_fill(b, 64 * KiB, 9);
  RAP_CHECK_OK(rap_resource_submit(w, check_fill_job, f));   /* b is leaked on purpose */
  gate_open(g[0]);
  RAP_CHECK_OK(rap_resource_synchronize(o));
  RAP_CHECK_OK(rap_log_set_handler(quiet_log, NULL));   /* the leak tu_report */
  wd_call *c = wd_start(manager_destroy_call, rm);
  RAP_CHECK(c != NULL);
  RAP_CHECK(wd_wait_asleep(c));
  gate_open(g[1]);
  int st = -1;
  bool finished = wd_finish(c, g, 2, &st);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  if (!finished) rap_test_fail(__FILE__, __LINE__, "rap_manager_destroy hung (watchdog)");
  RAP_CHECK_STATUS(st, RAP_ERR_BUSY);   /* b was live */
  RAP_CHECK_EQ(atomic_load(&f->intact), 1);
  free(guard);
  free(f);
  for (int i = 0; i < 2; i++) {
    gate_destroy(g[i]);
    free(g[i]);
  }
}

/* ---- 4. nesting is capped --------------------------------------------------------------------- */

/* "Q(" depth times, then HOST, then the closing parentheses. */
static char *nested_spec(size_t depth) {
  char *s = malloc(3 * depth + 5);
  RAP_CHECK(s != NULL);
  char *p = s;
  for (size_t i = 0; i < depth; i++, p += 2) memcpy(p, "Q(", 2);
  memcpy(p, "HOST", 4);
  p += 4;
  memset(p, ')', depth);
  p[depth] = '\0';
  return s;
}

RAP_TEST(Lifecycle, SpecOf65LevelsIsInvalidByColumn) {
  rap_manager *rm = tu_manager();
  char *spec = nested_spec(65);
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "x", spec, &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "column");
  RAP_CHECK(a == NULL);
  free(spec);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

typedef struct deep_make {
  rap_manager *rm;
  rap_allocator *out;
  int status;
  char error[600];
} deep_make;

static void *deep_make_thread(void *arg) {
  deep_make *d = arg;
  d->status = rap_allocator_make(d->rm, "deep", "QuickPool", "HOST", NULL, &d->out);
  snprintf(d->error, sizeof d->error, "%s", rap_last_error());
  return NULL;
}

/* 6 KB of nesting from RAP_ALLOCATOR_DEEP, parsed by rap_allocator_make on a 128 KiB stack. */
RAP_TEST(Lifecycle, DeepSpecFromEnvironmentOnASmallStack) {
  rap_manager *rm = tu_manager();
  char *spec = nested_spec(2000);
  RAP_CHECK(strlen(spec) >= 6000);
  RAP_CHECK(setenv("RAP_ALLOCATOR_DEEP", spec, 1) == 0);
  deep_make d = {rm, NULL, -1000, ""};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  RAP_CHECK(pthread_attr_setstacksize(&attr, 128 * 1024) == 0);
  pthread_t t;
  int rc = pthread_create(&t, &attr, deep_make_thread, &d);
  pthread_attr_destroy(&attr);
  RAP_CHECK(rc == 0);
  pthread_join(t, NULL);
  unsetenv("RAP_ALLOCATOR_DEEP");
  free(spec);
  RAP_CHECK_STATUS(d.status, RAP_ERR_INVALID);
  RAP_CHECK_STR(d.error, "column");
  RAP_CHECK(d.out == NULL);
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "deep", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* 450 KB of nesting through rap_allocator_make_spec on the main thread's stack. */
RAP_TEST(Lifecycle, HugeSpecOnTheMainThread) {
  rap_manager *rm = tu_manager();
  char *spec = nested_spec(150000);
  RAP_CHECK(strlen(spec) >= 450000);
  rap_allocator *a = NULL;
  int st = rap_allocator_make_spec(rm, "huge", spec, &a);
  free(spec);
  RAP_CHECK_STATUS(st, RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "column");
  RAP_CHECK(a == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- 6. the library's own host allocations fail while a pending block is taken -----------------
 * q1 holds A (64 KiB) pending, q2 holds B (128 KiB) pending, both busy; 32 blocks are live on the
 * host, so the next live block makes the pool's pointer map grow. Two calls take pending
 * blocks: q1 reuses half of A (own pending reuse, a split), and q3 needs 128 KiB, which only B
 * fits (cross_resource=wait: q3 takes B behind a queued wait for q2). For n = 1, 2, ... the n-th
 * host allocation of the library's own fails (once, or from then on): every call answers RAP_OK
 * or RAP_ERR_NOMEM, and after RAP_ERR_NOMEM the pool's statistics, each resource's, the check and
 * every block are exactly as before - A and B still pending on their busy queues. The loop ends
 * with the first n that the calls never reach. */
typedef struct hf_param {
  const char *label;
  bool cross_first;   /* q3's wait-take before q1's own reuse */
  bool persist;       /* every later host allocation fails too */
} hf_param;

static const hf_param hf_params[] = {
    {"OwnReuseThenCrossWait", false, false},
    {"CrossWaitThenOwnReuse", true, false},
    {"OwnReuseThenCrossWait_KeepFailing", false, true},
    {"CrossWaitThenOwnReuse_KeepFailing", true, true},
};

enum { HF_LIVE = 31 };   /* with the filler, 32 live blocks: the 33rd makes the map grow */

typedef struct hf {
  lc *x;
  void *A, *B, *filler, *live[HF_LIVE];
  void *own, *cross;   /* what the two calls got */
  long n;
  bool persist;
  unsigned long counted;   /* host allocations seen while armed */
  int nomem;
} hf;

typedef struct hf_snap {
  rap_stats pool, r[4];   /* host, q1, q2, q3 */
} hf_snap;

static hf_snap hf_snapshot(hf *h) {
  hf_snap s;
  s.pool = tu_stats(h->x->pool);
  s.r[0] = tu_rstats(h->x->pool, h->x->host);
  for (int i = 1; i <= 3; i++) s.r[i] = tu_rstats(h->x->pool, h->x->q[i]);
  return s;
}

static void hf_arm(hf *h) {
  if (h->counted < (unsigned long)h->n) rapi_host_fail_at(h->n - (long)h->counted, h->persist);
  else if (h->persist) rapi_host_fail_at(1, true);
}

static void hf_disarm(hf *h, unsigned long start) {
  h->counted += rapi_host_allocs() - start;
  rapi_host_fail_at(0, false);
}

/* Everything that must hold after a call, failed or not. */
static void hf_consistent(hf *h) {
  TU_CHECK(h->x->pool);
  for (int i = 0; i < HF_LIVE; i++) {
    rap_resource *owner = NULL;
    RAP_CHECK_OK(rap_pointer_resource(h->x->pool, h->live[i], &owner));
    RAP_CHECK(owner == h->x->host);
    RAP_CHECK(tu_intact(h->live[i], 256, (unsigned)i));
  }
}

static void hf_call(hf *h, void **slot, size_t bytes, rap_resource *r, void *expect) {
  hf_snap before = hf_snapshot(h);
  void *p = &before;
  unsigned long start = rapi_host_allocs();
  hf_arm(h);
  int st = rap_allocate(h->x->pool, &p, bytes, r);
  hf_disarm(h, start);
  RAP_CHECK(st == RAP_OK || st == RAP_ERR_NOMEM);
  if (st == RAP_ERR_NOMEM) {
    h->nomem++;
    RAP_CHECK(p == &before);   /* out-param untouched */
    RAP_CHECK(strlen(rap_last_error()) > 0);
    hf_snap after = hf_snapshot(h);
    TU_STATS_EQ(before.pool, after.pool);
    for (int i = 0; i < 4; i++) TU_STATS_EQ(before.r[i], after.r[i]);
    rap_resource *owner = NULL;   /* what no call took yet is still pending, not live */
    if (h->own == NULL)
      RAP_CHECK_STATUS(rap_pointer_resource(h->x->pool, h->A, &owner), RAP_ERR_UNKNOWN_POINTER);
    if (h->cross == NULL)
      RAP_CHECK_STATUS(rap_pointer_resource(h->x->pool, h->B, &owner), RAP_ERR_UNKNOWN_POINTER);
  } else {
    RAP_CHECK(p == expect);
    *slot = p;
  }
  hf_consistent(h);
}

static void hf_run(hf *h, const hf_param *P) {
  lc *x = lc_setup("initial_size=256KiB next_size=256KiB heuristic=never cross_resource=wait "
                   "wait_above=1KiB");
  h->x = x;
  lc_busy(x, 1);
  lc_busy(x, 2);
  h->A = lc_alloc(x, 64 * KiB, x->q[1]);
  RAP_CHECK_OK(rap_deallocate(x->pool, h->A, x->q[1]));
  h->B = lc_alloc(x, 128 * KiB, x->q[2]);
  RAP_CHECK_OK(rap_deallocate(x->pool, h->B, x->q[2]));
  /* 40 KiB more, so that the free memory left (16 KiB) fits neither call: q1 takes from A. */
  h->filler = lc_alloc(x, 40 * KiB, NULL);
  for (int i = 0; i < HF_LIVE; i++) {
    h->live[i] = lc_alloc(x, 256, NULL);
    tu_fill(h->live[i], 256, (unsigned)i);
  }
  TU_EXPECT(x->pool, pending_count, 2);
  TU_EXPECT(x->pool, chunk_count, 1);
  for (int step = 0; step < 2; step++) {
    if ((step == 0) != P->cross_first) hf_call(h, &h->own, 32 * KiB, x->q[1], h->A);
    else hf_call(h, &h->cross, 128 * KiB, x->q[3], h->B);
  }
  /* Everything back: the blocks the calls got, the queues let run, every chunk released. */
  if (h->own) RAP_CHECK_OK(rap_deallocate(x->pool, h->own, x->q[1]));
  if (h->cross) RAP_CHECK_OK(rap_deallocate(x->pool, h->cross, x->q[3]));
  for (int i = 0; i < HF_LIVE; i++) RAP_CHECK_OK(rap_deallocate(x->pool, h->live[i], NULL));
  RAP_CHECK_OK(rap_deallocate(x->pool, h->filler, NULL));
  for (int i = 1; i <= 3; i++) gate_open(x->g[i]);
  for (int i = 1; i <= 3; i++) RAP_CHECK_OK(rap_resource_synchronize(x->q[i]));
  RAP_CHECK_OK(rap_release(x->pool));
  rap_stats s = tu_stats(x->pool);
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.chunk_count, 0);
  RAP_CHECK_EQ(s.actual_bytes, 0);
  lc_teardown(x);
  h->x = NULL;
}

RAP_TEST_P(Lifecycle, HostAllocationFailsWhileTakingPendingBlocks, hf_param, hf_params) {
  int level = rap_log_get_level();
  RAP_CHECK_OK(rap_log_set_level(RAP_LOG_OFF));   /* failed fences are logged, and that is fine */
  int failures = 0;
  bool reached = true;
  long n;
  for (n = 1; reached && n < 200; n++) {
    hf h;
    memset(&h, 0, sizeof h);
    h.n = n;
    h.persist = param->persist;
    hf_run(&h, param);
    reached = h.counted >= (unsigned long)n;   /* the n-th allocation happened, and failed */
    if (!reached) RAP_CHECK_EQ(h.nomem, 0);
    failures += h.nomem > 0;
  }
  RAP_CHECK_OK(rap_log_set_level(level));
  RAP_CHECK(!reached);      /* the loop ended because the calls completed without a failure */
  RAP_CHECK(failures > 0);  /* and some call did answer RAP_ERR_NOMEM */
}

/* ---- 7. pool calls from work functions and under ThreadSafe never deadlock --------------------- */

typedef struct self_call {
  rap_resource *q;
  bool destroy;
} self_call;

static int self_call_fn(void *arg) {
  self_call *s = arg;
  return s->destroy ? rap_resource_destroy(s->q) : rap_resource_synchronize(s->q);
}

static void own_queue_from_its_work(bool destroy) {
  rap_manager *rm = tu_manager();
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  self_call *s = malloc(sizeof *s);   /* leaked if the work never returns */
  RAP_CHECK(s != NULL);
  *s = (self_call){q, destroy};
  wd_call *c = wd_submit(q, self_call_fn, s);
  RAP_CHECK(c != NULL);
  int st = -1;
  WD_FINISH(c, NULL, 0, &st, destroy ? "rap_resource_destroy(q) from q's work"
                                    : "rap_resource_synchronize(q) from q's work");
  RAP_CHECK_STATUS(st, RAP_ERR_BUSY);
  free(s);
  RAP_CHECK_OK(rap_resource_synchronize(q));   /* the queue still works */
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Lifecycle, SynchronizeFromOwnWorkIsBusy) { own_queue_from_its_work(false); }
RAP_TEST(Lifecycle, DestroyFromOwnWorkIsBusy) { own_queue_from_its_work(true); }

typedef struct mode_param {
  const char *label;
  bool wait;   /* cross_resource=wait; otherwise grow, with the parent dry (the out-of-memory wait) */
} mode_param;

static const mode_param mode_params[] = {{"Wait", true}, {"GrowDryParent", false}};

typedef struct host_alloc {
  rap_allocator *a;
  size_t bytes;
  void *p;
} host_alloc;

static int host_alloc_fn(void *arg) {
  host_alloc *h = arg;
  return rap_allocate(h->a, &h->p, h->bytes, NULL);
}

/* Work on q allocates on the host resource while the only block that fits is pending on q itself:
 * waiting for q's event from q's own work would never end. The pool grows or answers NOMEM. */
RAP_TEST_P(Lifecycle, WorkOnQueueAllocatesOnHostWhileOnlyItsOwnPendingFits, mode_param, mode_params) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", NULL);
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "f",
                                param->wait ? ONE_BLOCK " cross_resource=wait" : ONE_BLOCK);
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *y = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &y, 64 * KiB, q));
  RAP_CHECK_OK(rap_deallocate(pool, y, q));   /* pending on q */
  if (!param->wait) RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1000"));
  host_alloc *h = malloc(sizeof *h);   /* leaked if the work never returns */
  RAP_CHECK(h != NULL);
  *h = (host_alloc){pool, 64 * KiB, NULL};
  wd_call *c = wd_submit(q, host_alloc_fn, h);
  RAP_CHECK(c != NULL);
  int st = -1;
  WD_FINISH(c, NULL, 0, &st, "rap_allocate on the host from q's work");
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  if (param->wait) {
    RAP_CHECK(st == RAP_OK || st == RAP_ERR_NOMEM);
    if (st == RAP_OK) RAP_CHECK(h->p != y);   /* it grew */
  } else {
    RAP_CHECK(st == RAP_OK || st == RAP_ERR_NOMEM);
  }
  TU_CHECK(pool);
  if (st == RAP_OK) RAP_CHECK_OK(rap_deallocate(pool, h->p, NULL));
  free(h);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_release(pool));
  TU_EXPECT(pool, pending_count, 0);
  TU_EXPECT(pool, chunk_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

typedef struct free_through {
  rap_allocator *a;
  void *p;
  rap_resource *r;
  atomic_int status;
} free_through;

static void free_through_job(void *arg) {
  free_through *t = arg;
  atomic_store(&t->status, rap_deallocate(t->a, t->p, t->r));
}

/* The contract's case: a thread allocates on the host through ThreadSafe(ResourceAwarePool), and
 * the host must wait for q's event (the block q freed is the only one that fits: cross_resource=
 * wait, or the parent is dry and the out-of-memory path waits), while q's queued work frees
 * another block through the same wrapper. The wrapper's lock must not be held across that wait. */
RAP_TEST_P(Lifecycle, ThreadSafeHostWaitWhileQueueWorkFreesThroughIt, mode_param, mode_params) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", NULL);
  static const char *const opts[2] = {"initial_size=128KiB next_size=128KiB heuristic=never",
                                      "initial_size=128KiB next_size=128KiB heuristic=never "
                                      "cross_resource=wait"};
  tu_make(rm, "pool", "ResourceAwarePool", "f", opts[param->wait]);
  rap_allocator *ts = tu_make(rm, "ts", "ThreadSafe", "pool", NULL);
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  gate *g = malloc(sizeof *g);   /* leaked if the body fails */
  RAP_CHECK(g != NULL);
  gate_init(g);
  void *p = NULL, *x = NULL;
  RAP_CHECK_OK(rap_allocate(ts, &p, 64 * KiB, q));
  RAP_CHECK_OK(rap_allocate(ts, &x, 64 * KiB, q));   /* the chunk is full */
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, g));
  RAP_CHECK_OK(rap_deallocate(ts, p, q));   /* pending on the busy q */
  free_through *t = malloc(sizeof *t);
  RAP_CHECK(t != NULL);
  t->a = ts;
  t->p = x;
  t->r = q;
  atomic_init(&t->status, -1000);
  RAP_CHECK_OK(rap_resource_submit(q, free_through_job, t));
  if (!param->wait) RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1000"));
  host_alloc *h = malloc(sizeof *h);
  RAP_CHECK(h != NULL);
  *h = (host_alloc){ts, 64 * KiB, NULL};
  wd_call *c = wd_start(host_alloc_fn, h);
  RAP_CHECK(c != NULL);
  RAP_CHECK(wd_wait_asleep(c));   /* the allocation waits on the host for q */
  gate_open(g);
  int st = -1;
  WD_FINISH(c, &g, 1, &st, "rap_allocate through ThreadSafe on the host");
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  if (param->wait) RAP_CHECK_OK(st);
  else RAP_CHECK(st == RAP_OK || st == RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(atomic_load(&t->status));
  if (st == RAP_OK) RAP_CHECK_OK(rap_deallocate(ts, h->p, NULL));
  TU_CHECK(ts);
  TU_EXPECT(ts, allocation_count, 0);
  free(h);
  free(t);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(g);
  free(g);
}

/* ---- 8. rap_manager_destroy finishes queued work before it frees any pool ---------------------- */

/* A block of a QuickPool is leaked with work queued on q that reads and writes it; q is busy until
 * the destroy (on a helper thread) blocks. The work must find the block's bytes, in memory that is
 * still the pool's. */
RAP_TEST(Lifecycle, ManagerDestroyFinishesQueuedWorkBeforeFreeingPools) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "QuickPool", "HOST", "initial_size=4KiB alignment=16");
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  gate *g = malloc(sizeof *g);   /* leaked if the body fails */
  RAP_CHECK(g != NULL);
  gate_init(g);
  void *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &b, 1000, NULL));
  void *guard = malloc(256);   /* keeps the chunk off the top of the heap once it is freed */
  check_fill *f = new_check_fill(b, 1000, 3);
  RAP_CHECK_OK(rap_resource_submit(q, gate_job, g));
  RAP_CHECK_OK(rap_resource_submit(q, check_fill_job, f));   /* b is leaked on purpose */
  RAP_CHECK_OK(rap_log_set_handler(quiet_log, NULL));      /* the leak tu_report */
  wd_call *c = wd_start(manager_destroy_call, rm);
  RAP_CHECK(c != NULL);
  RAP_CHECK(wd_wait_asleep(c));
  gate_open(g);
  int st = -1;
  bool finished = wd_finish(c, &g, 1, &st);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  if (!finished) rap_test_fail(__FILE__, __LINE__, "rap_manager_destroy hung (watchdog)");
  RAP_CHECK_STATUS(st, RAP_ERR_BUSY);   /* b was live */
  RAP_CHECK_EQ(atomic_load(&f->intact), 1);
  free(guard);
  free(f);
  gate_destroy(g);
  free(g);
}

/* ---- found by review after the fixes --------------------------------------------------------
 * Two queues: A's work host-waits for C while C holds a queued wait for A's point behind that work.
 * The work must not hang: the pool grows instead, or, with nothing to grow into, answers NOMEM. */
typedef struct cross_job {
  rap_allocator *pool;
  void *got;
} cross_job;

static int cross_alloc_fn(void *arg) {
  cross_job *j = arg;
  return rap_allocate(j->pool, &j->got, 64 * KiB, NULL);
}

RAP_TEST(Lifecycle, QueueWorkDoesNotWaitForAQueueThatWaitsForIt) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "HOST",
                                "initial_size=64KiB next_size=64KiB heuristic=never "
                                "cross_resource=wait wait_above=1KiB");
  rap_resource *a, *c;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &a));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &c));
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_resource_submit(a, gate_job, &g));
  cross_job j = {pool, NULL};
  wd_call *call = wd_submit(a, cross_alloc_fn, &j);   /* A's work, behind the gate */
  void *x, *y;
  RAP_CHECK_OK(rap_allocate(pool, &x, 64 * KiB, a));
  RAP_CHECK_OK(rap_deallocate(pool, x, a));             /* pending on A */
  RAP_CHECK_OK(rap_allocate(pool, &y, 64 * KiB, c));    /* C takes it behind a queued wait for A */
  RAP_CHECK(y == x);
  RAP_CHECK_OK(rap_deallocate(pool, y, c));             /* pending on C, behind that wait */
  gate_open(&g);
  gate *gates[] = {&g};
  int st = -1;
  WD_FINISH(call, gates, 1, &st, "A's work allocating on the host");
  RAP_CHECK_OK(st);                                      /* grew: HOST has memory */
  RAP_CHECK(j.got != x);
  RAP_CHECK_OK(rap_deallocate(pool, j.got, NULL));
  RAP_CHECK_OK(rap_resource_synchronize(a));
  RAP_CHECK_OK(rap_resource_synchronize(c));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* A pool's teardown waits for its pending blocks; from its own queue's work it cannot, so the
 * destroy is refused and the queue's later work still writes into memory that is there. The work
 * runs behind a gate, once the block is pending: the pool is plain, and the main thread's free and
 * the work's destroy must not be inside it at once (that one is refused too, with another
 * sentence: ThreadGuard.DestroyWhileAnotherThreadIsInsideIsRefused). */
typedef struct own_destroy {
  rap_allocator *pool;
  int status;
  void *x;
  char error[512];
} own_destroy;

static void own_destroy_job(void *arg) {
  own_destroy *d = arg;
  d->status = rap_allocator_destroy(d->pool);
  snprintf(d->error, sizeof d->error, "%s", rap_last_error());
}
static void own_write_job(void *arg) { tu_fill(((own_destroy *)arg)->x, 64 * KiB, 7); }

RAP_TEST(Lifecycle, AllocatorDestroyFromItsQueuesWorkIsBusy) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "HOST",
                                "initial_size=64KiB next_size=64KiB heuristic=never");
  rap_resource *a;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &a));
  own_destroy d = {pool, -1000, NULL, ""};
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_allocate(pool, &d.x, 64 * KiB, a));
  RAP_CHECK_OK(rap_resource_submit(a, gate_job, &g));
  RAP_CHECK_OK(rap_resource_submit(a, own_destroy_job, &d));
  RAP_CHECK_OK(rap_resource_submit(a, own_write_job, &d));   /* stream-ordered use of x */
  RAP_CHECK_OK(rap_deallocate(pool, d.x, a));                 /* pending on a until it passes */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(a));
  RAP_CHECK_STATUS(d.status, RAP_ERR_BUSY);
  RAP_CHECK_STR(d.error, "rap_allocator_destroy('pool'): 1 block is still pending, and a queue's "
                "own work cannot wait for them");
  RAP_CHECK(tu_intact(d.x, 64 * KiB, 7));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* The manager cannot go from the work of one of its own queues: refused, nothing changed. */
typedef struct own_manager {
  rap_manager *rm;
  int status;
} own_manager;

static void own_manager_job(void *arg) {
  own_manager *m = arg;
  m->status = rap_manager_destroy(m->rm);
}

RAP_TEST(Lifecycle, ManagerDestroyFromItsQueuesWorkIsBusy) {
  rap_manager *rm = tu_manager();
  rap_resource *a;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &a));
  own_manager m = {rm, -1000};
  RAP_CHECK_OK(rap_resource_submit(a, own_manager_job, &m));
  RAP_CHECK_OK(rap_resource_synchronize(a));
  RAP_CHECK_STATUS(m.status, RAP_ERR_BUSY);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
