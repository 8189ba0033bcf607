/* test_wrappers.c — the contracts of the composable strategies: ThreadSafe (forwards every call,
 * under one lock), SizeLimiter (limit=, refuses past it with RAP_ERR_NOMEM, and a pool above it
 * releases and retries) and FixedPool (object_size=, objects_per_chunk=: constant-time objects).
 * Stacking every strategy over every allocator is in test_stacking.c.
 */
#include "gate.h"
#include "test_util.h"

#include <rap/strategy.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes name as strategy over parent with options, and expects it refused with status and a
 * sentence containing why; nothing is registered under the name. */
static void make_refused(rap_manager *rm, const char *strategy, const char *parent, const char *options,
                         int status, const char *why) {
  rap_allocator *a = (rap_allocator *)&rm;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "w", strategy, parent, options, &a), status);
  RAP_CHECK_STR(rap_last_error(), why);
  RAP_CHECK(a == (rap_allocator *)&rm);
  RAP_CHECK_STATUS(rap_allocator_get(rm, "w", &a), RAP_ERR_NOT_FOUND);
}

/* ---- ThreadSafe ------------------------------------------------------------------------------ */

typedef struct inner_kind {
  const char *label;
  const char *strategy;   /* NULL: HOST itself */
  bool tracks;            /* resources: record_resource works, blocks keep their resource */
} inner_kind;

static const inner_kind ts_inners[] = {
    {"QuickPool", "QuickPool", false},
    {"DynamicPoolList", "DynamicPoolList", false},
    {"ResourceAwarePool", "ResourceAwarePool", true},
    {"HOST", NULL, false},
};

static rap_allocator *make_inner(rap_manager *rm, const inner_kind *k) {
  if (k->strategy == NULL) return tu_get(rm, "HOST");
  return tu_make(rm, "inner", k->strategy, "HOST", "initial_size=64KiB next_size=64KiB");
}

static rap_stats rstats(rap_allocator *a, rap_resource *r) {
  rap_stats s;
  memset(&s, 0xee, sizeof s);
  RAP_CHECK_OK(rap_allocator_resource_stats(a, r, &s));
  return s;
}

