/* test_quick_pool_oom.c — a pool when its parent runs dry, and pools stacked on pools; every body
 * runs over {QuickPool, DynamicPoolList} x {HOST, Fault} (RAP_TEST_POOLS).
 *
 * A Fault allocator "f" between the pool and the parameter set's parent (HOST, or a Fault over
 * HOST) fails requests on demand (fail_next, fail_after, budget). After every step the pool's
 * invariants hold, every live block keeps its bytes, and the
 * pool's actual bytes are exactly what the Fault parent has handed out.
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

/* The parameter set's parent, and a Fault "f" over it. */
static rap_allocator *fault_over_parent(rap_manager *rm, const tu_pool *param) {
  return tu_make(rm, "f", "Fault", rap_allocator_name(tu_parent(rm, param)), NULL);
}

/* ---- a fixed script of allocations and frees that needs several chunks ------------------------ */

enum { SLOTS = 16 };
typedef struct step {
  int slot;        /* which slot */
  size_t bytes;    /* SIZE_MAX: free the slot; otherwise allocate into it */
} step;
#define FREE SIZE_MAX

static const step script[] = {
    {0, 3000},  {1, 5000},  {2, 100},   {3, 9000},  {1, FREE},  {4, 7000},  {5, 0},
    {0, FREE},  {6, 12000}, {3, FREE},  {7, 2000},  {2, FREE},  {8, 20000}, {6, FREE},
    {4, FREE},  {9, 4000},  {10, 8192}, {11, 1},    {8, FREE},  {12, 30000}, {7, FREE},
    {13, 6000}, {9, FREE},  {14, 500},  {15, 16384}, {10, FREE}, {12, FREE}, {5, FREE},
    {1, 9000},  {3, 2500},  {13, FREE}, {0, 40000},
};

typedef struct slots {
  void *p[SLOTS];
  size_t n[SLOTS];
  unsigned seed[SLOTS];
} slots;

/* extra: blocks of `extra_bytes` in all that are live outside the slots. */
static void check_consistent(rap_allocator *pool, rap_allocator *f, const slots *s, size_t extra,
                             size_t extra_bytes) {
  TU_CHECK(pool);
  TU_CHECK(f);
  rap_stats ps = tu_stats(pool), fs = tu_stats(f);
  RAP_CHECK_EQ(ps.actual_bytes, fs.current_bytes);   /* the pool holds what the parent gave */
  RAP_CHECK_EQ(ps.chunk_count, fs.allocation_count);
  size_t live = extra, bytes = extra_bytes;
  for (int i = 0; i < SLOTS; i++) {
    if (s->p[i] == NULL) continue;
    RAP_CHECK(tu_intact(s->p[i], s->n[i], s->seed[i]));
    live++;
    bytes += s->n[i];
  }
  RAP_CHECK_EQ(ps.allocation_count, live);
  RAP_CHECK_EQ(ps.current_bytes, bytes);
}

/* Runs the script; returns how many allocations failed with NOMEM. */
static size_t run_script(rap_allocator *pool, rap_allocator *f, slots *s, unsigned round) {
  size_t failed = 0;
  for (size_t i = 0; i < sizeof script / sizeof script[0]; i++) {
    int k = script[i].slot;
    if (script[i].bytes == FREE) {
      RAP_CHECK_OK(rap_deallocate(pool, s->p[k], NULL));   /* NULL if its allocation failed */
      s->p[k] = NULL;
    } else {
      RAP_CHECK(s->p[k] == NULL);
      rap_stats before = tu_stats(pool);
      void *p = NULL;
      int st = rap_allocate(pool, &p, script[i].bytes, NULL);
      if (st == RAP_ERR_NOMEM) {
        failed++;
        RAP_CHECK(p == NULL);
        RAP_CHECK(strlen(rap_last_error()) > 0);
        rap_stats after = tu_stats(pool);
        RAP_CHECK_EQ(after.allocation_count, before.allocation_count);
        RAP_CHECK_EQ(after.current_bytes, before.current_bytes);
        RAP_CHECK_EQ(after.used_bytes, before.used_bytes);
      } else {
        RAP_CHECK_OK(st);
        s->p[k] = p;
        s->n[k] = script[i].bytes;
        s->seed[k] = round * 100 + (unsigned)i;
        tu_fill(p, s->n[k], s->seed[k]);
      }
    }
    check_consistent(pool, f, s, 0, 0);
  }
  return failed;
}

static void free_all(rap_allocator *pool, slots *s) {
  for (int i = 0; i < SLOTS; i++) {
    RAP_CHECK_OK(rap_deallocate(pool, s->p[i], NULL));
    s->p[i] = NULL;
  }
}

