/* test_fault_points.c — every failure point of a sequence, as SQLite's OOM loops do it.
 *
 * A script of allocations (on the host and on three host_async queues), frees with and without a
 * resource, record_resource, releases, and queues made busy and let run, is run once to count the
 * parent requests it makes, then again for every n: with the n-th request failing once (Fault
 * fail_at=n, a transient failure the pool may recover from by releasing and retrying) and with
 * every request from the n-th on failing (fail_after=n-1, a parent that stays dry). After every
 * step: any failing call said RAP_ERR_NOMEM with a sentence and changed no live block, every live
 * block keeps its bytes and its owner, rap_allocator_check is clean on every allocator of the
 * stack; and once the parent recovers, the pool serves every resource and gives everything back.
 *
 * Pools: QuickPool and DynamicPoolList alone, over another pool, and over a Fault over another
 * pool; ResourceAwarePool with idle queues (pending work already done), with busy queues (gated:
 * the pool's out-of-memory path waits on the host for pending events, so a watchdog opens the
 * gates once a call is stuck: it waits for a queue and no queue can move, never after a time),
 * with cross_resource=wait, and under ThreadSafe over a Fault over a QuickPool.
 */
#include "gate.h"
#include "rap_testing.h"
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 16, QUEUES = 3, MAX_GATES = 64 };
enum { A, F, REC, BUSY, PASS, REL };   /* allocate, free, record_resource, gate a queue, run it, release */

typedef struct step {
  int op, slot;
  size_t bytes;
  int res;   /* -1: NULL; 0: the host resource; 1..3: queues */
} step;

/* initial_size=16KiB next_size=8KiB: the script needs many chunks, and frees make pending memory
 * on busy queues that other resources must not take. */
static const step script[] = {
    {BUSY, 0, 0, 1},      {A, 0, 3000, 1},     {A, 1, 5000, 2},      {A, 2, 100, -1},
    {REC, 1, 0, 3},       {F, 0, 0, 1},        {A, 3, 9000, 2},      {F, 1, 0, -1},
    {BUSY, 0, 0, 2},      {A, 4, 7000, 3},     {A, 5, 0, 1},         {F, 3, 0, 2},
    {A, 6, 12000, 0},     {REL, 0, 0, 0},      {F, 2, 0, 0},         {A, 7, 20000, 1},
    {F, 4, 0, 3},         {F, 5, 0, -1},       {PASS, 0, 0, 1},      {A, 8, 30000, 3},
    {F, 6, 0, -1},        {A, 9, 4000, 2},     {REC, 9, 0, 1},       {F, 7, 0, 1},
    {F, 8, 0, 3},         {A, 10, 40000, 1},   {A, 11, 1, 0},        {F, 9, 0, -1},
    {BUSY, 0, 0, 3},      {A, 12, 16384, 3},   {F, 12, 0, 3},        {A, 13, 8192, 2},
    {PASS, 0, 0, 2},      {F, 10, 0, -1},      {A, 14, 65536, 0},    {REL, 0, 0, 0},
    {F, 13, 0, 2},        {A, 15, 2500, 1},    {A, 12, 6000, 3},     {F, 11, 0, -1},
};

typedef enum { ST_SINGLE, ST_OVER_POOL, ST_OVER_FAULT_OVER_POOL, ST_THREADSAFE } stack_kind;

typedef struct fp_param {
  const char *label;
  const char *strategy;
  stack_kind stack;
  bool busy;           /* queues gated by BUSY steps; otherwise their work is always done */
  const char *extra;   /* more pool options */
} fp_param;

static const fp_param fp_params[] = {
    {"QuickPool", "QuickPool", ST_SINGLE, false, ""},
    {"QuickPool_Coalescing", "QuickPool", ST_SINGLE, false, " heuristic=blocks_releasable:1"},
    {"QuickPool_OverPool", "QuickPool", ST_OVER_POOL, false, ""},
    {"QuickPool_OverFaultOverPool", "QuickPool", ST_OVER_FAULT_OVER_POOL, false, ""},
    {"DynamicPoolList", "DynamicPoolList", ST_SINGLE, false, ""},
    {"DynamicPoolList_Coalescing", "DynamicPoolList", ST_SINGLE, false, " heuristic=percent_releasable:50"},
    {"DynamicPoolList_OverPool", "DynamicPoolList", ST_OVER_POOL, false, ""},
    {"DynamicPoolList_OverFaultOverPool", "DynamicPoolList", ST_OVER_FAULT_OVER_POOL, false, ""},
    {"ResourceAwarePool_IdleQueues", "ResourceAwarePool", ST_SINGLE, false, ""},
    {"ResourceAwarePool_BusyQueues", "ResourceAwarePool", ST_SINGLE, true, ""},
    {"ResourceAwarePool_BusyQueuesNever", "ResourceAwarePool", ST_SINGLE, true, " heuristic=never"},
    {"ResourceAwarePool_CrossWait", "ResourceAwarePool", ST_SINGLE, true, " cross_resource=wait"},
    {"ResourceAwarePool_ThreadSafeOverFaultOverPool", "ResourceAwarePool", ST_THREADSAFE, true, ""},
};

