/* test_threads_manager.c — threads that run their own plain pools meet the manager's calls, and
 * pool calls made from work functions.
 *
 * Owners: four threads each make, use and destroy their own plain pool every round (QuickPool and
 * DynamicPoolList on the host resource, ResourceAwarePool on the host resource and on a queue of
 * the thread's own, made and destroyed every round), and use a ThreadSafe(ResourceAwarePool) that
 * all threads share. Meanwhile a prober asks rap_allocator_find about pointers it owns (a HOST
 * block, a block of its own pool, one of the shared pool), interior, freed and foreign pointers,
 * and the owners' latest blocks, and reads the statistics of the allocators it may read; a churner
 * creates and destroys queues and allocators. rap_allocator_find must answer exactly as with one
 * thread, and nothing may race (ThreadSanitizer): destroying a resource touches only the pools that
 * have seen it. Workers tu_report back; the checks run on the main thread. Bounded, fixed seeds.
 *
 * Work functions: a job on queue q1 allocates and frees on q1 itself, on the host resource and on
 * another queue q2; asks the host for what only a block pending on the busy q2 fits (wait mode may
 * wait for q2, whose gate the test opens once the job sleeps, and take it; grow mode grows); and
 * allocates on the host while the only block that fits is pending on q1 itself, with the parent
 * working and then dry. For grow and wait, plain and under ThreadSafe, the job must finish
 * (watchdog.h) with the statuses the contract gives.
 */
#define _GNU_SOURCE   /* syscall(SYS_gettid) in watchdog.h */

#include "gate.h"
#include "test_util.h"
#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1024)

/* ---- owners, a prober and a churner ------------------------------------------------------------ */

enum { OWNERS = 4, ROUNDS = 8, BLOCKS = 72, PROBES = 200, CHURNS = 12 };

typedef struct shared {
  rap_manager *rm;
  rap_allocator *host, *ts;
  rap_resource *host_res;
  _Atomic(void *) latest[OWNERS];   /* each owner's newest block: live, or just freed */
  atomic_int owners_left;
} shared;

typedef struct owner {
  shared *sh;
  unsigned id;
  tu_report rep;
} owner;

static const char *const owner_strategy[OWNERS] = {"QuickPool", "ResourceAwarePool",
                                                   "ResourceAwarePool", "DynamicPoolList"};