static void fail_at_every_step(const tu_pool *param, const char *heuristic) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  char opts[128];
  snprintf(opts, sizeof opts, "initial_size=16KiB next_size=8KiB heuristic=%s", heuristic);
  /* How many parent requests the script makes when nothing fails. */
  slots s;
  memset(&s, 0, sizeof s);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", "f", opts);
  size_t start = tu_requests(f);
  RAP_CHECK_EQ(run_script(pool, f, &s, 0), 0);
  size_t total = tu_requests(f) - start;
  RAP_CHECK(total >= 4);   /* the script needs several chunks */
  free_all(pool, &s);
  RAP_CHECK_OK(rap_allocator_destroy(pool));

  for (size_t n = 0; n <= total + 1; n++) {
    char cfg[64];
    snprintf(cfg, sizeof cfg, "reset fail_after=%zu", n);
    pool = tu_pool_make(rm, param, "pool", "f", opts);
    RAP_CHECK_OK(rap_fault_configure(f, cfg));
    size_t failed = run_script(pool, f, &s, (unsigned)n + 1);
    if (n == 0) RAP_CHECK(failed > 0);      /* the very first allocation needs a chunk */
    if (n >= total) RAP_CHECK_EQ(failed, 0);
    /* The parent works again: the pool serves every size, then gives everything back. */
    RAP_CHECK_OK(rap_fault_configure(f, "reset"));
    void *a = tu_alloc(pool, 10000), *b = tu_alloc(pool, 100 * 1024);
    tu_fill(b, 100 * 1024, 7);
    check_consistent(pool, f, &s, 2, 10000 + 100 * 1024);
    RAP_CHECK(tu_intact(b, 100 * 1024, 7));
    RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
    free_all(pool, &s);
    RAP_CHECK_OK(rap_release(pool));
    TU_EXPECT(pool, chunk_count, 0);
    TU_EXPECT(f, current_bytes, 0);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_allocator_destroy(pool));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolOom, FailAtEveryStepNever) { fail_at_every_step(param, "never"); }
RAP_TEST_POOLS(PoolOom, FailAtEveryStepDefault) {
  fail_at_every_step(param, "percent_releasable_hwm:100");
}
RAP_TEST_POOLS(PoolOom, FailAtEveryStepPercent50) { fail_at_every_step(param, "percent_releasable:50"); }
RAP_TEST_POOLS(PoolOom, FailAtEveryStepBlocks1) { fail_at_every_step(param, "blocks_releasable:1"); }
RAP_TEST_POOLS(PoolOom, FailAtEveryStepBlocksHwm2) {
  fail_at_every_step(param, "blocks_releasable_hwm:2");
}

/* ---- single failures ---------------------------------------------------------------------- */

RAP_TEST_POOLS(PoolOom, FailedGrowthChangesNothing) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", "f", "initial_size=4KiB next_size=4KiB");
  void *a = tu_alloc(pool, 4096);
  tu_fill(a, 4096, 1);
  rap_stats before = tu_stats(pool);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1"));
  void *p = (void *)&before;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 100, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "fail_next");   /* the parent's sentence reaches the caller */
  RAP_CHECK(p == (void *)&before);
  rap_stats after = tu_stats(pool);
  TU_STATS_EQ(before, after);
  TU_CHECK(pool);
  RAP_CHECK(tu_intact(a, 4096, 1));
  p = tu_alloc(pool, 100);   /* fail_next=1 is spent */
  TU_EXPECT(pool, chunk_count, 2);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolOom, ReleasesFreeChunksAndRetriesOnce) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool =
      tu_pool_make(rm, param, "pool", "f", "initial_size=4KiB next_size=4KiB heuristic=never");
  const size_t c4 = tu_chunk_on(f, 4096, 256), c8 = tu_chunk_on(f, 8192, 256);
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);
  tu_fill(b, 4096, 2);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));   /* a's chunk is wholly free, b's is live */
  TU_EXPECT(pool, chunk_count, 2);
  TU_EXPECT(pool, releasable_bytes, c4);
  /* Room for one more 8 KiB chunk only once the free 4 KiB chunk has gone back. */
  char cfg[64];
  snprintf(cfg, sizeof cfg, "budget=%zu", c4 + c8);
  RAP_CHECK_OK(rap_fault_configure(f, cfg));
  size_t requests = tu_requests(f);
  void *c = tu_alloc(pool, 8192);
  RAP_CHECK_EQ(tu_requests(f), requests + 2);   /* refused, released, granted */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, c4 + c8);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  RAP_CHECK_EQ(s.actual_high_watermark, c4 + c8);
  RAP_CHECK(tu_intact(b, 4096, 2));
  TU_CHECK(pool);
  TU_EXPECT(f, allocation_count, 2);
  /* Nothing left to release: the next miss fails after one request, and changes nothing. */
  rap_stats before = tu_stats(pool);
  requests = tu_requests(f);
  void *d = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &d, 4096, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "budget");
  RAP_CHECK_EQ(tu_requests(f), requests + 1);
  rap_stats after = tu_stats(pool);
  TU_STATS_EQ(before, after);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolOom, RetryThatStillFailsKeepsLiveBlocks) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool =
      tu_pool_make(rm, param, "pool", "f", "initial_size=4KiB next_size=4KiB heuristic=never");
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);
  tu_fill(b, 4096, 5);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=2"));
  void *c = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &c, 8192, NULL), RAP_ERR_NOMEM);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);   /* the free chunk went back before the retry */
  RAP_CHECK_EQ(s.allocation_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, tu_stats(f).current_bytes);
  RAP_CHECK(tu_intact(b, 4096, 5));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The retry after a release asks for what the first try asked for, even when the release left the
 * pool with no chunk at all (where a fresh growth would use initial_size). */