RAP_TEST_P(ThreadSafe, ForwardsEverything, inner_kind, ts_inners) {
  rap_manager *rm = tu_manager();
  rap_allocator *inner = make_inner(rm, param);
  rap_allocator *ts = tu_make(rm, "ts", "ThreadSafe", rap_allocator_name(inner), NULL);
  RAP_CHECK(rap_allocator_parent(ts) == inner);
  RAP_CHECK(strcmp(rap_allocator_strategy(ts), "ThreadSafe") == 0);
  RAP_CHECK_EQ(rap_allocator_alignment(ts), rap_allocator_alignment(inner));
  rap_resource *host_r = NULL, *q = NULL, *owner = NULL, *owner2 = NULL;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));

  char *p = tu_alloc(ts, 1000), *r = NULL;
  tu_fill(p, 1000, 1);
  RAP_CHECK_OK(rap_allocate(ts, (void **)&r, 500, q));
  tu_fill(r, 500, 2);
  rap_stats a = tu_stats(ts), b = tu_stats(inner);
  TU_STATS_EQ(a, b);
  RAP_CHECK_EQ(a.current_bytes, 1500);
  RAP_CHECK_EQ(a.allocation_count, 2);
  TU_CHECK(ts);

  /* The owning resource, the per-resource view and record_resource all come from the inner. */
  RAP_CHECK_OK(rap_pointer_resource(ts, r, &owner));
  RAP_CHECK_OK(rap_pointer_resource(inner, r, &owner2));
  RAP_CHECK(owner == owner2);
  RAP_CHECK(owner == (param->tracks ? q : host_r));
  rap_stats rq = rstats(ts, q), rq2 = rstats(inner, q);
  TU_STATS_EQ(rq, rq2);
  RAP_CHECK_EQ(rq.current_bytes, param->tracks ? 500 : 0);
  rap_stats rh = rstats(ts, host_r), rh2 = rstats(inner, host_r);
  TU_STATS_EQ(rh, rh2);
  RAP_CHECK_STATUS(rap_pointer_resource(ts, p + 1, &owner), RAP_ERR_UNKNOWN_POINTER);
  if (param->tracks) {
    RAP_CHECK_OK(rap_record_resource(ts, p, q));
  } else {
    RAP_CHECK_STATUS(rap_record_resource(ts, p, q), RAP_ERR_UNSUPPORTED);
    RAP_CHECK_STR(rap_last_error(), rap_allocator_strategy(inner));
  }

  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == ts);   /* the newest owner: the wrapper handed it out */
  RAP_CHECK_STATUS(rap_deallocate(ts, p + 16, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_allocator_destroy(inner), RAP_ERR_BUSY);
  RAP_CHECK_STATUS(rap_allocator_destroy(ts), RAP_ERR_BUSY);
  if (param->tracks) {
    RAP_CHECK_STATUS(rap_deallocate(ts, r, host_r), RAP_ERR_WRONG_RESOURCE);
    RAP_CHECK_STR(rap_last_error(), "inner");
  }
  RAP_CHECK(tu_intact(p, 1000, 1) && tu_intact(r, 500, 2));
  RAP_CHECK_OK(rap_deallocate(ts, p, NULL));
  RAP_CHECK_OK(rap_deallocate(ts, r, param->tracks ? q : NULL));
  RAP_CHECK_STATUS(rap_deallocate(ts, p, NULL), RAP_ERR_UNKNOWN_POINTER);   /* double free */
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_release(ts));   /* reaches the inner: its chunk goes back to HOST */
  TU_EXPECT(inner, allocation_count, 0);
  TU_EXPECT(inner, pending_count, 0);
  if (param->strategy) TU_EXPECT(inner, chunk_count, 0);
  TU_EXPECT(tu_get(rm, "HOST"), allocation_count, 0);
  a = tu_stats(ts);
  b = tu_stats(inner);
  TU_STATS_EQ(a, b);
  TU_CHECK(ts);
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_allocator_destroy(ts));
  if (param->strategy) RAP_CHECK_OK(rap_allocator_destroy(inner));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A probe strategy that answers every method with something recognisable and counts the calls:
 * through a ThreadSafe each call must arrive once, with its arguments, and its answer come back. */
static struct {
  int allocate, deallocate, stats, owns, release, check, record, pointer, rstats;
  rap_resource *recorded;
  char block[64];
} probe;

static int probe_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)state, (void)opts;
  rap_allocator_set_alignment(self, 64);
  return RAP_OK;
}
static void probe_fini(rap_allocator *self, void *state) { (void)self, (void)state; }
static int probe_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  (void)state, (void)r;
  probe.allocate++;
  if (bytes > sizeof probe.block) return rap_error_set(RAP_ERR_NOMEM, "probe: %zu is too many", bytes);
  *out = probe.block;
  return RAP_OK;
}
static int probe_deallocate(void *state, void *ptr, rap_resource *r) {
  (void)state, (void)r;
  probe.deallocate++;
  return ptr == probe.block ? RAP_OK : rap_error_set(RAP_ERR_UNKNOWN_POINTER, "probe: not mine");
}
static int probe_stats(void *state, rap_stats *out) {
  (void)state;
  probe.stats++;
  out->current_bytes = 11;
  out->chunk_count = 22;
  return RAP_OK;
}
static int probe_owns(void *state, const void *ptr) {
  (void)state;
  probe.owns++;
  return ptr == probe.block;
}
static int probe_release(void *state) {
  (void)state;
  probe.release++;
  return RAP_OK;
}
static int probe_check(void *state) {
  (void)state;
  probe.check++;
  return rap_error_set(RAP_ERR_CORRUPT, "probe: broken on purpose");
}
static int probe_record(void *state, void *ptr, rap_resource *r) {
  (void)state, (void)ptr;
  probe.record++;
  probe.recorded = r;
  return RAP_OK;
}
static int probe_pointer(void *state, const void *ptr, rap_resource **out) {
  (void)state, (void)ptr;
  probe.pointer++;
  *out = probe.recorded;
  return RAP_OK;
}
static int probe_rstats(void *state, rap_resource *r, rap_stats *out) {
  (void)state;
  probe.rstats++;
  out->pending_count = r == probe.recorded ? 33 : 0;
  return RAP_OK;
}