static void *owner_thread(void *arg) {
  owner *o = arg;
  shared *sh = o->sh;
  tu_report *rep = &o->rep;
  uint64_t rng = 1000 + o->id;
  void *p[BLOCKS];
  size_t n[BLOCKS];
  for (unsigned round = 0; round < ROUNDS; round++) {
    char name[32];
    snprintf(name, sizeof name, "own%u.%u", o->id, round);
    rap_allocator *pool = NULL;
    int st = rap_allocator_make(sh->rm, name, owner_strategy[o->id], "HOST",
                                "initial_size=64KiB next_size=64KiB", &pool);
    EXPECT_ST(rep, st, RAP_OK);
    if (st != RAP_OK) break;
    rap_resource *q = NULL;   /* owner 1 works on a queue of its own, new every round */
    if (o->id == 1) EXPECT_ST(rep, rap_resource_create_host_async(sh->rm, &q), RAP_OK);
    /* First only the pool (no lock anywhere: the manager's calls of other threads must not read
     * what this loop writes), then the manager's answers about its blocks. */
    for (unsigned i = 0; i < BLOCKS; i++) {
      n[i] = 1 + (size_t)(tu_rand(&rng) % 3000);
      p[i] = NULL;
      EXPECT_ST(rep, rap_allocate(pool, &p[i], n[i], q), RAP_OK);
      if (p[i] == NULL) continue;
      tu_fill(p[i], n[i], o->id * 1000 + i);
      atomic_store(&sh->latest[o->id], p[i]);
    }
    for (unsigned i = 0; i < BLOCKS; i += 16) {
      if (p[i] == NULL) continue;
      rap_allocator *found = NULL;
      EXPECT_ST(rep, rap_allocator_find(sh->rm, p[i], &found), RAP_OK);
      EXPECT_TRUE(rep, found == pool);
      EXPECT_ST(rep, rap_allocator_find(sh->rm, (char *)p[i] + 1, &found), RAP_ERR_UNKNOWN_POINTER);
      void *t = NULL;   /* the shared pool, on this thread's resource */
      EXPECT_ST(rep, rap_allocate(sh->ts, &t, 100 + i, q), RAP_OK);
      EXPECT_ST(rep, rap_allocator_find(sh->rm, t, &found), RAP_OK);
      EXPECT_TRUE(rep, found == sh->ts);
      EXPECT_ST(rep, rap_deallocate(sh->ts, t, q), RAP_OK);
    }
    for (unsigned i = 0; i < BLOCKS; i++) {
      if (p[i] == NULL) continue;
      EXPECT_TRUE(rep, tu_intact(p[i], n[i], o->id * 1000 + i));
      EXPECT_ST(rep, rap_deallocate(pool, p[i], q), RAP_OK);
      if (i % 16 == 1) {   /* freed: no one's, unless it also starts a chunk (then HOST's) */
        rap_allocator *found = NULL;
        int fst = rap_allocator_find(sh->rm, p[i], &found);
        if (fst == RAP_OK && found != sh->host) tu_report_error(rep, RAP_ERR_EXISTS, __LINE__);
        else if (fst != RAP_OK) EXPECT_ST(rep, fst, RAP_ERR_UNKNOWN_POINTER);
      }
    }
    rap_stats s;
    EXPECT_ST(rep, rap_allocator_stats(pool, &s), RAP_OK);
    EXPECT_TRUE(rep, s.allocation_count == 0);
    EXPECT_ST(rep, rap_allocator_stats(sh->host, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_stats(sh->ts, &s), RAP_OK);
    if (q != NULL) EXPECT_ST(rep, rap_resource_destroy(q), RAP_OK);   /* its blocks were pending */
    EXPECT_ST(rep, rap_allocator_destroy(pool), RAP_OK);
  }
  atomic_store(&sh->latest[o->id], NULL);
  atomic_fetch_sub(&sh->owners_left, 1);
  return NULL;
}

typedef struct prober {
  shared *sh;
  rap_allocator *pool;   /* a QuickPool of its own */
  tu_report rep;
} prober;

static void *prober_thread(void *arg) {
  prober *pr = arg;
  shared *sh = pr->sh;
  tu_report *rep = &pr->rep;
  void *hb = NULL, *pb = NULL, *pb2 = NULL, *tb = NULL;
  EXPECT_ST(rep, rap_allocate(sh->host, &hb, 300, NULL), RAP_OK);
  EXPECT_ST(rep, rap_allocate(pr->pool, &pb, 300, NULL), RAP_OK);
  EXPECT_ST(rep, rap_allocate(pr->pool, &pb2, 300, NULL), RAP_OK);   /* not at a chunk's start */
  EXPECT_ST(rep, rap_deallocate(pr->pool, pb2, NULL), RAP_OK);
  EXPECT_ST(rep, rap_allocate(sh->ts, &tb, 300, NULL), RAP_OK);
  char *foreign = malloc(64);
  if (rep->errors != 0 || foreign == NULL) {
    tu_report_error(rep, RAP_ERR_NOMEM, __LINE__);
    free(foreign);
    return NULL;
  }
  for (unsigned i = 0; i < PROBES || atomic_load(&sh->owners_left) > 0; i++) {
    rap_allocator *found = NULL;
    EXPECT_ST(rep, rap_allocator_find(sh->rm, hb, &found), RAP_OK);
    EXPECT_TRUE(rep, found == sh->host);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, pb, &found), RAP_OK);
    EXPECT_TRUE(rep, found == pr->pool);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, tb, &found), RAP_OK);
    EXPECT_TRUE(rep, found == sh->ts);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, (char *)pb + 8, &found), RAP_ERR_UNKNOWN_POINTER);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, (char *)tb + 8, &found), RAP_ERR_UNKNOWN_POINTER);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, pb2, &found), RAP_ERR_UNKNOWN_POINTER);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, foreign, &found), RAP_ERR_UNKNOWN_POINTER);
    EXPECT_ST(rep, rap_allocator_find(sh->rm, NULL, &found), RAP_ERR_UNKNOWN_POINTER);
    for (unsigned k = 0; k < OWNERS; k++) {   /* changing hands while we ask: any answer but a crash */
      void *theirs = atomic_load(&sh->latest[k]);
      if (theirs == NULL) continue;
      int st = rap_allocator_find(sh->rm, theirs, &found);
      EXPECT_TRUE(rep, st == RAP_OK || st == RAP_ERR_UNKNOWN_POINTER);
    }
    rap_stats s;
    EXPECT_ST(rep, rap_allocator_stats(sh->host, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_stats(sh->ts, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_resource_stats(sh->ts, sh->host_res, &s), RAP_OK);
    EXPECT_ST(rep, rap_allocator_stats(pr->pool, &s), RAP_OK);
    EXPECT_TRUE(rep, s.allocation_count == 1);
    if (i > 100000) break;   /* bounded even if an owner never ends */
  }
  EXPECT_ST(rep, rap_deallocate(sh->host, hb, NULL), RAP_OK);
  EXPECT_ST(rep, rap_deallocate(pr->pool, pb, NULL), RAP_OK);
  EXPECT_ST(rep, rap_deallocate(sh->ts, tb, NULL), RAP_OK);
  free(foreign);
  return NULL;
}