typedef struct fx {
  const fp_param *P;
  rap_manager *rm;
  rap_allocator *f;          /* the Fault that fails */
  rap_allocator *top;        /* what the script runs on */
  rap_allocator *pool;       /* the pool of the strategy under test */
  rap_allocator *chain[6];   /* every allocator, checked after each step */
  int nchain;
  rap_resource *res[QUEUES + 1];
  bool resource_aware;
  /* the watchdog: opens every gate once a call is stuck on the queues */
  pthread_t dog;
  pthread_mutex_t m;
  pthread_cond_t c;
  bool in_call, stop;
  uint64_t call;
  int fired;
  gate *gates[MAX_GATES];
  int gate_q[MAX_GATES];
  int ngates;
  /* the script's blocks */
  void *p[SLOTS];
  size_t n[SLOTS];
  unsigned seed[SLOTS];
  int owner[SLOTS];
  size_t nomem;
} fx;

static void open_all_locked(fx *x) {
  for (int i = 0; i < x->ngates; i++) gate_open(x->gates[i]);
}

/* The call is stuck: it waits for a queue (the pool waits on the host for a pending event, or a
 * synchronize), and no queue can move, each with work left being held at a closed gate or waiting
 * for a queue that has not reached its point. Not a time: a call that is only slow (a loaded
 * machine, a sanitizer) is never taken for a stuck one, so the gates open at the same step of the
 * script on every run, and the script makes the same requests. */
static bool stuck_locked(fx *x) {
  bool waits = false;
  for (int q = 1; q <= QUEUES; q++) {
    rap_host_async_view v;
    if (rap_host_async_view_of(x->res[q], &v) != RAP_OK) return false;
    waits |= v.host_blocked;
    if (v.unfinished == 0 || v.worker_blocked) continue;
    bool held = false;
    for (int i = 0; i < x->ngates && !held; i++)
      held = x->gate_q[i] == q && gate_holding(x->gates[i]);
    if (!held) return false;   /* it moves: look again */
  }
  return waits;
}

static void *watchdog(void *arg) {
  fx *x = arg;
  pthread_mutex_lock(&x->m);
  while (!x->stop) {
    if (!x->in_call) {
      pthread_cond_wait(&x->c, &x->m);
      continue;
    }
    uint64_t call = x->call;
    if (!stuck_locked(x)) {   /* until the call ends or gets stuck */
      pthread_mutex_unlock(&x->m);
      sched_yield();
      pthread_mutex_lock(&x->m);
      continue;
    }
    open_all_locked(x);   /* the pool waits for pending work: let every queue run */
    x->fired++;
    while (x->in_call && x->call == call && !x->stop) pthread_cond_wait(&x->c, &x->m);
  }
  pthread_mutex_unlock(&x->m);
  return NULL;
}

static void call_begin(fx *x) {
  pthread_mutex_lock(&x->m);
  x->in_call = true;
  x->call++;
  pthread_cond_broadcast(&x->c);
  pthread_mutex_unlock(&x->m);
}

static void call_end(fx *x) {
  pthread_mutex_lock(&x->m);
  x->in_call = false;
  pthread_cond_broadcast(&x->c);
  pthread_mutex_unlock(&x->m);
}

static void busy(fx *x, int q) {
  if (!x->P->busy) return;
  pthread_mutex_lock(&x->m);
  RAP_CHECK(x->ngates < MAX_GATES);
  gate *g = malloc(sizeof *g);
  RAP_CHECK(g != NULL);
  gate_init(g);
  x->gates[x->ngates] = g;
  x->gate_q[x->ngates++] = q;
  pthread_mutex_unlock(&x->m);
  RAP_CHECK_OK(rap_resource_submit(x->res[q], gate_job, g));
}

