/* test_quick_pool_heuristics.c — when a pool consolidates wholly free chunks by itself; every body
 * runs over {QuickPool, DynamicPoolList} x {HOST, Fault} (RAP_TEST_POOLS).
 *
 * The rule (block_pool.c): evaluated only when a deallocation leaves a whole chunk free; fires when
 * releasable * 100 >= P * actual (percent) or releasable chunks >= N (blocks). Firing releases every
 * wholly free chunk and takes one back: of the released usable bytes, or (_hwm) of
 * max(initial_size, peak used bytes) less the usable bytes of chunks still held; only if that
 * changes something. Most tests use "one chunk per block": initial_size = next_size = 4KiB and
 * blocks of 4096 bytes, so each chunk costs 4096 + 240 bytes of the parent (alignment 16). Tests
 * that watch the parent's calls put a Fault "f" between the pool and the parameter set's parent.
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

/* What a chunk of u usable bytes costs the pool's parent; `pool` must be in scope. */
#define CHUNK(u) tu_chunk_on(rap_allocator_parent(pool), (u), 256)
#define CHUNK4K CHUNK(4096)

/* The parameter set's parent, and a Fault "f" over it for tests that fail or count requests. */
static rap_allocator *fault_over_parent(rap_manager *rm, const tu_pool *param) {
  return tu_make(rm, "f", "Fault", rap_allocator_name(tu_parent(rm, param)), NULL);
}

/* parent NULL: the parameter set's parent. */
static rap_allocator *one_per_chunk(rap_manager *rm, const tu_pool *param, const char *parent,
                                    const char *heuristic) {
  char opts[128];
  snprintf(opts, sizeof opts, "initial_size=4KiB next_size=4KiB heuristic=%s", heuristic);
  return tu_pool_make(rm, param, "pool", parent, opts);
}

static void alloc_chunks(rap_allocator *pool, void **blocks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    blocks[i] = tu_alloc(pool, 4096);
    tu_fill(blocks[i], 4096, (unsigned)i);
  }
  TU_EXPECT(pool, chunk_count, n);
  TU_EXPECT(pool, actual_bytes, n * CHUNK4K);
}

static void release_block(rap_allocator *pool, void *p) {
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  TU_CHECK(pool);
}

