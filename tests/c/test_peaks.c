/* test_peaks.c — rap_allocator_reset_peaks: the high-water marks start again from the current
 * values, through wrappers, per resource, and a strategy without the method says so. */
#include "test_util.h"

#include <rap/strategy.h>
#include <stdbool.h>
#include <string.h>

static rap_stats stats_of(rap_allocator *a) {
  rap_stats s;
  memset(&s, 0xff, sizeof s);
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s;
}

/* Takes big, frees it, keeps small: peaks are big's until the reset, small's after it. A
 * ThreadCache's marks are its parent's, which also count the blocks its threads keep cached. */
static void peak_then_reset(rap_allocator *a, rap_resource *r, size_t big, size_t small) {
  bool cached = strcmp(rap_allocator_strategy(a), "ThreadCache") == 0;
  void *p, *q;
  RAP_CHECK_OK(rap_allocate(a, &p, big, r));
  RAP_CHECK_OK(rap_allocate(a, &q, small, r));
  RAP_CHECK_OK(rap_deallocate(a, p, r));
  rap_stats s = stats_of(a);
  RAP_CHECK_EQ(s.current_bytes, small);
  RAP_CHECK(cached ? s.high_watermark >= big + small : s.high_watermark == big + small);
  size_t held = s.actual_bytes;
  RAP_CHECK(s.actual_high_watermark >= held);
  RAP_CHECK_OK(rap_allocator_reset_peaks(a));
  s = stats_of(a);
  RAP_CHECK_EQ(s.high_watermark, small + s.cached_bytes);
  RAP_CHECK_EQ(s.actual_high_watermark, s.actual_bytes);
  RAP_CHECK_EQ(s.actual_bytes, held);   /* nothing given back or taken */
  void *t;
  RAP_CHECK_OK(rap_allocate(a, &t, 3 * small, r));   /* the marks move on from there */
  if (!cached) RAP_CHECK_EQ(stats_of(a).high_watermark, 4 * small);
  RAP_CHECK_OK(rap_deallocate(a, t, r));
  RAP_CHECK_OK(rap_deallocate(a, q, r));
  RAP_CHECK_OK(rap_allocator_check(a));
}

RAP_TEST(Peaks, ResetInEveryStrategyThatKeepsThem) {
  static const char *const specs[] = {
      "HOST",
      "QuickPool(HOST, initial_size=1MiB, next_size=1MiB)",
      "DynamicPoolList(HOST, initial_size=1MiB, next_size=1MiB)",
      "ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB)",
      "ThreadSafe(QuickPool(HOST, initial_size=1MiB))",
      "ThreadCache(ResourceAwarePool(HOST, initial_size=1MiB))",
      "SizeLimiter(QuickPool(HOST), limit=64MiB)",
      "Fault(HOST)",
      "FixedPool(HOST, object_size=4096, objects_per_chunk=64)",
  };
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    rap_manager *rm = tu_manager();
    rap_allocator *a;
    if (strcmp(specs[i], "HOST") == 0) RAP_CHECK_OK(rap_allocator_get(rm, "HOST", &a));
    else RAP_CHECK_OK(rap_allocator_make_spec(rm, "a", specs[i], &a));
    if (strncmp(specs[i], "FixedPool", 9) == 0) {
      void *p[3];
      for (int k = 0; k < 3; k++) RAP_CHECK_OK(rap_allocate(a, &p[k], 4096, NULL));
      RAP_CHECK_OK(rap_deallocate(a, p[0], NULL));
      RAP_CHECK_OK(rap_deallocate(a, p[1], NULL));
      RAP_CHECK_EQ(stats_of(a).high_watermark, 3 * 4096);
      RAP_CHECK_OK(rap_allocator_reset_peaks(a));
      RAP_CHECK_EQ(stats_of(a).high_watermark, 4096);
      RAP_CHECK_OK(rap_deallocate(a, p[2], NULL));
    } else {
      peak_then_reset(a, NULL, 512 * 1024, 4096);
    }
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* A ResourceAwarePool's per-resource marks start again too. */
RAP_TEST(Peaks, ResetPerResource) {
  rap_manager *rm = tu_manager();
  rap_allocator *a;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "a", "ResourceAwarePool(HOST, initial_size=1MiB)", &a));
  rap_resource *q;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *p, *small;
  RAP_CHECK_OK(rap_allocate(a, &p, 200000, q));
  RAP_CHECK_OK(rap_allocate(a, &small, 1000, q));
  RAP_CHECK_OK(rap_deallocate(a, p, q));
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_resource_stats(a, q, &s));
  RAP_CHECK_EQ(s.high_watermark, 201000);
  RAP_CHECK_OK(rap_allocator_reset_peaks(a));
  RAP_CHECK_OK(rap_allocator_resource_stats(a, q, &s));
  RAP_CHECK_EQ(s.high_watermark, 1000);
  RAP_CHECK_EQ(s.current_bytes, 1000);
  RAP_CHECK_OK(rap_deallocate(a, small, q));
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

static int minimal_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)self, (void)state, (void)opts;
  return RAP_OK;
}
static void minimal_fini(rap_allocator *self, void *state) { (void)self, (void)state; }
static int minimal_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  (void)state, (void)out, (void)bytes, (void)r;
  return RAP_ERR_NOMEM;
}
static int minimal_deallocate(void *state, void *ptr, rap_resource *r) {
  (void)state, (void)ptr, (void)r;
  return RAP_ERR_INVALID;
}
static int minimal_stats(void *state, rap_stats *out) {
  (void)state;
  memset(out, 0, sizeof *out);
  return RAP_OK;
}
static int minimal_owns(void *state, const void *ptr) {
  (void)state, (void)ptr;
  return 0;
}

/* A strategy whose table has no reset_peaks (or is of an older version) answers UNSUPPORTED. */
RAP_TEST(Peaks, StrategyWithoutTheMethodSaysSo) {
  RAP_CHECK(RAP_STRATEGY_VERSION >= 3);
  rap_strategy s = {.version = 2, .name = "NoPeaks", .state_size = 8, .init = minimal_init,
                    .fini = minimal_fini, .allocate = minimal_allocate,
                    .deallocate = minimal_deallocate, .stats = minimal_stats, .owns = minimal_owns};
  rap_manager *rm = tu_manager();
  RAP_CHECK_OK(rap_strategy_register(rm, &s));
  rap_allocator *a;
  RAP_CHECK_OK(rap_allocator_make(rm, "a", "NoPeaks", NULL, NULL, &a));
  RAP_CHECK_STATUS(rap_allocator_reset_peaks(a), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "the NoPeaks strategy keeps no high-water marks");
  rap_allocator *ts;   /* a wrapper passes the answer on */
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ts", "ThreadSafe(a)", &ts));
  RAP_CHECK_STATUS(rap_allocator_reset_peaks(ts), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STATUS(rap_allocator_reset_peaks(NULL), RAP_ERR_INVALID);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