typedef struct churner {
  shared *sh;
  tu_report rep;
} churner;

static void *churn_thread(void *arg) {
  churner *c = arg;
  shared *sh = c->sh;
  tu_report *rep = &c->rep;
  for (unsigned i = 0; i < CHURNS; i++) {
    /* A queue made, used through the shared pool, and destroyed: its pending block comes back. */
    rap_resource *q = NULL;
    EXPECT_ST(rep, rap_resource_create_host_async(sh->rm, &q), RAP_OK);
    if (q == NULL) break;
    void *t = NULL;
    EXPECT_ST(rep, rap_allocate(sh->ts, &t, 4000, q), RAP_OK);
    if (t != NULL) memset(t, 0x5a, 4000);
    EXPECT_ST(rep, rap_deallocate(sh->ts, t, q), RAP_OK);
    EXPECT_ST(rep, rap_resource_destroy(q), RAP_OK);
    /* Allocators made, used and destroyed: one plain, one chain from a spec. */
    rap_allocator *a = NULL;
    EXPECT_ST(rep, rap_allocator_make(sh->rm, "churn", "QuickPool", "HOST", "initial_size=16KiB", &a),
              RAP_OK);
    if (a == NULL) break;
    void *b = NULL;
    EXPECT_ST(rep, rap_allocate(a, &b, 1000, NULL), RAP_OK);
    EXPECT_ST(rep, rap_deallocate(a, b, NULL), RAP_OK);
    EXPECT_ST(rep, rap_allocator_destroy(a), RAP_OK);
    rap_allocator *chain = NULL, *inner = NULL;
    EXPECT_ST(rep, rap_allocator_make_spec(sh->rm, "churn2",
                                           "ThreadSafe(ResourceAwarePool(HOST, initial_size=16KiB))",
                                           &chain),
              RAP_OK);
    if (chain == NULL) break;
    EXPECT_ST(rep, rap_allocate(chain, &b, 1000, NULL), RAP_OK);
    EXPECT_ST(rep, rap_deallocate(chain, b, NULL), RAP_OK);
    EXPECT_ST(rep, rap_allocator_get(sh->rm, "churn2/ResourceAwarePool", &inner), RAP_OK);
    EXPECT_ST(rep, rap_allocator_destroy(chain), RAP_OK);
    if (inner != NULL) EXPECT_ST(rep, rap_allocator_destroy(inner), RAP_OK);
  }
  return NULL;
}

RAP_TEST(ThreadsManager, FindAndDestroyWhileOwnersUseTheirPlainPools) {
  static shared sh;   /* static: threads may still read it if a check ends the body */
  memset(&sh, 0, sizeof sh);
  sh.rm = tu_manager();
  sh.host = tu_get(sh.rm, "HOST");
  RAP_CHECK_OK(rap_resource_host(sh.rm, &sh.host_res));
  RAP_CHECK_OK(rap_allocator_make_spec(sh.rm, "shared",
                                       "ThreadSafe(ResourceAwarePool(HOST, initial_size=256KiB))",
                                       &sh.ts));
  for (unsigned i = 0; i < OWNERS; i++) atomic_init(&sh.latest[i], NULL);
  atomic_init(&sh.owners_left, OWNERS);
  static owner own[OWNERS];
  static prober pr;
  static churner ch;
  pthread_t t_own[OWNERS], t_pr, t_ch;
  pr = (prober){&sh, tu_make(sh.rm, "probe", "QuickPool", "HOST", "initial_size=16KiB"), {0, 0, 0}};
  ch = (churner){&sh, {0, 0, 0}};
  for (unsigned i = 0; i < OWNERS; i++) {
    own[i] = (owner){&sh, i, {0, 0, 0}};
    RAP_CHECK(pthread_create(&t_own[i], NULL, owner_thread, &own[i]) == 0);
  }
  RAP_CHECK(pthread_create(&t_pr, NULL, prober_thread, &pr) == 0);
  RAP_CHECK(pthread_create(&t_ch, NULL, churn_thread, &ch) == 0);
  for (unsigned i = 0; i < OWNERS; i++) pthread_join(t_own[i], NULL);
  pthread_join(t_pr, NULL);
  pthread_join(t_ch, NULL);
  tu_check_reports("owner", (tu_report[]){own[0].rep, own[1].rep, own[2].rep, own[3].rep}, OWNERS);
  tu_check_reports("prober", &pr.rep, 1);
  tu_check_reports("churner", &ch.rep, 1);
  RAP_CHECK_OK(rap_release(sh.ts));
  TU_EXPECT(sh.ts, allocation_count, 0);
  TU_EXPECT(sh.ts, pending_count, 0);
  TU_EXPECT(sh.ts, chunk_count, 0);
  TU_CHECK(sh.ts);
  TU_CHECK(pr.pool);
  TU_EXPECT(sh.host, allocation_count, tu_stats(pr.pool).chunk_count);   /* only the probe's chunk */
  RAP_CHECK_OK(rap_manager_destroy(sh.rm));
}

