/* test_quick_pool.c — the pools' behaviours: chunks, blocks, statistics, alignment, release, and
 * bad input. Every body runs over {QuickPool, DynamicPoolList} x {HOST, Fault} (RAP_TEST_POOLS);
 * heuristics are in test_quick_pool_heuristics.c, out-of-memory and stacking in
 * test_quick_pool_oom.c, DynamicPoolList's own best fit in test_dynamic_pool_list.c.
 *
 * Figures: over a parent of alignment 16 (HOST, or a Fault over it) a pool of alignment 256 asks
 * for usable + 240 bytes a chunk; tu_chunk_on computes that from the parent.
 */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

RAP_TEST_POOLS(PoolBehaviour, Smoke) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=1MiB");
  void *p = tu_alloc(pool, 1000);
  memset(p, 1, 1000);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, FirstChunkIsTakenLazily) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB");
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 0);
  RAP_CHECK_EQ(s.block_count, 0);
  RAP_CHECK_EQ(s.actual_bytes, 0);
  RAP_CHECK_EQ(s.largest_free_block, 0);
  TU_EXPECT(parent, allocation_count, 0);
  TU_CHECK(pool);

  void *p = tu_alloc(pool, 100);
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.block_count, 2);               /* the block and the rest of the chunk */
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 65536, 256));
  RAP_CHECK_EQ(s.actual_high_watermark, tu_chunk_on(parent, 65536, 256));
  RAP_CHECK_EQ(s.current_bytes, 100);
  RAP_CHECK_EQ(s.used_bytes, 256);
  RAP_CHECK_EQ(s.free_bytes, 65536 - 256);
  RAP_CHECK_EQ(s.largest_free_block, 65536 - 256);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 1);
  RAP_CHECK_EQ(s.pending_bytes, 0);
  RAP_CHECK_EQ(s.pending_count, 0);
  TU_EXPECT(parent, allocation_count, 1);
  TU_EXPECT(parent, current_bytes, tu_chunk_on(parent, 65536, 256));
  TU_CHECK(pool);

  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);   /* the default heuristic keeps a lone chunk */
  RAP_CHECK_EQ(s.block_count, 1);
  RAP_CHECK_EQ(s.releasable_bytes, tu_chunk_on(parent, 65536, 256));
  RAP_CHECK_EQ(s.free_bytes, 65536);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.high_watermark, 100);
  TU_EXPECT(parent, allocation_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, ChunksAreMaxOfSettingAndRequest) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool =
      tu_pool_make(rm, param, "pool", NULL, "initial_size=4KiB next_size=8KiB heuristic=never");
  void *a = tu_alloc(pool, 10000);   /* 10240 > initial_size: the first chunk is 10240 */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.block_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 10240, 256));
  RAP_CHECK_EQ(s.largest_free_block, 0);
  void *b = tu_alloc(pool, 100);     /* next_size */
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 10240, 256) + tu_chunk_on(parent, 8192, 256));
  RAP_CHECK_EQ(s.largest_free_block, 8192 - 256);
  void *c = tu_alloc(pool, 20000);   /* larger than next_size */
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 3);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 10240, 256) + tu_chunk_on(parent, 8192, 256) +
                                    tu_chunk_on(parent, 20224, 256));
  RAP_CHECK_EQ(s.actual_bytes, tu_stats(parent).current_bytes);
  RAP_CHECK_EQ(tu_stats(parent).allocation_count, 3);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_CHECK(pool);
  TU_EXPECT(pool, chunk_count, 3);
  TU_EXPECT(pool, releasable_bytes, tu_stats(pool).actual_bytes);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, BlocksSplitAndMerge) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB heuristic=never");
  char *a = tu_alloc(pool, 1024), *b = tu_alloc(pool, 1024), *c = tu_alloc(pool, 1024);
  RAP_CHECK(b == a + 1024 && c == b + 1024);   /* carved in address order from one chunk */
  TU_EXPECT(pool, block_count, 4);
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, largest_free_block, 65536 - 3072);
  TU_CHECK(pool);

  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));   /* neighbours used: nothing to merge */
  TU_EXPECT(pool, block_count, 4);
  TU_EXPECT(pool, free_bytes, 65536 - 2048);
  TU_CHECK(pool);
  void *again = tu_alloc(pool, 1000);            /* an exact fit goes back into the hole */
  RAP_CHECK(again == b);
  TU_EXPECT(pool, block_count, 4);
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  TU_CHECK(pool);

  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));   /* merges with b */
  TU_EXPECT(pool, block_count, 3);
  TU_EXPECT(pool, largest_free_block, 65536 - 3072);
  TU_EXPECT(pool, free_bytes, 65536 - 1024);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));   /* merges a+b, c and the rest */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.block_count, 1);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.largest_free_block, 65536);
  RAP_CHECK_EQ(s.releasable_bytes, tu_chunk_on(parent, 65536, 256));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Which hole a request reuses is where the strategies legitimately differ. Holes of 20480, 16640
 * and 16896 bytes lie in address order before the rest of the chunk, freed in that order. For
 * requests of 16640 bytes DynamicPoolList (best fit) takes the exact hole, then the 16896 one.
 * QuickPool (good fit) looks first at the head of the request's own size class, which holds both
 * 16640 and 16896 with the last freed, 16896, at its head: it takes that one (leaving 256 bytes
 * free), then the 16640 hole. With its class empty, the third request rounds up to the next class
 * and both take the 20 KiB hole. */