RAP_TEST_POOLS(PoolOom, RetryAsksForTheSameSize) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool =
      tu_pool_make(rm, param, "pool", "f", "initial_size=64KiB next_size=4KiB heuristic=never");
  void *a = tu_alloc(pool, 65536);   /* fills the initial chunk */
  void *b = tu_alloc(pool, 4096);    /* a next_size chunk */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* only b's chunk is left */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, releasable_bytes, tu_chunk_on(f, 4096, 256));
  char cfg[64];
  snprintf(cfg, sizeof cfg, "budget=%zu", tu_chunk_on(f, 8192, 256));   /* 8 KiB, once 4 is back */
  RAP_CHECK_OK(rap_fault_configure(f, cfg));
  size_t requests = tu_requests(f);
  void *c = tu_alloc(pool, 8192);
  RAP_CHECK_EQ(tu_requests(f), requests + 2);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(f, 8192, 256));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- pools on pools ------------------------------------------------------------------------ */

RAP_TEST_POOLS(PoolStack, PoolOverPool) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *inner = tu_pool_make(rm, param, "inner", NULL, "initial_size=1MiB heuristic=never");
  rap_allocator *outer =
      tu_pool_make(rm, param, "outer", "inner", "initial_size=64KiB next_size=64KiB");
  RAP_CHECK(rap_allocator_parent(outer) == inner);
  RAP_CHECK(rap_allocator_parent(inner) == parent);
  RAP_CHECK(rap_allocator_parent(parent) == (param->fault ? tu_get(rm, "HOST") : NULL));
  char *p = tu_alloc(outer, 1000);
  tu_fill(p, 1000, 1);
  rap_stats o = tu_stats(outer), i = tu_stats(inner);
  RAP_CHECK_EQ(o.current_bytes, 1000);
  RAP_CHECK_EQ(o.chunk_count, 1);
  RAP_CHECK_EQ(o.actual_bytes, 65536);   /* inner is 256-aligned: no padding */
  RAP_CHECK_EQ(i.current_bytes, 65536);
  RAP_CHECK_EQ(i.used_bytes, 65536);
  RAP_CHECK_EQ(i.allocation_count, 1);
  RAP_CHECK_EQ(i.actual_bytes, tu_chunk_on(parent, 1 << 20, 256));
  RAP_CHECK_EQ(tu_stats(parent).current_bytes, tu_chunk_on(parent, 1 << 20, 256));
  char *q = tu_alloc(outer, 100 * 1024);   /* a second outer chunk: a second inner block */
  TU_EXPECT(outer, chunk_count, 2);
  TU_EXPECT(inner, allocation_count, 2);
  TU_EXPECT(inner, current_bytes, 65536 + 100 * 1024);
  TU_EXPECT(inner, chunk_count, 1);
  TU_CHECK(outer);
  TU_CHECK(inner);

  RAP_CHECK_STATUS(rap_allocator_destroy(inner), RAP_ERR_BUSY);   /* a child uses it */
  RAP_CHECK_STR(rap_last_error(), "inner");
  RAP_CHECK_STATUS(rap_allocator_destroy(parent), RAP_ERR_BUSY);
  RAP_CHECK_STATUS(rap_allocator_destroy(outer), RAP_ERR_BUSY);   /* live blocks */
  RAP_CHECK_STR(rap_last_error(), "outer");
  RAP_CHECK(tu_intact(p, 1000, 1));
  RAP_CHECK_OK(rap_deallocate(outer, p, NULL));
  RAP_CHECK_OK(rap_deallocate(outer, q, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(outer));   /* gives its chunks back to inner */
  rap_stats after = tu_stats(inner);
  RAP_CHECK_EQ(after.allocation_count, 0);
  RAP_CHECK_EQ(after.current_bytes, 0);
  RAP_CHECK_EQ(after.chunk_count, 1);
  RAP_CHECK_EQ(after.high_watermark, 65536 + 100 * 1024);
  TU_CHECK(inner);
  rap_allocator *gone = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "outer", &gone), RAP_ERR_NOT_FOUND);
  RAP_CHECK_OK(rap_allocator_destroy(inner));
  TU_EXPECT(parent, allocation_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolStack, PaddingComesFromTheParentsAlignment) {
  rap_manager *rm = tu_manager();
  rap_allocator *inner = tu_pool_make(rm, param, "inner", NULL, "initial_size=1MiB alignment=256");
  rap_allocator *outer =
      tu_pool_make(rm, param, "outer", "inner", "initial_size=64KiB alignment=4096");
  void *p = tu_alloc(outer, 1);
  RAP_CHECK((uintptr_t)p % 4096 == 0);
  TU_EXPECT(outer, actual_bytes, 65536 + 4096 - 256);
  TU_EXPECT(inner, current_bytes, 65536 + 4096 - 256);
  TU_EXPECT(inner, used_bytes, 65536 + 4096 - 256);   /* already a multiple of 256 */
  /* A Fault reports the alignment of its parent: over it the padding is the same. */
  rap_allocator *fi = tu_make(rm, "fi", "Fault", "inner", NULL);
  RAP_CHECK_EQ(rap_allocator_alignment(fi), 256);
  rap_allocator *outer2 = tu_pool_make(rm, param, "outer2", "fi", "initial_size=64KiB alignment=4096");
  void *q = tu_alloc(outer2, 1);
  RAP_CHECK((uintptr_t)q % 4096 == 0);
  TU_EXPECT(outer2, actual_bytes, 65536 + 4096 - 256);
  TU_EXPECT(fi, current_bytes, 65536 + 4096 - 256);
  RAP_CHECK_OK(rap_deallocate(outer2, q, NULL));
  RAP_CHECK_OK(rap_deallocate(outer, p, NULL));
  TU_CHECK(outer);
  TU_CHECK(outer2);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolStack, InnerWithLiveBlocksIsBusy) {
  rap_manager *rm = tu_manager();
  rap_allocator *inner = tu_pool_make(rm, param, "inner", NULL, "initial_size=64KiB");
  rap_allocator *outer = tu_pool_make(rm, param, "outer", "inner", "initial_size=4KiB");
  void *direct = tu_alloc(inner, 500);
  RAP_CHECK_OK(rap_allocator_destroy(outer));   /* empty, never grew */
  RAP_CHECK_STATUS(rap_allocator_destroy(inner), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "live");
  RAP_CHECK_OK(rap_deallocate(inner, direct, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(inner));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolStack, FindReturnsTheNewestOwner) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *inner = tu_pool_make(rm, param, "inner", NULL, "initial_size=1MiB");
  rap_allocator *outer = tu_pool_make(rm, param, "outer", "inner", "initial_size=64KiB");
  rap_allocator *found = NULL;
  void *p = tu_alloc(outer, 100);   /* the first block of outer's chunk: same address as it */
  void *q = tu_alloc(outer, 100);
  void *i = tu_alloc(inner, 100);
  void *h = tu_alloc(parent, 100);
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == outer);
  RAP_CHECK_OK(rap_allocator_find(rm, q, &found));
  RAP_CHECK(found == outer);
  RAP_CHECK_OK(rap_allocator_find(rm, i, &found));
  RAP_CHECK(found == inner);
  RAP_CHECK_OK(rap_allocator_find(rm, h, &found));
  RAP_CHECK(found == parent);
  found = NULL;
  RAP_CHECK_STATUS(rap_allocator_find(rm, (char *)q + 8, &found), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK(found == NULL);
  RAP_CHECK_OK(rap_deallocate(outer, p, NULL));
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));   /* still inner's live block: outer's chunk */
  RAP_CHECK(found == inner);
  RAP_CHECK_OK(rap_deallocate(outer, q, NULL));
  RAP_CHECK_OK(rap_deallocate(inner, i, NULL));
  RAP_CHECK_OK(rap_deallocate(parent, h, NULL));
  RAP_CHECK_STATUS(rap_allocator_find(rm, q, &found), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolStack, ManagerDestroysChildrenFirst) {
  rap_manager *rm = tu_manager();
  rap_allocator *inner = tu_pool_make(rm, param, "inner", NULL, "initial_size=64KiB");
  rap_allocator *outer = tu_pool_make(rm, param, "outer", "inner", "initial_size=4KiB");
  rap_allocator *top = tu_pool_make(rm, param, "top", "outer", "initial_size=1KiB");
  void *p = tu_alloc(top, 10);
  RAP_CHECK_OK(rap_deallocate(top, p, NULL));
  TU_EXPECT(inner, allocation_count, 1);   /* outer's chunk */
  TU_EXPECT(outer, allocation_count, 1);   /* top's chunk */
  /* Chunks held by empty pools are not leaks: destroying children first returns them. */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
