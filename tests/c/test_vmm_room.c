/* test_vmm_room.c — how a pool over HostVmm(piece=) keeps to its peak without churning: before it
 * maps past the most it ever mapped, free blocks give back only as many pieces as that mapping
 * needs, largest first (the rest stay mapped for the requests after it); and at the peak a larger
 * free block it maps already serves before the best fit's holes are mapped again. The platform's
 * count of maps and unmaps is the pool's rap_stats maps/unmaps.
 */
#include "test_util.h"

#include <stdio.h>

int    rapi_vmm_calls(rap_allocator *a, size_t *maps, size_t *unmaps);
size_t rapi_vmm_unmapped_inside(rap_allocator *a, void *lo, void *hi);

#define G ((size_t)64 * 1024)   /* granularity and piece */

static rap_allocator *pool_in_pieces(rap_manager *rm) {
  char opts[128];
  snprintf(opts, sizeof opts, "reserve=%zu granularity=%zu piece=%zu", 256 * G, G, G);
  tu_make(rm, "v", "HostVmm", NULL, opts);
  return tu_make(rm, "pool", "ResourceAwarePool", "v", "initial_size=1MiB next_size=64KiB");
}

static size_t held(rap_allocator *pool) { return tu_stats(pool).actual_bytes; }
static size_t unmapped(rap_manager *rm, char *p, size_t n) {
  return rapi_vmm_unmapped_inside(tu_get(rm, "v"), p, p + n);
}

/* The pool's maps and unmaps are its platform's backend calls. */
static void calls_agree(rap_manager *rm, rap_allocator *pool) {
  size_t m = 0, u = 0;
  RAP_CHECK_OK(rapi_vmm_calls(tu_get(rm, "v"), &m, &u));
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.maps, m);
  RAP_CHECK_EQ(s.unmaps, u);
  RAP_CHECK(m > 0);
}

RAP_TEST(VmmRoom, GrowthPastThePeakGivesBackOnlyWhatItNeedsLargestFirst) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pool_in_pieces(rm);
  /* a (1) | h (3) | s (1) | b6 (6) | t (1) | b3 (3) | u (1): the 16-granule chunk is full */
  char *a = tu_alloc(pool, G), *h = tu_alloc(pool, 3 * G), *s = tu_alloc(pool, G);
  char *b6 = tu_alloc(pool, 6 * G), *t = tu_alloc(pool, G), *b3 = tu_alloc(pool, 3 * G);
  char *u = tu_alloc(pool, G);
  RAP_CHECK(u == a + 15 * G);
  RAP_CHECK_OK(rap_deallocate(pool, h, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* h's pieces go: 13 mapped, the peak 16 */
  RAP_CHECK_EQ(held(pool), 13 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b6, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b3, NULL));
  calls_agree(rm, pool);
  size_t unmaps0 = tu_stats(pool).unmaps;
  char *x = tu_alloc(pool, 7 * G);   /* fits no free block: the chunk grows by 7 */
  RAP_CHECK(x == a + 16 * G);
  /* 13 + 7 would pass 16: b6 (the largest) gives its 6 back; b3 stays mapped. */
  RAP_CHECK_EQ(unmapped(rm, b6, 6 * G), 6 * G);
  RAP_CHECK_EQ(unmapped(rm, b3, 3 * G), 0);
  RAP_CHECK_EQ(held(pool), 14 * G);
  RAP_CHECK_EQ(tu_stats(pool).unmaps, unmaps0 + 1);   /* the host unmaps a run of pieces at once */
  calls_agree(rm, pool);
  tu_fill(x, 7 * G, 3);
  TU_CHECK(pool);
  char *again = tu_alloc(pool, 3 * G);   /* b3, mapped: no call */
  RAP_CHECK(again == b3);
  tu_fill(again, 3 * G, 4);
  char *ptrs[] = {a, s, t, u, x, again};
  for (unsigned i = 0; i < 6; i++) RAP_CHECK_OK(rap_deallocate(pool, ptrs[i], NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(VmmRoom, AtThePeakALargerMappedFreeBlockServesBeforeTheBestFitsHoles) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pool_in_pieces(rm);
  /* a (1) | h (3) | s (1) | b6 (6) | t (5): full */
  char *a = tu_alloc(pool, G), *h = tu_alloc(pool, 3 * G), *s = tu_alloc(pool, G);
  char *b6 = tu_alloc(pool, 6 * G), *t = tu_alloc(pool, 5 * G);
  RAP_CHECK(t == a + 11 * G);
  RAP_CHECK_OK(rap_deallocate(pool, h, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* h's pieces go: 13 mapped */
  char *w = tu_alloc(pool, 4 * G);   /* growth: h gives nothing more, the peak is now 17 */
  RAP_CHECK_EQ(held(pool), 17 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_high_watermark, 17 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b6, NULL));
  rap_stats before = tu_stats(pool);
  /* h fits 3 best, but mapping it would pass 17: b6, mapped, serves, and nothing is mapped or
   * unmapped. */
  char *y = tu_alloc(pool, 3 * G);
  RAP_CHECK(y == b6);
  rap_stats after = tu_stats(pool);
  RAP_CHECK_EQ(after.maps, before.maps);
  RAP_CHECK_EQ(after.unmaps, before.unmaps);
  RAP_CHECK_EQ(held(pool), 17 * G);
  RAP_CHECK_EQ(unmapped(rm, h, 3 * G), 3 * G);
  tu_fill(y, 3 * G, 5);
  calls_agree(rm, pool);
  TU_CHECK(pool);
  char *ptrs[] = {a, s, t, w, y};
  for (unsigned i = 0; i < 5; i++) RAP_CHECK_OK(rap_deallocate(pool, ptrs[i], NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Over a plain platform the count is its allocations and frees: QuickPool's chunks. */
RAP_TEST(VmmRoom, MapsCountAPlainPlatformsChunks) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = tu_make(rm, "q", "QuickPool", "HOST", "initial_size=1MiB next_size=1MiB");
  char *p = tu_alloc(pool, 512 * 1024), *q = tu_alloc(pool, 768 * 1024);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.maps, 2);
  RAP_CHECK_EQ(s.unmaps, 0);
  RAP_CHECK_OK(rap_deallocate(pool, q, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).unmaps, 1);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
