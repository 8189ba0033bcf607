/* test_dynamic_pool_list.c — what only DynamicPoolList promises: best fit over an address-ordered
 * free list. Given free holes of several sizes a request takes the smallest hole that fits, and of
 * equal holes the one at the lowest address; the list stays in address order through splits and
 * merges (rap_allocator_check walks it). Behaviours shared with QuickPool are in
 * test_quick_pool*.c, which run over both strategies.
 */
#include "test_util.h"

/* Carves holes of the given sizes (each followed by a 256-byte separator that stays live) from one
 * chunk and frees the holes, the highest address first. */
static void make_holes(rap_allocator *pool, const size_t *sizes, char **holes, char **seps, size_t n) {
  for (size_t i = 0; i < n; i++) {
    holes[i] = tu_alloc(pool, sizes[i]);
    seps[i] = tu_alloc(pool, 1);
    if (i > 0) RAP_CHECK(holes[i] == seps[i - 1] + 256);
  }
  for (size_t i = n; i-- > 0;) RAP_CHECK_OK(rap_deallocate(pool, holes[i], NULL));
  TU_EXPECT(pool, block_count, 2 * n + 1);   /* holes, separators and the rest of the chunk */
  TU_CHECK(pool);
}

RAP_TEST(DynamicPoolList, BestFitTakesTheSmallestHoleThatFits) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool =
      tu_make(rm, "pool", "DynamicPoolList", "HOST", "initial_size=256KiB heuristic=never");
  /* Holes in address order: 12 KiB, 4 KiB, 8 KiB; the rest of the chunk is larger than all. */
  static const size_t sizes[] = {12288, 4096, 8192};
  char *h[3], *s[3];
  make_holes(pool, sizes, h, s, 3);
  size_t rest = 256 * 1024 - 12288 - 4096 - 8192 - 3 * 256;
  TU_EXPECT(pool, largest_free_block, rest);

  char *a = tu_alloc(pool, 3000);   /* 3072: fits all three, the 4 KiB hole is the smallest */
  RAP_CHECK(a == h[1]);
  TU_EXPECT(pool, block_count, 8);   /* split: 1 KiB of the hole stays free */
  char *b = tu_alloc(pool, 5000);   /* 5120: the 4 KiB remainder no longer fits; 8 KiB does */
  RAP_CHECK(b == h[2]);
  char *c = tu_alloc(pool, 1024);   /* exactly the 1 KiB left of the 4 KiB hole */
  RAP_CHECK(c == h[1] + 3072);
  char *d = tu_alloc(pool, 9000);   /* 9216: only the 12 KiB hole and the rest fit */
  RAP_CHECK(d == h[0]);
  /* Two 3 KiB remainders now, of the 12 KiB and of the 8 KiB hole: equal sizes, lower first. */
  char *e = tu_alloc(pool, 3072);
  RAP_CHECK(e == h[0] + 9216);
  char *f = tu_alloc(pool, 3072);
  RAP_CHECK(f == h[2] + 5120);
  TU_EXPECT(pool, largest_free_block, rest);   /* the rest of the chunk was never touched */
  TU_EXPECT(pool, free_bytes, rest);
  TU_CHECK(pool);

  void *all[] = {a, b, c, d, e, f, s[0], s[1], s[2]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    RAP_CHECK_OK(rap_deallocate(pool, all[i], NULL));
    TU_CHECK(pool);   /* the list stays in address order, neighbours merged */
  }
  TU_EXPECT(pool, block_count, 1);
  TU_EXPECT(pool, largest_free_block, 256 * 1024);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(DynamicPoolList, EqualHolesAreTakenInAddressOrder) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool =
      tu_make(rm, "pool", "DynamicPoolList", "HOST", "initial_size=256KiB heuristic=never");
  static const size_t sizes[] = {2048, 6144, 2048, 2048, 6144};
  char *h[5], *s[5];
  make_holes(pool, sizes, h, s, 5);
  /* Freed highest first, the holes are still found lowest address first. */
  char *x[3];
  for (int i = 0; i < 3; i++) x[i] = tu_alloc(pool, 2048);
  RAP_CHECK(x[0] == h[0] && x[1] == h[2] && x[2] == h[3]);
  char *y = tu_alloc(pool, 2048);   /* no 2 KiB hole left: the lowest 6 KiB hole, split */
  RAP_CHECK(y == h[1]);
  char *z = tu_alloc(pool, 4096);   /* its 4 KiB remainder beats the untouched 6 KiB hole */
  RAP_CHECK(z == h[1] + 2048);
  RAP_CHECK_OK(rap_deallocate(pool, x[2], NULL));
  RAP_CHECK_OK(rap_deallocate(pool, x[0], NULL));
  char *w = tu_alloc(pool, 1);      /* two 2 KiB holes again: the lower one */
  RAP_CHECK(w == h[0]);
  TU_CHECK(pool);
  void *all[] = {x[1], y, z, w, s[0], s[1], s[2], s[3], s[4]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    RAP_CHECK_OK(rap_deallocate(pool, all[i], NULL));
  TU_EXPECT(pool, block_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Many holes of random sizes: every request gets exactly the block a brute-force best fit over a
 * model of the free holes names (the smallest that fits, lowest address among equals). A hole that
 * is used in part keeps its remainder free at its end, between the new block and a separator. */
RAP_TEST(DynamicPoolList, BestFitAgainstBruteForce) {
  enum { N = 200, REQUESTS = 150 };
  rap_manager *rm = tu_manager();
  rap_allocator *pool =
      tu_make(rm, "pool", "DynamicPoolList", "HOST", "initial_size=4MiB heuristic=never");
  char *hole[N], *sep[N], *seg[N], *live[N + REQUESTS];
  size_t left[N], nlive = 0;
  uint64_t rng = 42;
  for (int i = 0; i < N; i++) {
    left[i] = 256 * (1 + tu_rand(&rng) % 40);
    hole[i] = tu_alloc(pool, left[i]);
    sep[i] = tu_alloc(pool, 1);
    seg[i] = hole[i];
  }
  for (int i = N - 1; i >= 0; i--) {   /* free about two holes in three, highest address first */
    if (tu_rand(&rng) % 3 != 0) RAP_CHECK_OK(rap_deallocate(pool, hole[i], NULL));
    else live[nlive++] = hole[i], left[i] = 0;
  }
  for (int k = 0; k < REQUESTS; k++) {
    size_t want = 256 * (1 + tu_rand(&rng) % 40);
    int best = -1;
    for (int i = 0; i < N; i++)   /* ascending addresses: a tie keeps the lower one */
      if (left[i] >= want && (best < 0 || left[i] < left[best])) best = i;
    char *p = tu_alloc(pool, want);
    live[nlive++] = p;
    if (best < 0) {
      RAP_CHECK(p > sep[N - 1]);   /* no hole fits: the rest of the chunk */
      continue;
    }
    RAP_CHECK(p == seg[best]);
    seg[best] += want;
    left[best] -= want;
  }
  TU_CHECK(pool);
  for (size_t i = 0; i < nlive; i++) RAP_CHECK_OK(rap_deallocate(pool, live[i], NULL));
  for (int i = 0; i < N; i++) RAP_CHECK_OK(rap_deallocate(pool, sep[i], NULL));
  TU_EXPECT(pool, allocation_count, 0);
  TU_EXPECT(pool, block_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