RAP_TEST_POOLS(PoolBehaviour, ReuseFollowsTheFitPolicy) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=256KiB heuristic=never");
  char *h1 = tu_alloc(pool, 20480), *s1 = tu_alloc(pool, 1);
  char *h2 = tu_alloc(pool, 16640), *s2 = tu_alloc(pool, 1);
  char *h3 = tu_alloc(pool, 16896), *s3 = tu_alloc(pool, 1);
  RAP_CHECK(h2 == s1 + 256 && h3 == s2 + 256);
  RAP_CHECK_OK(rap_deallocate(pool, h1, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, h2, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, h3, NULL));
  TU_EXPECT(pool, block_count, 7);   /* three holes, three separators, the rest */
  TU_CHECK(pool);
  const size_t chunk = 256 * 1024, rest = chunk - 20480 - 16640 - 16896 - 3 * 256;
  char *x1 = tu_alloc(pool, 16640);
  RAP_CHECK(x1 == (param->best_fit ? h2 : h3));
  TU_EXPECT(pool, block_count, param->best_fit ? 7 : 8);   /* good fit split 256 bytes off */
  TU_EXPECT(pool, free_bytes, chunk - 3 * 256 - 16640);    /* the same bytes, either way */
  char *x2 = tu_alloc(pool, 16640);
  RAP_CHECK(x2 == (param->best_fit ? h3 : h2));
  TU_EXPECT(pool, block_count, 8);
  char *x3 = tu_alloc(pool, 16640);
  RAP_CHECK(x3 == h1);
  TU_EXPECT(pool, block_count, 9);
  TU_EXPECT(pool, largest_free_block, rest);   /* the rest of the chunk was never touched */
  TU_EXPECT(pool, free_bytes, rest + 256 + 3840);
  TU_CHECK(pool);
  void *all[] = {x1, x2, x3, s1, s2, s3};
  for (size_t i = 0; i < 6; i++) RAP_CHECK_OK(rap_deallocate(pool, all[i], NULL));
  TU_EXPECT(pool, block_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, MergeWithTheFollowingFreeBlock) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB heuristic=never");
  char *a = tu_alloc(pool, 1024), *b = tu_alloc(pool, 2048), *c = tu_alloc(pool, 512);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));   /* merges forward with the rest of the chunk */
  TU_EXPECT(pool, block_count, 3);
  TU_EXPECT(pool, largest_free_block, 65536 - 3072);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));   /* alone: b is used */
  TU_EXPECT(pool, block_count, 3);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));   /* merges both ways */
  TU_EXPECT(pool, block_count, 1);
  TU_EXPECT(pool, free_bytes, 65536);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, SizesAndHighWatermarks) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB heuristic=never");
  void *a = tu_alloc(pool, 100), *b = tu_alloc(pool, 1000), *c = tu_alloc(pool, 5000);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 6100);
  RAP_CHECK_EQ(s.high_watermark, 6100);
  RAP_CHECK_EQ(s.used_bytes, 256 + 1024 + 5120);
  RAP_CHECK_EQ(s.allocation_count, 3);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  void *d = tu_alloc(pool, 50);
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 5150);
  RAP_CHECK_EQ(s.high_watermark, 6100);
  RAP_CHECK_EQ(s.used_bytes, 256 + 5120 + 256);
  void *e = tu_alloc(pool, 2000);
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 7150);
  RAP_CHECK_EQ(s.high_watermark, 7150);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 65536, 256));
  RAP_CHECK_EQ(s.actual_high_watermark, tu_chunk_on(parent, 65536, 256));
  TU_CHECK(pool);

  void *big = tu_alloc(pool, 128 * 1024);   /* a second chunk of next_size (default 1MiB) */
  s = tu_stats(pool);
  size_t peak = tu_chunk_on(parent, 65536, 256) + tu_chunk_on(parent, 1 << 20, 256);
  RAP_CHECK_EQ(s.chunk_count, 2);
  RAP_CHECK_EQ(s.actual_bytes, peak);
  RAP_CHECK_EQ(s.actual_high_watermark, peak);
  RAP_CHECK_EQ(s.high_watermark, 7150 + 128 * 1024);
  RAP_CHECK_OK(rap_deallocate(pool, big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, tu_chunk_on(parent, 65536, 256));
  RAP_CHECK_EQ(s.actual_high_watermark, peak);
  RAP_CHECK_EQ(s.high_watermark, 7150 + 128 * 1024);
  RAP_CHECK_EQ(s.current_bytes, 7150);
  TU_CHECK(pool);
  rap_resource *host_r;
  rap_stats per;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK_OK(rap_allocator_resource_stats(pool, host_r, &per));
  TU_STATS_EQ(per, s);   /* a pool without resources hands every block to the host resource */
  void *ptrs[] = {a, c, d, e};
  for (size_t i = 0; i < 4; i++) RAP_CHECK_OK(rap_deallocate(pool, ptrs[i], NULL));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- many random sizes ---------------------------------------------------------------------- */

typedef struct span {
  char *p;
  size_t n;
  unsigned seed;
} span;

static int by_address(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->p < b->p ? -1 : a->p > b->p;
}

/* Every live span aligned, filled with its own pattern, and no two overlapping. */
static void check_spans(span *live, size_t count, size_t alignment) {
  span *sorted = malloc(count * sizeof *sorted);
  RAP_CHECK(sorted != NULL);
  size_t m = 0;
  for (size_t i = 0; i < count; i++)
    if (live[i].p) sorted[m++] = live[i];
  qsort(sorted, m, sizeof *sorted, by_address);
  bool ok = true;
  for (size_t i = 0; i < m && ok; i++) {
    ok = (uintptr_t)sorted[i].p % alignment == 0 && tu_intact(sorted[i].p, sorted[i].n, sorted[i].seed);
    size_t extent = tu_align(sorted[i].n, alignment);
    if (ok && i + 1 < m) ok = sorted[i].p + extent <= sorted[i + 1].p;
  }
  free(sorted);
  RAP_CHECK(ok);
}

static void random_sizes(const tu_pool *param, size_t alignment) {
  enum { N = 1000 };
  char opts[128];
  snprintf(opts, sizeof opts, "initial_size=256KiB next_size=128KiB alignment=%zu", alignment);
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, opts);
  span *live = calloc(N, sizeof *live);
  RAP_CHECK(live != NULL);
  uint64_t rng = 0x9e3779b97f4a7c15u ^ alignment;
  size_t requested = 0, aligned = 0;
  for (unsigned i = 0; i < N; i++) {
    size_t n = tu_rand(&rng) % 7 == 0 ? 0 : (size_t)(tu_rand(&rng) % 20000);
    live[i] = (span){tu_alloc(pool, n), n, i};
    tu_fill(live[i].p, n, i);
    requested += n;
    aligned += tu_align(n, alignment);
  }
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, requested);
  RAP_CHECK_EQ(s.high_watermark, requested);
  RAP_CHECK_EQ(s.used_bytes, aligned);
  RAP_CHECK_EQ(s.allocation_count, N);
  RAP_CHECK_EQ(s.actual_bytes, tu_stats(parent).current_bytes);
  RAP_CHECK_EQ(s.chunk_count, tu_stats(parent).allocation_count);
  RAP_CHECK(s.actual_bytes >= aligned);
  TU_CHECK(pool);
  check_spans(live, N, alignment);

  for (unsigned i = 0; i < N; i += 2) {   /* free half, then refill with new sizes */
    RAP_CHECK_OK(rap_deallocate(pool, live[i].p, NULL));
    live[i].p = NULL;
  }
  TU_CHECK(pool);
  for (unsigned i = 0; i < N; i += 2) {
    size_t n = (size_t)(tu_rand(&rng) % 9000);
    live[i] = (span){tu_alloc(pool, n), n, i + N};
    tu_fill(live[i].p, n, i + N);
  }
  TU_CHECK(pool);
  check_spans(live, N, alignment);
  for (unsigned i = 0; i < N; i++) RAP_CHECK_OK(rap_deallocate(pool, live[i].p, NULL));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.block_count, s.chunk_count);   /* every chunk merged back into one block */
  RAP_CHECK_EQ(s.releasable_bytes, s.actual_bytes);
  TU_CHECK(pool);
  free(live);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, RandomSizesAlignment1) { random_sizes(param, 1); }