/* ---- pool calls from work functions ------------------------------------------------------------ */

typedef struct cb_param {
  const char *label;
  bool wait;         /* cross_resource=wait wait_above=1KiB; otherwise grow */
  bool threadsafe;   /* the calls go through ThreadSafe(pool) */
} cb_param;

static const cb_param cb_params[] = {
    {"Grow", false, false},
    {"Wait", true, false},
    {"Grow_ThreadSafe", false, true},
    {"Wait_ThreadSafe", true, true},
};

enum { CB_STEPS = 16 };

typedef struct cb {
  rap_allocator *f, *top;
  rap_resource *q1, *q2;
  void *B;                 /* 128 KiB pending on the busy q2 */
  gate *g2;                /* holds q2 */
  int passed8;             /* q2's gate had passed when step 8 returned */
  atomic_int stage;
  int st[CB_STEPS];        /* the job's statuses, read after it finished */
  void *ptr[CB_STEPS];
} cb;

/* Runs on q1. Step numbers index st[] and ptr[]. */
static int cb_work(void *arg) {
  cb *x = arg;
  rap_allocator *a = x->top;
  for (int i = 0; i < CB_STEPS; i++) x->st[i] = -1000;
  /* 0-3: on q1 itself: the block freed on q1 comes straight back. */
  x->st[0] = rap_allocate(a, &x->ptr[0], 4 * KiB, x->q1);
  x->st[1] = rap_deallocate(a, x->ptr[0], x->q1);
  x->st[2] = rap_allocate(a, &x->ptr[2], 4 * KiB, x->q1);
  x->st[3] = rap_deallocate(a, x->ptr[2], x->q1);
  /* 4-5: on the host resource. */
  x->st[4] = rap_allocate(a, &x->ptr[4], 4 * KiB, NULL);
  x->st[5] = rap_deallocate(a, x->ptr[4], NULL);
  /* 6-7: on another queue, busy: pending there. */
  x->st[6] = rap_allocate(a, &x->ptr[6], 4 * KiB, x->q2);
  x->st[7] = rap_deallocate(a, x->ptr[6], x->q2);
  /* 8: 128 KiB on the host, which only B fits: wait mode may wait for q2 (the test opens its
   * gate once this thread sleeps) and take B, or grow; grow mode grows. */
  atomic_store(&x->stage, 8);
  x->st[8] = rap_allocate(a, &x->ptr[8], 128 * KiB, NULL);
  x->passed8 = gate_passed(x->g2);
  atomic_store(&x->stage, 9);
  if (x->st[8] == RAP_OK) x->st[9] = rap_deallocate(a, x->ptr[8], NULL);
  /* 10-11: a new chunk's worth freed on q1; then the host asks for as much, which only that
   * pending block fits: waiting for q1 from q1's own work would never end. */
  atomic_store(&x->stage, 10);
  x->st[10] = rap_allocate(a, &x->ptr[10], 512 * KiB, x->q1);
  if (x->st[10] == RAP_OK) x->st[11] = rap_deallocate(a, x->ptr[10], x->q1);
  atomic_store(&x->stage, 12);
  x->st[12] = rap_allocate(a, &x->ptr[12], 512 * KiB, NULL);
  /* 13: the same with the parent dry: the out-of-memory path must not wait for q1 either. */
  x->st[13] = rap_fault_configure(x->f, "fail_next=1000");
  atomic_store(&x->stage, 14);
  x->st[14] = rap_allocate(a, &x->ptr[14], 512 * KiB, NULL);
  int reset = rap_fault_configure(x->f, "reset");
  if (x->st[13] == RAP_OK) x->st[13] = reset;
  if (x->st[14] == RAP_OK) (void)rap_deallocate(a, x->ptr[14], NULL);
  if (x->st[12] == RAP_OK) (void)rap_deallocate(a, x->ptr[12], NULL);
  atomic_store(&x->stage, 15);
  x->st[15] = rap_release(a);
  return RAP_OK;
}