static void pass(fx *x, int q) {
  pthread_mutex_lock(&x->m);
  for (int i = 0; i < x->ngates; i++)
    if (x->gate_q[i] == q || q < 0) gate_open(x->gates[i]);
  pthread_mutex_unlock(&x->m);
  /* Under cross_resource=wait a queue may hold a queued wait for another queue's gated work:
   * the watchdog lets everything run if synchronizing blocks. */
  call_begin(x);
  for (int r = 1; r <= QUEUES; r++)
    if (r == q || q < 0) RAP_CHECK_OK(rap_resource_synchronize(x->res[r]));
  call_end(x);
}

static rap_allocator *add(fx *x, const char *name, const char *strategy, const char *parent,
                          const char *options) {
  rap_allocator *a = tu_make(x->rm, name, strategy, parent, options);
  x->chain[x->nchain++] = a;
  return a;
}

/* A failed check ends the body without teardown: the next setup stops the watchdog it left (the
 * fixtures are static, so the memory is still there). */
static fx *running;

static void stop_watchdog(fx *x) {
  pthread_mutex_lock(&x->m);
  x->stop = true;
  pthread_cond_broadcast(&x->c);
  pthread_mutex_unlock(&x->m);
  pthread_join(x->dog, NULL);
  running = NULL;
}

static void setup(fx *x, const fp_param *P) {
  if (running != NULL) {
    pass(running, -1);
    stop_watchdog(running);
  }
  memset(x, 0, sizeof *x);
  x->P = P;
  x->rm = tu_manager();
  x->resource_aware = strcmp(P->strategy, "ResourceAwarePool") == 0;
  char opts[160];
  snprintf(opts, sizeof opts, "initial_size=16KiB next_size=8KiB%s", P->extra);
  switch (P->stack) {
  case ST_SINGLE:
    x->f = add(x, "f", "Fault", "HOST", NULL);
    x->top = x->pool = add(x, "pool", P->strategy, "f", opts);
    break;
  case ST_OVER_POOL:   /* the pool over another pool over the Fault */
    x->f = add(x, "f", "Fault", "HOST", NULL);
    add(x, "inner", P->strategy, "f", "initial_size=32KiB next_size=16KiB");
    x->top = x->pool = add(x, "pool", P->strategy, "inner", opts);
    break;
  case ST_OVER_FAULT_OVER_POOL:   /* the Fault between two pools */
    add(x, "inner", "QuickPool", "HOST", "initial_size=1MiB heuristic=never");
    x->f = add(x, "f", "Fault", "inner", NULL);
    x->top = x->pool = add(x, "pool", P->strategy, "f", opts);
    break;
  case ST_THREADSAFE:
    add(x, "inner", "QuickPool", "HOST", "initial_size=1MiB heuristic=never");
    x->f = add(x, "f", "Fault", "inner", NULL);
    x->pool = add(x, "pool", P->strategy, "f", opts);
    x->top = add(x, "ts", "ThreadSafe", "pool", NULL);
    break;
  }
  RAP_CHECK_OK(rap_resource_host(x->rm, &x->res[0]));
  for (int q = 1; q <= QUEUES; q++) RAP_CHECK_OK(rap_resource_create_host_async(x->rm, &x->res[q]));
  pthread_mutex_init(&x->m, NULL);
  pthread_cond_init(&x->c, NULL);
  RAP_CHECK(pthread_create(&x->dog, NULL, watchdog, x) == 0);
  running = x;
}

static void teardown(fx *x) {
  pass(x, -1);
  stop_watchdog(x);
  RAP_CHECK_OK(rap_manager_destroy(x->rm));   /* nothing leaked */
  for (int i = 0; i < x->ngates; i++) {
    gate_destroy(x->gates[i]);
    free(x->gates[i]);
  }
  pthread_cond_destroy(&x->c);
  pthread_mutex_destroy(&x->m);
}

static rap_resource *resource(fx *x, int res) { return res < 0 ? NULL : x->res[res]; }