static const rap_strategy probe_strategy = {
    .version = RAP_STRATEGY_VERSION, .name = "Probe", .state_size = 8, .init = probe_init,
    .fini = probe_fini, .allocate = probe_allocate, .deallocate = probe_deallocate,
    .stats = probe_stats, .owns = probe_owns, .release = probe_release, .check = probe_check,
    .record_resource = probe_record, .pointer_resource = probe_pointer,
    .resource_stats = probe_rstats,
};

RAP_TEST(ThreadSafe, ForwardsEveryMethodOnce) {
  memset(&probe, 0, sizeof probe);
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &probe_strategy));
  tu_make(rm, "probe", "Probe", NULL, NULL);
  rap_allocator *ts = tu_make(rm, "ts", "ThreadSafe", "probe", NULL);
  RAP_CHECK_EQ(rap_allocator_alignment(ts), 64);
  rap_resource *q = NULL, *owner = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(ts, &p, 10, q));
  RAP_CHECK(p == probe.block);
  RAP_CHECK_STATUS(rap_allocate(ts, &p, 100, q), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "too many");
  RAP_CHECK_OK(rap_record_resource(ts, p, q));
  RAP_CHECK(probe.recorded == q);
  RAP_CHECK_OK(rap_pointer_resource(ts, p, &owner));
  RAP_CHECK(owner == q);
  rap_stats s = tu_stats(ts);
  RAP_CHECK_EQ(s.current_bytes, 11);
  RAP_CHECK_EQ(s.chunk_count, 22);
  RAP_CHECK_EQ(rstats(ts, q).pending_count, 33);
  RAP_CHECK_STATUS(rap_allocator_check(ts), RAP_ERR_CORRUPT);
  RAP_CHECK_STR(rap_last_error(), "broken on purpose");
  RAP_CHECK_OK(rap_release(ts));
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == ts);
  RAP_CHECK_STATUS(rap_deallocate(ts, probe.block + 1, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(ts, p, NULL));
  RAP_CHECK_EQ(probe.allocate, 2);
  RAP_CHECK_EQ(probe.deallocate, 2);
  RAP_CHECK_EQ(probe.record, 1);
  RAP_CHECK_EQ(probe.pointer, 1);
  RAP_CHECK_EQ(probe.stats, 1);
  RAP_CHECK_EQ(probe.rstats, 1);
  RAP_CHECK_EQ(probe.check, 1);
  RAP_CHECK_EQ(probe.release, 1);
  RAP_CHECK_EQ(probe.owns, 1);   /* find asked the wrapper, which asked the probe */
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(ThreadSafe, TakesNoOptionsAndNeedsAParent) {
  rap_manager *rm = tu_manager();
  make_refused(rm, "ThreadSafe", "HOST", "initial_size=1MiB", RAP_ERR_INVALID, "initial_size");
  make_refused(rm, "ThreadSafe", NULL, NULL, RAP_ERR_INVALID, "parent");
  make_refused(rm, "ThreadSafe", "nothing", NULL, RAP_ERR_NOT_FOUND, "nothing");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- ThreadSafe under concurrent callers ------------------------------------------------------ */

enum { TS_THREADS = 4, TS_OPS = 4000, TS_LIVE = 32 };

typedef struct ts_worker {
  rap_allocator *a;
  unsigned id;
  int errors;        /* unexpected statuses or damaged blocks; checked by the main thread */
  int status;        /* the first unexpected status */
} ts_worker;

static void *ts_run(void *arg) {
  ts_worker *w = arg;
  void *live[TS_LIVE] = {0};
  size_t size[TS_LIVE] = {0};
  uint64_t rng = 0x1234567u + w->id;
  for (unsigned op = 0; op < TS_OPS; op++) {
    unsigned k = (unsigned)(tu_rand(&rng) % TS_LIVE);
    int st;
    if (live[k] != NULL) {
      if (!tu_intact(live[k], size[k], w->id * 1000 + k)) w->errors++;
      st = rap_deallocate(w->a, live[k], NULL);
      live[k] = NULL;
    } else {
      size[k] = (size_t)(tu_rand(&rng) % 3000);
      st = rap_allocate(w->a, &live[k], size[k], NULL);
      if (st == RAP_OK) tu_fill(live[k], size[k], w->id * 1000 + k);
    }
    if (st == RAP_OK && op % 97 == 0) {
      rap_stats s;
      st = rap_allocator_stats(w->a, &s);
      if (st == RAP_OK) st = rap_allocator_check(w->a);
    }
    if (st != RAP_OK && w->errors++ == 0) w->status = st;
  }
  for (unsigned k = 0; k < TS_LIVE; k++) {
    if (live[k] != NULL && !tu_intact(live[k], size[k], w->id * 1000 + k)) w->errors++;
    if (rap_deallocate(w->a, live[k], NULL) != RAP_OK) w->errors++;
  }
  return NULL;
}

RAP_TEST_P(ThreadSafe, ConcurrentCallers, inner_kind, ts_inners) {
  rap_manager *rm = tu_manager();
  rap_allocator *inner = make_inner(rm, param);
  rap_allocator *ts = tu_make(rm, "ts", "ThreadSafe", rap_allocator_name(inner), NULL);
  pthread_t th[TS_THREADS];
  ts_worker w[TS_THREADS];
  for (unsigned i = 0; i < TS_THREADS; i++) {
    w[i] = (ts_worker){ts, i, 0, RAP_OK};
    RAP_CHECK(pthread_create(&th[i], NULL, ts_run, &w[i]) == 0);
  }
  for (unsigned i = 0; i < TS_THREADS; i++) pthread_join(th[i], NULL);
  for (unsigned i = 0; i < TS_THREADS; i++)
    if (w[i].errors != 0)
      rap_test_fail(__FILE__, __LINE__, "thread %u: %d errors, the first %s", i, w[i].errors,
                    rap_status_name(w[i].status));
  rap_stats s = tu_stats(ts);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  TU_CHECK(ts);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- SizeLimiter --------------------------------------------------------------------------- */

RAP_TEST(SizeLimiter, NeedsALimit) {
  rap_manager *rm = tu_manager();
  make_refused(rm, "SizeLimiter", "HOST", NULL, RAP_ERR_INVALID, "limit");
  make_refused(rm, "SizeLimiter", "HOST", "limit=0", RAP_ERR_INVALID, "limit");
  make_refused(rm, "SizeLimiter", "HOST", "limit=lots", RAP_ERR_INVALID, "limit");
  make_refused(rm, "SizeLimiter", "HOST", "limit=1MiB initial_size=1MiB", RAP_ERR_INVALID,
               "initial_size");
  make_refused(rm, "SizeLimiter", NULL, "limit=1MiB", RAP_ERR_INVALID, "parent");
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", "limit=1MiB");
  RAP_CHECK_EQ(rap_allocator_alignment(lim), 16);   /* what its parent promises */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(SizeLimiter, RefusesPastTheLimit) {
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", "limit=10KiB");
  char *a = tu_alloc(lim, 4096), *b = tu_alloc(lim, 4096);
  tu_fill(a, 4096, 1);
  rap_stats before = tu_stats(lim);
  RAP_CHECK_EQ(before.current_bytes, 8192);
  void *c = (void *)&before;
  RAP_CHECK_STATUS(rap_allocate(lim, &c, 4096, NULL), RAP_ERR_NOMEM);
  RAP_CHECK(c == (void *)&before);
  RAP_CHECK_STR(rap_last_error(), "lim");
  RAP_CHECK_STR(rap_last_error(), "limit of 10 KiB");
  RAP_CHECK_STR(rap_last_error(), "8 KiB live");
  rap_stats after = tu_stats(lim);
  TU_STATS_EQ(before, after);
  TU_EXPECT(host, allocation_count, 2);   /* the parent was never asked */
  RAP_CHECK_STATUS(rap_allocate(lim, &c, SIZE_MAX, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STATUS(rap_allocate(lim, &c, SIZE_MAX / 2, NULL), RAP_ERR_NOMEM);
  void *d = tu_alloc(lim, 2048);   /* exactly up to the limit */
  TU_EXPECT(lim, current_bytes, 10240);
  RAP_CHECK_STATUS(rap_allocate(lim, &c, 1, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_OK(rap_deallocate(lim, b, NULL));   /* live bytes fall: room again */
  RAP_CHECK_STATUS(rap_deallocate(lim, b, NULL), RAP_ERR_UNKNOWN_POINTER);   /* double free */
  c = tu_alloc(lim, 4096);
  RAP_CHECK(tu_intact(a, 4096, 1));
  rap_stats s = tu_stats(lim);
  RAP_CHECK_EQ(s.current_bytes, 10240);
  RAP_CHECK_EQ(s.high_watermark, 10240);
  RAP_CHECK_EQ(s.allocation_count, 3);
  RAP_CHECK_STATUS(rap_deallocate(lim, a + 1, NULL), RAP_ERR_UNKNOWN_POINTER);
  void *h = tu_alloc(host, 8);
  RAP_CHECK_STATUS(rap_deallocate(lim, h, NULL), RAP_ERR_UNKNOWN_POINTER);   /* not its block */
  RAP_CHECK_OK(rap_deallocate(host, h, NULL));
  TU_CHECK(lim);
  RAP_CHECK_OK(rap_deallocate(lim, a, NULL));
  RAP_CHECK_OK(rap_deallocate(lim, c, NULL));
  RAP_CHECK_OK(rap_deallocate(lim, d, NULL));
  TU_EXPECT(lim, current_bytes, 0);
  TU_EXPECT(host, allocation_count, 0);
  void *z = tu_alloc(lim, 0);   /* zero bytes: a unique pointer, no live bytes */
  TU_EXPECT(lim, current_bytes, 0);
  RAP_CHECK_OK(rap_deallocate(lim, z, NULL));
  TU_CHECK(lim);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

typedef struct pool_kind {
  const char *label;
  const char *strategy;
} pool_kind;

static const pool_kind limited_pools[] = {
    {"QuickPool", "QuickPool"},
    {"DynamicPoolList", "DynamicPoolList"},
    {"ResourceAwarePool", "ResourceAwarePool"},
};

/* A pool of one-block chunks (4 KiB each, 4096 + 240 bytes of the limiter) under a limit of two
 * such chunks and one of 8 KiB: with three 4 KiB chunks held, an 8 KiB chunk passes the limit until
 * the pool gives its wholly free chunk back, which it does by itself before giving up. */
RAP_TEST_P(SizeLimiter, PoolAboveReleasesAndRetries, pool_kind, limited_pools) {
  const size_t c4 = tu_chunk(4096, 256), c8 = tu_chunk(8192, 256);
  char opts[64];
  snprintf(opts, sizeof opts, "limit=%zu", 2 * c4 + c8);
  rap_manager *rm = tu_manager();
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", opts);
  rap_allocator *pool =
      tu_make(rm, "pool", param->strategy, "lim", "initial_size=4KiB next_size=4KiB heuristic=never");
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096), *c = tu_alloc(pool, 4096);
  tu_fill(b, 4096, 2);
  tu_fill(c, 4096, 3);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  TU_EXPECT(pool, chunk_count, 3);
  TU_EXPECT(lim, current_bytes, 3 * c4);
  void *d = tu_alloc(pool, 8192);   /* refused, released a's chunk, retried */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 3);
  RAP_CHECK_EQ(s.actual_bytes, 2 * c4 + c8);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  TU_EXPECT(lim, current_bytes, 2 * c4 + c8);
  TU_EXPECT(lim, allocation_count, 3);
  RAP_CHECK(tu_intact(b, 4096, 2) && tu_intact(c, 4096, 3));
  TU_CHECK(pool);
  /* Nothing left to give back: the next chunk is refused, with the limiter's sentence. */
  rap_stats before = tu_stats(pool);
  void *e = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &e, 4096, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "limit");
  RAP_CHECK(e == NULL);
  rap_stats after = tu_stats(pool);
  TU_STATS_EQ(before, after);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));   /* b's chunk is free: the same request fits */
  e = tu_alloc(pool, 4096);
  TU_EXPECT(lim, current_bytes, 2 * c4 + c8);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, e, NULL));
  RAP_CHECK_OK(rap_release(pool));
  TU_EXPECT(lim, current_bytes, 0);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A limiter over a resource-aware pool passes resources through both ways. */
RAP_TEST(SizeLimiter, PassesResourcesThrough) {
  rap_manager *rm = tu_manager();
  rap_allocator *rap = tu_make(rm, "rap", "ResourceAwarePool", "HOST", "initial_size=64KiB");
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "rap", "limit=32KiB");
  RAP_CHECK_EQ(rap_allocator_alignment(lim), 256);
  rap_resource *q = NULL, *q2 = NULL, *owner = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q2));
  gate g;
  gate_init(&g);
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(lim, &p, 1000, q));
  RAP_CHECK_OK(rap_pointer_resource(lim, p, &owner));
  RAP_CHECK(owner == q);
  RAP_CHECK_EQ(rstats(rap, q).current_bytes, 1000);
  RAP_CHECK_OK(rap_record_resource(lim, p, q2));
  RAP_CHECK_STATUS(rap_record_resource(lim, (char *)p + 8, q2), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_resource_submit(q2, gate_job, &g));   /* q2 is busy */
  RAP_CHECK_OK(rap_deallocate(lim, p, NULL));            /* the owner, found below */
  TU_EXPECT(lim, current_bytes, 0);
  TU_EXPECT(rap, pending_count, 1);                      /* until q and q2 pass */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(q2));
  RAP_CHECK_OK(rap_release(lim));                        /* reaches the pool: polls, releases */
  TU_EXPECT(rap, pending_count, 0);
  TU_EXPECT(rap, chunk_count, 0);
  TU_CHECK(rap);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* ---- FixedPool ----------------------------------------------------------------------------- */