RAP_TEST_P(Callbacks, PoolCallsFromWorkFunctions, cb_param, cb_params) {
  rap_manager *rm = tu_manager();
  cb *x = calloc(1, sizeof *x);   /* leaked if the job never returns */
  RAP_CHECK(x != NULL);
  gate *g2 = malloc(sizeof *g2);
  RAP_CHECK(g2 != NULL);
  gate_init(g2);
  x->g2 = g2;
  atomic_init(&x->stage, 0);
  x->f = tu_make(rm, "f", "Fault", "HOST", NULL);
  rap_allocator *pool =
      tu_make(rm, "pool", "ResourceAwarePool", "f",
              param->wait ? "initial_size=256KiB next_size=256KiB heuristic=never cross_resource=wait "
                            "wait_above=1KiB"
                          : "initial_size=256KiB next_size=256KiB heuristic=never");
  x->top = param->threadsafe ? tu_make(rm, "ts", "ThreadSafe", "pool", NULL) : pool;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &x->q1));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &x->q2));
  /* The first chunk: 64 KiB live on the host, B pending on the busy q2, 64 KiB free. */
  void *filler = NULL;
  RAP_CHECK_OK(rap_allocate(x->top, &filler, 64 * KiB, NULL));
  RAP_CHECK_OK(rap_allocate(x->top, &x->B, 128 * KiB, x->q2));
  RAP_CHECK_OK(rap_resource_submit(x->q2, gate_job, g2));
  RAP_CHECK_OK(rap_deallocate(x->top, x->B, x->q2));
  wd_call *c = wd_submit(x->q1, cb_work, x);
  RAP_CHECK(c != NULL);
  /* Open q2 once the job is blocked in step 8 (wait mode), or has gone past it (grow mode). */
  double end = wd_now() + WD_SECONDS;
  while (wd_now() < end && !wd_is_done(c) && atomic_load(&x->stage) < 9) {
    int tid = atomic_load(&c->tid);
    if (atomic_load(&x->stage) == 8 && tid != 0 && wd_thread_state((pid_t)tid) == 'S') break;
    sched_yield();
  }
  gate_open(g2);
  int st = -1;
  if (!wd_finish(c, &g2, 1, &st))
    rap_test_fail(__FILE__, __LINE__, "the job hung in step %d (watchdog: %d s)",
                  atomic_load(&x->stage), WD_SECONDS);
  RAP_CHECK_OK(st);
  for (int i = 0; i <= 7; i++) RAP_CHECK_OK(x->st[i]);
  RAP_CHECK(x->ptr[2] == x->ptr[0]);   /* q1's own pending block, reused at once */
  RAP_CHECK_OK(x->st[8]);
  RAP_CHECK_OK(x->st[9]);
  if (x->ptr[8] == x->B) RAP_CHECK(param->wait && x->passed8 == 1);   /* only after q2's work */
  RAP_CHECK_OK(x->st[10]);
  RAP_CHECK_OK(x->st[11]);
  if (param->wait) RAP_CHECK(x->st[12] == RAP_OK || x->st[12] == RAP_ERR_NOMEM);
  else RAP_CHECK_OK(x->st[12]);
  if (x->st[12] == RAP_OK) RAP_CHECK(x->ptr[12] != x->ptr[10]);   /* the pool grew */
  RAP_CHECK_OK(x->st[13]);
  RAP_CHECK(x->st[14] == RAP_OK || x->st[14] == RAP_ERR_NOMEM);
  RAP_CHECK_OK(x->st[15]);
  RAP_CHECK_OK(rap_resource_synchronize(x->q1));
  RAP_CHECK_OK(rap_resource_synchronize(x->q2));
  RAP_CHECK_OK(rap_deallocate(x->top, filler, NULL));
  RAP_CHECK_OK(rap_release(x->top));
  TU_EXPECT(x->top, allocation_count, 0);
  TU_EXPECT(x->top, pending_count, 0);
  TU_EXPECT(x->top, chunk_count, 0);
  TU_CHECK(x->top);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(g2);
  free(g2);
  free(x);
}