/* Every allocator's invariants, every live block's bytes and owner, and the pool's counts. */
static void consistent_with(fx *x, size_t live, size_t bytes) {
  for (int i = 0; i < x->nchain; i++) RAP_CHECK_OK(rap_allocator_check(x->chain[i]));
  for (int i = 0; i < SLOTS; i++) {
    if (x->p[i] == NULL) continue;
    RAP_CHECK(tu_intact(x->p[i], x->n[i], x->seed[i]));
    rap_resource *owner = NULL;
    RAP_CHECK_OK(rap_pointer_resource(x->top, x->p[i], &owner));
    RAP_CHECK(owner == (x->resource_aware ? x->res[x->owner[i]] : x->res[0]));
    live++;
    bytes += x->n[i];
  }
  rap_stats s = tu_stats(x->pool);
  RAP_CHECK_EQ(s.allocation_count, live);
  RAP_CHECK_EQ(s.current_bytes, bytes);
  if (x->P->stack == ST_SINGLE) RAP_CHECK_EQ(s.actual_bytes, tu_stats(x->f).current_bytes);
}

static void consistent(fx *x) { consistent_with(x, 0, 0); }

static void allocate(fx *x, int slot, size_t bytes, int res, unsigned seed) {
  RAP_CHECK(x->p[slot] == NULL);
  rap_stats before = tu_stats(x->pool);
  void *p = &before;
  call_begin(x);
  int st = rap_allocate(x->top, &p, bytes, resource(x, res));
  call_end(x);
  if (st == RAP_ERR_NOMEM) {
    x->nomem++;
    RAP_CHECK(p == &before);                   /* out-param untouched */
    RAP_CHECK(strlen(rap_last_error()) > 0);
    rap_stats after = tu_stats(x->pool);
    RAP_CHECK_EQ(after.allocation_count, before.allocation_count);
    RAP_CHECK_EQ(after.current_bytes, before.current_bytes);
    RAP_CHECK_EQ(after.used_bytes, before.used_bytes);
    return;
  }
  RAP_CHECK_OK(st);
  RAP_CHECK(p != NULL);
  x->p[slot] = p;
  x->n[slot] = bytes;
  x->seed[slot] = seed;
  x->owner[slot] = res < 0 ? 0 : res;
  tu_fill(p, bytes, seed);
}

static void release_slot(fx *x, int slot, int res) {
  if (x->p[slot] == NULL) return;   /* its allocation failed */
  RAP_CHECK(tu_intact(x->p[slot], x->n[slot], x->seed[slot]));
  call_begin(x);
  int st = rap_deallocate(x->top, x->p[slot], resource(x, res));
  call_end(x);
  RAP_CHECK_OK(st);
  x->p[slot] = NULL;
}

static void run_script(fx *x, unsigned round) {
  for (size_t i = 0; i < sizeof script / sizeof script[0]; i++) {
    const step *s = &script[i];
    switch (s->op) {
    case A: allocate(x, s->slot, s->bytes, s->res, round * 1000 + (unsigned)i); break;
    case F: release_slot(x, s->slot, s->res < 0 ? -1 : x->owner[s->slot]); break;   /* NULL or the owner */
    case REC:
      if (x->resource_aware && x->p[s->slot] != NULL)
        RAP_CHECK_OK(rap_record_resource(x->top, x->p[s->slot], x->res[s->res]));
      break;
    case BUSY: busy(x, s->res); break;
    case PASS: pass(x, s->res); break;
    default: {
      call_begin(x);
      int st = rap_release(x->top);
      call_end(x);
      RAP_CHECK_OK(st);
    }
    }
    consistent(x);
  }
}