RAP_TEST(FixedPool, NeedsAnObjectSize) {
  rap_manager *rm = tu_manager();
  make_refused(rm, "FixedPool", "HOST", NULL, RAP_ERR_INVALID, "object_size");
  make_refused(rm, "FixedPool", "HOST", "object_size=0", RAP_ERR_INVALID, "object_size");
  make_refused(rm, "FixedPool", "HOST", "object_size=big", RAP_ERR_INVALID, "object_size");
  make_refused(rm, "FixedPool", "HOST", "object_size=64 objects_per_chunk=0", RAP_ERR_INVALID,
               "objects_per_chunk");
  make_refused(rm, "FixedPool", "HOST", "object_size=64 objects_per_chunk=5000000000",
               RAP_ERR_INVALID, "objects_per_chunk");
  make_refused(rm, "FixedPool", "HOST", "object_size=64 limit=1", RAP_ERR_INVALID, "limit");
  make_refused(rm, "FixedPool", NULL, "object_size=64", RAP_ERR_INVALID, "parent");
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* object_size=100 over HOST: objects are 16-aligned, 112 bytes apart, four to a 448-byte chunk. */
RAP_TEST(FixedPool, ObjectsAndChunks) {
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "HOST", "object_size=100 objects_per_chunk=4");
  RAP_CHECK_EQ(rap_allocator_alignment(fp), 16);
  TU_EXPECT(fp, chunk_count, 0);   /* lazily */
  char *o[9];
  for (int i = 0; i < 9; i++) {
    o[i] = tu_alloc(fp, (size_t)(10 * i + 10));
    RAP_CHECK((uintptr_t)o[i] % 16 == 0);
    tu_fill(o[i], (size_t)(10 * i + 10), (unsigned)i);
    TU_EXPECT(fp, chunk_count, (size_t)i / 4 + 1);
  }
  for (int i = 0; i < 9; i++)
    for (int j = 0; j < i; j++) {
      size_t d = o[i] > o[j] ? (size_t)(o[i] - o[j]) : (size_t)(o[j] - o[i]);
      RAP_CHECK(d >= 112);   /* no two objects overlap */
      if (i / 4 == j / 4) RAP_CHECK(d % 112 == 0 && d < 448);   /* one chunk: whole strides */
    }
  rap_stats s = tu_stats(fp);
  RAP_CHECK_EQ(s.current_bytes, 450);   /* 10 + 20 + ... + 90 */
  RAP_CHECK_EQ(s.allocation_count, 9);
  RAP_CHECK_EQ(s.chunk_count, 3);
  RAP_CHECK_EQ(s.actual_bytes, 3 * 448);
  RAP_CHECK_EQ(s.used_bytes, 9 * 112);
  RAP_CHECK_EQ(s.free_bytes, 3 * 112);
  RAP_CHECK_EQ(s.largest_free_block, 112);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  TU_EXPECT(host, allocation_count, 3);
  TU_EXPECT(host, current_bytes, 3 * 448);
  TU_CHECK(fp);
  for (int i = 0; i < 9; i++) RAP_CHECK(tu_intact(o[i], (size_t)(10 * i + 10), (unsigned)i));

  /* A freed slot is taken again before the pool grows. */
  RAP_CHECK_OK(rap_deallocate(fp, o[5], NULL));
  char *again = tu_alloc(fp, 100);
  RAP_CHECK(again == o[5]);
  TU_EXPECT(fp, chunk_count, 3);
  o[5] = again;
  for (int i = 0; i < 9; i++) RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));
  s = tu_stats(fp);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.releasable_bytes, 3 * 448);
  RAP_CHECK_EQ(s.high_watermark, 490);   /* o[5] (60 bytes) came back as 100 */
  TU_CHECK(fp);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(FixedPool, LargerThanAnObjectIsInvalid) {
  rap_manager *rm = tu_manager();
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "HOST", "object_size=100 objects_per_chunk=4");
  void *keep = tu_alloc(fp, 100);   /* exactly object_size is fine */
  rap_stats before = tu_stats(fp);
  void *p = (void *)&before;
  RAP_CHECK_STATUS(rap_allocate(fp, &p, 101, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "object size");
  RAP_CHECK_STR(rap_last_error(), "fp");
  RAP_CHECK_STATUS(rap_allocate(fp, &p, SIZE_MAX, NULL), RAP_ERR_INVALID);
  RAP_CHECK(p == (void *)&before);
  rap_stats after = tu_stats(fp);
  TU_STATS_EQ(before, after);
  void *z1 = tu_alloc(fp, 0), *z2 = tu_alloc(fp, 0);   /* zero bytes: unique objects */
  RAP_CHECK(z1 != z2 && z1 != keep && z2 != keep);
  TU_EXPECT(fp, current_bytes, 100);
  TU_EXPECT(fp, allocation_count, 3);
  RAP_CHECK_OK(rap_deallocate(fp, z1, NULL));
  RAP_CHECK_OK(rap_deallocate(fp, z2, NULL));
  RAP_CHECK_OK(rap_deallocate(fp, keep, NULL));
  TU_CHECK(fp);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(FixedPool, BadPointersAreRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "HOST", "object_size=64 objects_per_chunk=8");
  char *a = tu_alloc(fp, 64), *b = tu_alloc(fp, 64);
  tu_fill(a, 64, 1);
  RAP_CHECK_OK(rap_deallocate(fp, b, NULL));
  void *h = tu_alloc(host, 64);
  int local;
  void *bad[] = {b, a + 1, a + 63, h, &local};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rap_stats before = tu_stats(fp);
    RAP_CHECK_STATUS(rap_deallocate(fp, bad[i], NULL), RAP_ERR_UNKNOWN_POINTER);
    RAP_CHECK_STR(rap_last_error(), "fp");
    rap_stats after = tu_stats(fp);
    TU_STATS_EQ(before, after);
    TU_CHECK(fp);
  }
  RAP_CHECK_OK(rap_deallocate(fp, NULL, NULL));
  rap_resource *owner = NULL, *host_r = NULL, *q = NULL;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  RAP_CHECK_OK(rap_pointer_resource(fp, a, &owner));
  RAP_CHECK(owner == host_r);   /* FixedPool does not track resources */
  RAP_CHECK_STATUS(rap_pointer_resource(fp, b, &owner), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_record_resource(fp, a, q), RAP_ERR_UNSUPPORTED);
  RAP_CHECK(tu_intact(a, 64, 1));
  RAP_CHECK_OK(rap_deallocate(fp, a, NULL));
  RAP_CHECK_OK(rap_deallocate(host, h, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(FixedPool, ReleaseFreesWhollyFreeChunks) {
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "HOST", "object_size=32 objects_per_chunk=4");
  void *o[12];
  for (int i = 0; i < 12; i++) {
    o[i] = tu_alloc(fp, 32);
    tu_fill(o[i], 32, (unsigned)i);
  }
  TU_EXPECT(fp, chunk_count, 3);
  for (int i = 4; i < 8; i++) RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));   /* the second chunk */
  RAP_CHECK_OK(rap_deallocate(fp, o[9], NULL));                               /* one of the third */
  rap_stats s = tu_stats(fp);
  RAP_CHECK_EQ(s.releasable_bytes, 128);
  RAP_CHECK_EQ(s.free_bytes, 5 * 32);
  RAP_CHECK_OK(rap_release(fp));
  s = tu_stats(fp);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, 256);
  RAP_CHECK_EQ(s.actual_high_watermark, 384);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 7);
  TU_EXPECT(host, allocation_count, 2);
  for (int i = 0; i < 12; i++)
    if (i < 4 || i == 8 || i > 9) RAP_CHECK(tu_intact(o[i], 32, (unsigned)i));
  TU_CHECK(fp);
  void *n = tu_alloc(fp, 1);   /* the free slot of the third chunk, not a new chunk */
  TU_EXPECT(fp, chunk_count, 2);
  RAP_CHECK(n == o[9]);
  RAP_CHECK_OK(rap_deallocate(fp, n, NULL));
  for (int i = 0; i < 12; i++)
    if (i < 4 || i == 8 || i > 9) RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));
  RAP_CHECK_OK(rap_release(fp));
  TU_EXPECT(fp, chunk_count, 0);
  TU_EXPECT(host, allocation_count, 0);
  TU_CHECK(fp);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(FixedPool, ParentFailureChangesNothing) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = tu_make(rm, "f", "Fault", "HOST", NULL);
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "f", "object_size=64 objects_per_chunk=2");
  void *a = tu_alloc(fp, 64), *b = tu_alloc(fp, 64);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1"));
  rap_stats before = tu_stats(fp);
  void *c = NULL;
  RAP_CHECK_STATUS(rap_allocate(fp, &c, 64, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "fail_next");
  rap_stats after = tu_stats(fp);
  TU_STATS_EQ(before, after);
  TU_CHECK(fp);
  c = tu_alloc(fp, 64);
  TU_EXPECT(fp, chunk_count, 2);
  RAP_CHECK_OK(rap_deallocate(fp, a, NULL));
  RAP_CHECK_OK(rap_deallocate(fp, b, NULL));
  RAP_CHECK_OK(rap_deallocate(fp, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Many objects: allocation and deallocation stay O(1) (no list walks: this takes milliseconds). */
RAP_TEST(FixedPool, ManyObjects) {
  enum { N = 50000 };
  rap_manager *rm = tu_manager();
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "HOST", "object_size=48 objects_per_chunk=1000");
  void **o = malloc(N * sizeof *o);
  RAP_CHECK(o != NULL);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      o[i] = tu_alloc(fp, 48);
      *(int *)o[i] = i;
    }
    TU_EXPECT(fp, chunk_count, N / 1000);
    for (int i = 0; i < N; i += 2) RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));
    for (int i = 1; i < N; i += 2) {
      RAP_CHECK(*(int *)o[i] == i);
      RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));
    }
  }
  TU_EXPECT(fp, allocation_count, 0);
  TU_CHECK(fp);
  free(o);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