RAP_TEST_POOLS(PoolHeuristic, PercentZeroNeverFires) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = one_per_chunk(rm, param, NULL, "percent_releasable:0");
  void *b[3];
  alloc_chunks(pool, b, 3);
  for (int i = 0; i < 3; i++) {
    release_block(pool, b[i]);
    TU_EXPECT(pool, chunk_count, 3);
  }
  TU_EXPECT(pool, releasable_bytes, 3 * CHUNK4K);
  TU_EXPECT(pool, actual_bytes, 3 * CHUNK4K);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, Percent75) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = one_per_chunk(rm, param, NULL, "percent_releasable:75");
  void *b[4];
  alloc_chunks(pool, b, 4);
  release_block(pool, b[1]);   /* 25% */
  TU_EXPECT(pool, chunk_count, 4);
  release_block(pool, b[2]);   /* 50% */
  TU_EXPECT(pool, chunk_count, 4);
  release_block(pool, b[3]);   /* 75%: three chunks become one of their usable bytes */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.block_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK4K + CHUNK(3 * 4096));
  RAP_CHECK_EQ(s.releasable_bytes, CHUNK(3 * 4096));
  RAP_CHECK_EQ(s.largest_free_block, 3 * 4096);
  RAP_CHECK_EQ(s.actual_high_watermark, 4 * CHUNK4K);
  RAP_CHECK_EQ(tu_stats(parent).allocation_count, 2);
  RAP_CHECK(tu_intact(b[0], 4096, 0));
  release_block(pool, b[0]);   /* 100% >= 75%: both chunks become one */
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK(4 * 4096));
  RAP_CHECK_EQ(s.largest_free_block, 4 * 4096);
  size_t parent_calls = tu_stats(parent).allocation_count;
  void *big = tu_alloc(pool, 4 * 4096);   /* fits the consolidated chunk: no parent call */
  RAP_CHECK_EQ(tu_stats(parent).allocation_count, parent_calls);
  TU_EXPECT(pool, chunk_count, 1);
  release_block(pool, big);
  TU_EXPECT(pool, chunk_count, 1);   /* one chunk wholly free: nothing to change */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, Percent100FiresOnlyWhenAllIsFree) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = one_per_chunk(rm, param, NULL, "percent_releasable:100");
  void *b[3];
  alloc_chunks(pool, b, 3);
  release_block(pool, b[0]);
  release_block(pool, b[2]);
  TU_EXPECT(pool, chunk_count, 3);
  TU_EXPECT(pool, releasable_bytes, 2 * CHUNK4K);
  release_block(pool, b[1]);
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, actual_bytes, CHUNK(3 * 4096));
  TU_EXPECT(pool, largest_free_block, 3 * 4096);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, LoneFreeChunkIsLeftAlone) {
  static const char *const hs[] = {"percent_releasable:100", "percent_releasable:1",
                                   "blocks_releasable:1", "percent_releasable_hwm:100"};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
    rap_manager *rm = tu_manager();
    rap_allocator *f = fault_over_parent(rm, param);
    rap_allocator *pool = one_per_chunk(rm, param, "f", hs[i]);
    void *p = tu_alloc(pool, 4096);
    size_t before = tu_requests(f);
    release_block(pool, p);   /* fires, but giving the chunk back to take it again changes nothing */
    RAP_CHECK_EQ(tu_requests(f), before);
    TU_EXPECT(pool, chunk_count, 1);
    TU_EXPECT(f, allocation_count, 1);
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

RAP_TEST_POOLS(PoolHeuristic, PercentHwmShrinksToPeakUse) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(
      rm, param, "pool", NULL, "initial_size=4KiB next_size=1MiB heuristic=percent_releasable_hwm:100");
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);   /* 4 KiB chunk, then a 1 MiB one */
  TU_EXPECT(pool, actual_bytes, CHUNK4K + CHUNK(1 << 20));
  release_block(pool, a);
  TU_EXPECT(pool, chunk_count, 2);
  release_block(pool, b);   /* peak use was 8 KiB: one chunk of 8 KiB replaces 1 MiB + 4 KiB */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK(8192));
  RAP_CHECK_EQ(s.largest_free_block, 8192);
  RAP_CHECK_EQ(s.releasable_bytes, CHUNK(8192));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, PercentWithoutHwmKeepsAllBytes) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(
      rm, param, "pool", NULL, "initial_size=4KiB next_size=1MiB heuristic=percent_releasable:100");
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);
  release_block(pool, a);
  release_block(pool, b);
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, actual_bytes, CHUNK(4096 + (1 << 20)));
  TU_EXPECT(pool, largest_free_block, 4096 + (1 << 20));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, HwmNeverShrinksBelowInitialSize) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(
      rm, param, "pool", NULL, "initial_size=16KiB next_size=1MiB heuristic=percent_releasable_hwm:100");
  void *a = tu_alloc(pool, 8192), *b = tu_alloc(pool, 2048);
  release_block(pool, a);            /* holes of 8 KiB and 6 KiB around b */
  void *c = tu_alloc(pool, 9216);    /* fits neither: a 1 MiB chunk; peak use 11 KiB */
  TU_EXPECT(pool, chunk_count, 2);
  TU_EXPECT(pool, high_watermark, 11264);
  release_block(pool, b);
  TU_EXPECT(pool, chunk_count, 2);
  release_block(pool, c);            /* fires: the new chunk is initial_size, not the 11 KiB peak */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK(16384));
  RAP_CHECK_EQ(s.largest_free_block, 16384);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, BlocksHwmShrinksBesideAHeldChunk) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(
      rm, param, "pool", NULL, "initial_size=4KiB next_size=64KiB heuristic=blocks_releasable_hwm:1");
  void *a = tu_alloc(pool, 4096);   /* fills the first chunk */
  tu_fill(a, 4096, 9);
  void *b = tu_alloc(pool, 1000);   /* a 64 KiB chunk; peak use 5120 */
  release_block(pool, b);           /* peak 5120 - held 4096: the 64 KiB chunk becomes 1 KiB */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK4K + CHUNK(1024));
  RAP_CHECK_EQ(s.largest_free_block, 1024);
  RAP_CHECK(tu_intact(a, 4096, 9));
  release_block(pool, a);           /* both free: one chunk of the peak, 5120 */
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK(5120));
  RAP_CHECK_EQ(s.largest_free_block, 5120);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, BlocksReleasable2) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = one_per_chunk(rm, param, NULL, "blocks_releasable:2");
  void *b[3];
  alloc_chunks(pool, b, 3);
  release_block(pool, b[0]);
  TU_EXPECT(pool, chunk_count, 3);
  release_block(pool, b[1]);   /* two releasable chunks: merged into one of 8 KiB */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK4K + CHUNK(8192));
  RAP_CHECK_EQ(s.releasable_bytes, CHUNK(8192));
  RAP_CHECK(tu_intact(b[2], 4096, 2));
  release_block(pool, b[2]);
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK(3 * 4096));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, PartlyFreeChunkDoesNotTrigger) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool = one_per_chunk(rm, param, "f", "blocks_releasable:1");
  void *b[2];
  alloc_chunks(pool, b, 2);
  RAP_CHECK_OK(rap_deallocate(pool, b[0], NULL));   /* one free chunk beside a used one */
  void *x = tu_alloc(pool, 1000), *y = tu_alloc(pool, 1000);   /* into b[0]'s chunk */
  TU_EXPECT(pool, chunk_count, 2);
  size_t before = tu_requests(f);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=100"));
  release_block(pool, x);   /* the chunk still holds y: the heuristic is not evaluated */
  RAP_CHECK_EQ(tu_requests(f), before);
  TU_EXPECT(f, allocation_count, 2);
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  release_block(pool, y);
  release_block(pool, b[1]);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, NeverDoesNotCallTheParentOnDeallocate) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool = one_per_chunk(rm, param, "f", "never");
  void *b[5];
  alloc_chunks(pool, b, 5);
  size_t requests = tu_requests(f);
  rap_stats parent = tu_stats(f);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1000"));   /* any parent allocation would fail */
  for (int i = 0; i < 5; i++) release_block(pool, b[i]);
  RAP_CHECK_EQ(tu_requests(f), requests);
  rap_stats after = tu_stats(f);
  TU_STATS_EQ(parent, after);   /* nothing given back either */
  TU_EXPECT(pool, chunk_count, 5);
  TU_EXPECT(pool, releasable_bytes, 5 * CHUNK4K);
  RAP_CHECK_OK(rap_release(pool));   /* only an explicit release gives chunks back */
  TU_EXPECT(f, allocation_count, 0);
  TU_EXPECT(pool, chunk_count, 0);
  RAP_CHECK_OK(rap_fault_configure(f, "reset"));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, CoalesceSurvivesAFailingParent) {
  rap_manager *rm = tu_manager();
  rap_allocator *f = fault_over_parent(rm, param);
  rap_allocator *pool = one_per_chunk(rm, param, "f", "blocks_releasable:2");
  void *b[3];
  alloc_chunks(pool, b, 3);
  RAP_CHECK_OK(rap_fault_configure(f, "fail_next=1"));
  release_block(pool, b[0]);
  release_block(pool, b[1]);   /* fires: gives two chunks back, cannot take the merged one */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, CHUNK4K);
  RAP_CHECK_EQ(s.actual_bytes, tu_stats(f).current_bytes);
  RAP_CHECK(tu_intact(b[2], 4096, 2));
  void *again = tu_alloc(pool, 4096);   /* the parent works again: the pool grows */
  TU_EXPECT(pool, chunk_count, 2);
  release_block(pool, again);
  release_block(pool, b[2]);
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, actual_bytes, CHUNK(8192));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolHeuristic, BadHeuristicsAreRefused) {
  static const char *const bad[] = {
      "heuristic=percent_releasable:101", "heuristic=percent_releasable_hwm:1000",
      "heuristic=blocks_releasable:0",    "heuristic=blocks_releasable_hwm:0",
      "heuristic=sometimes:5",            "heuristic=percent_releasable",
      "heuristic=percent_releasable:",    "heuristic=percent_releasable:7x",
      "heuristic=blocks_releasable:-1",   "heuristic=percent_releasable:+5",
      "heuristic=:50",                    "heuristic=",
      "heuristic=nevermore",              "heuristic=percent:50",
      "heuristic=blocks_releasable:18446744073709551616",
      "heuristic=percent_releasable:99999999999999999999999",
  };
  rap_manager *rm = tu_manager();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rap_allocator *pool = (rap_allocator *)&rm;   /* untouched on error */
    RAP_CHECK_STATUS(rap_allocator_make(rm, "pool", param->strategy, "HOST", bad[i], &pool),
                     RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), "heuristic");
    RAP_CHECK(pool == (rap_allocator *)&rm);
    RAP_CHECK_STATUS(rap_allocator_get(rm, "pool", &pool), RAP_ERR_NOT_FOUND);
  }
  static const char *const good[] = {
      "heuristic=never", "heuristic=percent_releasable:0", "heuristic=percent_releasable:100",
      "heuristic=percent_releasable_hwm:50", "heuristic=blocks_releasable:1",
      "heuristic=blocks_releasable_hwm:7"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, good[i]);
    RAP_CHECK_OK(rap_allocator_destroy(pool));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