/* The parent works again: every resource gets blocks, and everything goes back at the end. */
static void recover_and_drain(fx *x) {
  RAP_CHECK_OK(rap_fault_configure(x->f, "reset"));
  void *extra[QUEUES + 1][2];
  for (int r = 0; r <= QUEUES; r++) {
    allocate(x, 0, 0, r, 0);   /* slot 0 is always free after the script */
    RAP_CHECK(x->p[0] != NULL);
    extra[r][0] = x->p[0];
    x->p[0] = NULL;
    call_begin(x);   /* the host may wait for a gated queue (cross_resource=wait): the watchdog */
    int st = rap_allocate(x->top, &extra[r][1], 100 * 1024, x->res[r]);
    call_end(x);
    RAP_CHECK_OK(st);
    tu_fill(extra[r][1], 100 * 1024, 77u + (unsigned)r);
  }
  consistent_with(x, 2 * (QUEUES + 1), (QUEUES + 1) * 100 * 1024);
  for (int r = 0; r <= QUEUES; r++) {
    RAP_CHECK(tu_intact(extra[r][1], 100 * 1024, 77u + (unsigned)r));
    RAP_CHECK_OK(rap_deallocate(x->top, extra[r][0], x->res[r]));
    RAP_CHECK_OK(rap_deallocate(x->top, extra[r][1], NULL));
  }
  for (int i = 0; i < SLOTS; i++) release_slot(x, i, -1);
  pass(x, -1);
  for (int i = x->nchain - 1; i >= 0; i--) RAP_CHECK_OK(rap_release(x->chain[i]));   /* top down */
  rap_stats s = tu_stats(x->pool);
  RAP_CHECK_EQ(s.pending_count, 0);
  RAP_CHECK_EQ(s.chunk_count, 0);
  RAP_CHECK_EQ(s.actual_bytes, 0);
  RAP_CHECK_EQ(tu_stats(x->f).current_bytes, 0);
  for (int i = 0; i < x->nchain; i++) RAP_CHECK_OK(rap_allocator_check(x->chain[i]));
}

RAP_TEST_P(FaultPoints, EveryRequestFailsInTurn, fp_param, fp_params) {
  static fx x;   /* static: a failed check leaves it to the next setup to stop its watchdog */
  /* The clean run: how many parent requests the script makes. */
  setup(&x, param);
  size_t start = tu_requests(x.f);
  run_script(&x, 0);
  size_t total = tu_requests(x.f) - start;
  RAP_CHECK_EQ(x.nomem, 0);
  RAP_CHECK(total >= 4);   /* several chunks */
  recover_and_drain(&x);
  teardown(&x);

  int waited = 0;   /* failure points where the pool waited on the host for a busy queue */
  for (int persistent = 0; persistent <= 1; persistent++) {
    for (size_t n = 1; n <= total + 1; n++) {
      char cfg[64];
      if (persistent) snprintf(cfg, sizeof cfg, "fail_after=%zu", n - 1);
      else snprintf(cfg, sizeof cfg, "fail_at=%zu", n);
      setup(&x, param);
      RAP_CHECK_OK(rap_fault_configure(x.f, cfg));
      start = tu_requests(x.f);
      run_script(&x, (unsigned)n);
      size_t seen = tu_requests(x.f) - start;
      if (n <= total) RAP_CHECK(seen >= n);   /* the failure point was reached */
      if (persistent && n == 1) RAP_CHECK(x.nomem > 0);   /* the very first chunk fails */
      if (n > total) RAP_CHECK_EQ(x.nomem, 0);
      recover_and_drain(&x);
      waited += x.fired > 0;
      teardown(&x);
    }
  }
  if (param->busy) RAP_CHECK(waited > 0);   /* the out-of-memory path's host wait was exercised */
}

/* The out-of-memory path with pending blocks on a busy queue: the parent is dry, the only memory
 * that fits is pending on a gated queue, and the pool waits on the host for it rather than failing.
 * Then, with nothing pending either, it fails with RAP_ERR_NOMEM and changes nothing. */
RAP_TEST(FaultPoints, OutOfMemoryWaitsForBusyQueueThenFails) {
  static fx x;
  static const fp_param P = {"", "ResourceAwarePool", ST_SINGLE, true, " heuristic=never"};
  setup(&x, &P);
  busy(&x, 1);
  allocate(&x, 0, 16 * 1024, 1, 1);
  RAP_CHECK(x.p[0] != NULL);
  void *first = x.p[0];
  release_slot(&x, 0, 1);   /* pending on the busy queue 1 */
  RAP_CHECK_EQ(tu_stats(x.pool).pending_count, 1);
  RAP_CHECK_OK(rap_fault_configure(x.f, "fail_after=0"));
  allocate(&x, 1, 16 * 1024, 2, 2);   /* blocks until the watchdog lets queue 1 run */
  RAP_CHECK(x.p[1] == first);
  RAP_CHECK(x.fired >= 1);
  RAP_CHECK_EQ(x.nomem, 0);
  consistent(&x);
  allocate(&x, 2, 100, 3, 3);   /* nothing pending, nothing free, the parent dry */
  RAP_CHECK_EQ(x.nomem, 1);
  RAP_CHECK_STR(rap_last_error(), "fail_after");
  consistent(&x);
  recover_and_drain(&x);
  teardown(&x);
}