RAP_TEST_POOLS(PoolBehaviour, RandomSizesAlignment16) { random_sizes(param, 16); }
RAP_TEST_POOLS(PoolBehaviour, RandomSizesAlignment256) { random_sizes(param, 256); }
RAP_TEST_POOLS(PoolBehaviour, RandomSizesAlignment4096) { random_sizes(param, 4096); }

RAP_TEST_POOLS(PoolBehaviour, ChunkPaddingFollowsAlignment) {
  static const size_t aligns[] = {16, 64, 256, 4096, 65536};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    char opts[96];
    snprintf(opts, sizeof opts, "initial_size=128KiB alignment=%zu", aligns[i]);
    rap_manager *rm = tu_manager();
    rap_allocator *parent = tu_parent(rm, param);
    rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, opts);
    void *p = tu_alloc(pool, 1);
    RAP_CHECK((uintptr_t)p % aligns[i] == 0);
    TU_EXPECT(pool, actual_bytes, tu_chunk_on(parent, 128 * 1024, aligns[i]));
    TU_EXPECT(pool, used_bytes, aligns[i]);
    TU_EXPECT(pool, largest_free_block, 128 * 1024 - aligns[i]);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* ---- release and the largest free block ------------------------------------------------------ */

RAP_TEST_POOLS(PoolBehaviour, ReleaseFreesOnlyWhollyFreeChunks) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool =
      tu_pool_make(rm, param, "pool", NULL, "initial_size=4KiB next_size=4KiB heuristic=never");
  const size_t chunk = tu_chunk_on(parent, 4096, 256);
  void *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096), *c = tu_alloc(pool, 4096);
  tu_fill(a, 4096, 1);
  tu_fill(c, 4096, 3);
  void *e = tu_alloc(pool, 1000), *f = tu_alloc(pool, 1000);   /* a fourth chunk, shared */
  tu_fill(f, 1000, 6);
  TU_EXPECT(pool, chunk_count, 4);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, e, NULL));
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 4);   /* never: freeing alone gives nothing back */
  RAP_CHECK_EQ(s.releasable_bytes, chunk);
  RAP_CHECK_EQ(s.actual_bytes, 4 * chunk);
  TU_CHECK(pool);

  RAP_CHECK_OK(rap_release(pool));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 3);   /* b's chunk went; e's chunk still holds f */
  RAP_CHECK_EQ(s.actual_bytes, 3 * chunk);
  RAP_CHECK_EQ(s.actual_high_watermark, 4 * chunk);
  RAP_CHECK_EQ(s.releasable_bytes, 0);
  RAP_CHECK_EQ(s.free_bytes, 4096 - 1024);
  RAP_CHECK_EQ(tu_stats(parent).allocation_count, 3);
  RAP_CHECK_EQ(tu_stats(parent).current_bytes, 3 * chunk);
  RAP_CHECK(tu_intact(a, 4096, 1) && tu_intact(c, 4096, 3) && tu_intact(f, 1000, 6));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_release(pool));   /* nothing left to give: no change */
  TU_EXPECT(pool, chunk_count, 3);

  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, f, NULL));
  RAP_CHECK_OK(rap_release(pool));
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 0);
  RAP_CHECK_EQ(s.block_count, 0);
  RAP_CHECK_EQ(s.actual_bytes, 0);
  RAP_CHECK_EQ(tu_stats(parent).allocation_count, 0);
  TU_CHECK(pool);
  void *g = tu_alloc(pool, 10);   /* the pool grows again from nothing */
  TU_EXPECT(pool, chunk_count, 1);
  TU_EXPECT(pool, actual_bytes, chunk);
  RAP_CHECK_OK(rap_deallocate(pool, g, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, LargestFreeBlockShrinksAndRecovers) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB heuristic=never");
  TU_EXPECT(pool, largest_free_block, 0);
  void *a = tu_alloc(pool, 1000);
  TU_EXPECT(pool, largest_free_block, 65536 - 1024);
  void *b = tu_alloc(pool, 30000);   /* 30208 */
  TU_EXPECT(pool, largest_free_block, 65536 - 1024 - 30208);
  void *c = tu_alloc(pool, 65536 - 1024 - 30208);   /* takes the rest exactly */
  TU_EXPECT(pool, largest_free_block, 0);
  TU_EXPECT(pool, free_bytes, 0);
  TU_EXPECT(pool, chunk_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  TU_EXPECT(pool, largest_free_block, 1024);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_EXPECT(pool, largest_free_block, 65536 - 1024 - 30208);
  TU_EXPECT(pool, free_bytes, 65536 - 30208);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  TU_EXPECT(pool, largest_free_block, 65536);
  TU_EXPECT(pool, block_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, ZeroBytesGivesUniqueBlocks) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB alignment=4096");
  void *p[3];
  for (int i = 0; i < 3; i++) {
    p[i] = tu_alloc(pool, 0);
    RAP_CHECK((uintptr_t)p[i] % 4096 == 0);
  }
  RAP_CHECK(p[0] != p[1] && p[1] != p[2] && p[0] != p[2]);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes, 3 * 4096);
  RAP_CHECK_EQ(s.allocation_count, 3);
  TU_CHECK(pool);
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p[1], &found));
  RAP_CHECK(found == pool);
  for (int i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  RAP_CHECK_STATUS(rap_deallocate(pool, p[1], NULL), RAP_ERR_UNKNOWN_POINTER);
  TU_EXPECT(pool, allocation_count, 0);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- bad input ---------------------------------------------------------------------------- */

/* The call fails with UNKNOWN_POINTER and a sentence containing `why`, and changes nothing. */
static void refused(rap_allocator *pool, void *ptr, const char *why) {
  rap_stats before = tu_stats(pool);
  RAP_CHECK_STATUS(rap_deallocate(pool, ptr, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STR(rap_last_error(), why);
  RAP_CHECK_STR(rap_last_error(), "pool");
  rap_stats after = tu_stats(pool);
  TU_STATS_EQ(before, after);
  TU_CHECK(pool);
}

RAP_TEST_POOLS(PoolBehaviour, BadPointersAreRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *parent = tu_parent(rm, param);
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB heuristic=never");
  rap_allocator *other = tu_pool_make(rm, param, "other", NULL, "initial_size=64KiB");
  char *a = tu_alloc(pool, 1000), *b = tu_alloc(pool, 1000), *c = tu_alloc(pool, 1000);
  tu_fill(a, 1000, 1);
  tu_fill(c, 1000, 3);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  refused(pool, b, "double free");
  refused(pool, a + 16, "bytes into");
  refused(pool, b + 256, "bytes into");   /* inside a free block */
  refused(pool, c + 999, "bytes into");
  void *h = tu_alloc(parent, 64);
  refused(pool, h, "not handed out");
  void *o = tu_alloc(other, 64);
  refused(pool, o, "not handed out");
  int local;
  refused(pool, &local, "not handed out");
  RAP_CHECK_OK(rap_deallocate(pool, NULL, NULL));
  RAP_CHECK(tu_intact(a, 1000, 1) && tu_intact(c, 1000, 3));
  /* The other pool was not touched either, and the right owner still frees its block. */
  RAP_CHECK_STATUS(rap_deallocate(other, a, NULL), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_OK(rap_deallocate(other, o, NULL));
  RAP_CHECK_OK(rap_deallocate(parent, h, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_CHECK(pool);
  TU_CHECK(other);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, HugeRequestsAreOutOfMemory) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB");
  void *keep = tu_alloc(pool, 100);   /* a live block, so no chunk is wholly free */
  rap_stats before = tu_stats(pool);
  static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 255, SIZE_MAX / 2, SIZE_MAX / 4 + 1,
                                 SIZE_MAX / 4};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = (void *)&before;   /* out is untouched on error */
    RAP_CHECK_STATUS(rap_allocate(pool, &p, sizes[i], NULL), RAP_ERR_NOMEM);
    RAP_CHECK(p == (void *)&before);
    RAP_CHECK(strlen(rap_last_error()) > 0);
    rap_stats after = tu_stats(pool);
    TU_STATS_EQ(before, after);
    TU_CHECK(pool);
  }
  void *p = tu_alloc(pool, 100);   /* still works */
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, keep, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, NullArgumentsAreInvalid) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB");
  void *p = NULL;
  rap_stats s;
  RAP_CHECK_STATUS(rap_allocate(NULL, &p, 8, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "rap_allocate");
  RAP_CHECK_STATUS(rap_allocate(pool, NULL, 8, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "out");
  RAP_CHECK_STATUS(rap_deallocate(NULL, p, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_release(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_check(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_stats(NULL, &s), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_stats(pool, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_destroy(NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_allocator_find(rm, NULL, &pool), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_allocator_find(NULL, &s, &pool), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_record_resource(pool, &s, NULL), RAP_ERR_INVALID);
  TU_EXPECT(pool, chunk_count, 0);   /* nothing above reached the pool */
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_POOLS(PoolBehaviour, ResourceQueriesWithoutTracking) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL, "initial_size=64KiB");
  rap_resource *host_r = NULL, *r = NULL;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK(strcmp(rap_resource_kind(host_r), "host") == 0);
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, 10, host_r));
  RAP_CHECK_OK(rap_pointer_resource(pool, p, &r));
  RAP_CHECK(r == host_r);
  RAP_CHECK_STATUS(rap_pointer_resource(pool, (char *)p + 1, &r), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_record_resource(pool, p, host_r), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), param->strategy);
  RAP_CHECK_STATUS(rap_resource_destroy(host_r), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_deallocate(pool, p, host_r));
  RAP_CHECK_STATUS(rap_pointer_resource(pool, p, &r), RAP_ERR_UNKNOWN_POINTER);
  TU_EXPECT(pool, allocation_count, 0);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- max_split ------------------------------------------------------------------------------- */

/* A freed 8 MiB block stays whole for the next 8 MiB request: a 64 KiB request grows a chunk of
 * its own rather than cut it (max_split=2MiB), and a 4 MiB request (at least max_split, but more
 * than next_size smaller than the block) does too; 7.5 MiB takes it. A live block beside it keeps
 * its chunk (8.5 MiB, no room beside them) from going back on a miss (a wholly free chunk would,
 * as always). Without the option
 * the small request cuts the large block. */
RAP_TEST_POOLS(PoolBehaviour, MaxSplitKeepsALargeFreeBlockWhole) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_pool_make(rm, param, "pool", NULL,
                                     "initial_size=8704KiB, next_size=1MiB, heuristic=never, max_split=2MiB");
  rap_allocator *plain = tu_pool_make(rm, param, "plain", NULL,
                                      "initial_size=8704KiB, next_size=1MiB, heuristic=never");
  size_t MiB = (size_t)1 << 20;
  void *big = tu_alloc(pool, 8 * MiB);
  void *pin = tu_alloc(pool, 512 * 1024);
  RAP_CHECK_OK(rap_deallocate(pool, big, NULL));
  void *small = tu_alloc(pool, 64 * 1024);
  RAP_CHECK((char *)small < (char *)big || (char *)small >= (char *)big + 8 * MiB);
  TU_EXPECT(pool, chunk_count, 2);
  void *mid = tu_alloc(pool, 4 * MiB);
  RAP_CHECK((char *)mid < (char *)big || (char *)mid >= (char *)big + 8 * MiB);
  TU_EXPECT(pool, chunk_count, 3);
  void *again = tu_alloc(pool, 8 * MiB - MiB / 2);
  RAP_CHECK(again == big);
  TU_EXPECT(pool, chunk_count, 3);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, mid, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, small, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, pin, NULL));
  TU_CHECK(pool);

  void *pbig = tu_alloc(plain, 8 * MiB);
  void *ppin = tu_alloc(plain, 512 * 1024);
  RAP_CHECK_OK(rap_deallocate(plain, pbig, NULL));
  void *psmall = tu_alloc(plain, 64 * 1024);
  RAP_CHECK((char *)psmall >= (char *)pbig && (char *)psmall < (char *)pbig + 8 * MiB);
  TU_EXPECT(plain, chunk_count, 1);
  RAP_CHECK_OK(rap_deallocate(plain, psmall, NULL));
  RAP_CHECK_OK(rap_deallocate(plain, ppin, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A parent with no room left for a small request's chunk: the pool gives back what is wholly
 * free (the large block's chunk) and asks again, as on any failed growth, and the request is
 * served. */
RAP_TEST_POOLS(PoolBehaviour, MaxSplitStillServesWhenTheParentIsFull) {
  rap_manager *rm = tu_manager();
  size_t MiB = (size_t)1 << 20;
  rap_allocator *cap = tu_make(rm, "cap", "SizeLimiter", rap_allocator_name(tu_parent(rm, param)),
                               "limit=9MiB");
  rap_allocator *pool = tu_pool_make(rm, param, "pool", "cap",
                                     "initial_size=8MiB, next_size=2MiB, heuristic=never, max_split=2MiB");
  void *big = tu_alloc(pool, 8 * MiB);
  RAP_CHECK_OK(rap_deallocate(pool, big, NULL));
  void *small = tu_alloc(pool, 64 * 1024);   /* 8 MiB + 2 MiB would pass the limit */
  RAP_CHECK(small != NULL);
  TU_EXPECT(pool, chunk_count, 1);   /* the 8 MiB chunk went back */
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, small, NULL));
  (void)cap;
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Bad input: 0, a word, and a pool over a platform whose chunk grows in place. */
RAP_TEST(PoolBadInput, MaxSplitRefusals) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_EQ(rap_allocator_make(rm, "z", "QuickPool", "HOST", "max_split=0", &a), RAP_ERR_INVALID);
  RAP_CHECK(strstr(rap_last_error(), "max_split") != NULL);
  RAP_CHECK_EQ(rap_allocator_make(rm, "w", "QuickPool", "HOST", "max_split=big", &a), RAP_ERR_INVALID);
  RAP_CHECK_EQ(rap_allocator_make(rm, "v", "ResourceAwarePool", "HOST_VMM", "max_split=64MiB", &a),
               RAP_ERR_INVALID);
  RAP_CHECK(strstr(rap_last_error(), "grows in place") != NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
