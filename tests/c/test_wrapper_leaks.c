/* test_wrapper_leaks.c — a wrapper's leak check counts what went through it.
 *
 * A wrapper straight over a platform (ThreadSafe(HOST), ThreadCache(HOST), SizeLimiter(HOST),
 * Fault(HOST)) shares that platform with every other allocator over it. A QuickPool beside it holds
 * a chunk of the platform; the wrapper, all its blocks freed, has leaked nothing, whichever of the
 * two was made first, and a block that went through the wrapper and was never freed is still
 * reported, naming the wrapper and not the pool.
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

typedef struct wrap_kind {
  const char *label;
  const char *strategy;
  const char *options;
  bool wrapper_first;   /* made before the pool (destroyed after it) */
} wrap_kind;

static const wrap_kind wrappers[] = {
    {"ThreadSafe_after_pool", "ThreadSafe", NULL, false},
    {"ThreadSafe_before_pool", "ThreadSafe", NULL, true},
    {"ThreadCache_after_pool", "ThreadCache", NULL, false},
    {"ThreadCache_before_pool", "ThreadCache", NULL, true},
    {"SizeLimiter_after_pool", "SizeLimiter", "limit=1GiB", false},
    {"SizeLimiter_before_pool", "SizeLimiter", "limit=1GiB", true},
    {"Fault_after_pool", "Fault", NULL, false},
    {"Fault_before_pool", "Fault", NULL, true},
};

static struct {
  int warnings;
  char about_w[512];      /* the last warning naming the wrapper 'w' */
  bool about_pool;        /* a warning named the pool */
} logged;

static void capture(int level, const char *message, void *user) {
  (void)user;
  if (level < RAP_LOG_WARN) return;
  logged.warnings++;
  if (strstr(message, "'w'") != NULL) snprintf(logged.about_w, sizeof logged.about_w, "%s", message);
  if (strstr(message, "'pool'") != NULL) logged.about_pool = true;
}

/* Destroys the manager with its warnings captured; its status. */
static int destroy_captured(rap_manager *rm) {
  memset(&logged, 0, sizeof logged);
  RAP_CHECK_OK(rap_log_set_handler(capture, NULL));
  int st = rap_manager_destroy(rm);
  RAP_CHECK_OK(rap_log_set_handler(NULL, NULL));
  return st;
}

/* The pool and the wrapper over HOST, in the order the kind says. */
static void make_both(rap_manager *rm, const wrap_kind *k, rap_allocator **pool, rap_allocator **w) {
  if (k->wrapper_first) *w = tu_make(rm, "w", k->strategy, "HOST", k->options);
  *pool = tu_make(rm, "pool", "QuickPool", "HOST", "initial_size=1MiB");
  if (!k->wrapper_first) *w = tu_make(rm, "w", k->strategy, "HOST", k->options);
}

/* As reported: one block from each, both freed, and the manager destroyed. */
RAP_TEST_P(WrapperLeak, SharedPlatformIsNoLeak, wrap_kind, wrappers) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *w = NULL;
  make_both(rm, param, &pool, &w);
  void *a = tu_alloc(pool, 1000), *b = tu_alloc(w, 1000);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(w, b, NULL));
  TU_EXPECT(pool, chunk_count, 1);   /* the pool still holds its chunk of HOST */
  RAP_CHECK_OK(destroy_captured(rm));
  RAP_CHECK_EQ(logged.warnings, 0);
}

/* The wrapper's live blocks are its own, not the pool's chunk; its live bytes are zero with none. */
RAP_TEST_P(WrapperLeak, CountsItsOwnBlocks, wrap_kind, wrappers) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *w = NULL;
  make_both(rm, param, &pool, &w);
  void *a = tu_alloc(pool, 1000), *b = tu_alloc(w, 1000);
  RAP_CHECK_EQ(tu_stats(w).allocation_count, 1);
  void *big = tu_alloc(w, 2 << 20);   /* past ThreadCache's max_size: no cache keeps it */
  RAP_CHECK_EQ(tu_stats(w).allocation_count, 2);
  RAP_CHECK_OK(rap_deallocate(w, big, NULL));
  RAP_CHECK_EQ(tu_stats(w).allocation_count, 1);
  RAP_CHECK_OK(rap_deallocate(w, b, NULL));
  rap_stats s = tu_stats(w);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes, 0);
  TU_CHECK(w);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The wrapper alone goes while the pool beside it keeps its chunk. */
RAP_TEST_P(WrapperLeak, WrapperDestroyedBesideAPool, wrap_kind, wrappers) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *w = NULL;
  make_both(rm, param, &pool, &w);
  void *a = tu_alloc(pool, 1000);
  RAP_CHECK_OK(rap_deallocate(w, tu_alloc(w, 1000), NULL));
  RAP_CHECK_OK(rap_allocator_destroy(w));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Blocks that went through the wrapper and were never freed (one a cache would keep, one past
 * ThreadCache's max_size): the wrapper refuses to go, and the manager's destroy names it, with its
 * two blocks, and does not blame the pool. */
RAP_TEST_P(WrapperLeak, RealLeakThroughTheWrapperIsReported, wrap_kind, wrappers) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *w = NULL;
  make_both(rm, param, &pool, &w);
  void *a = tu_alloc(pool, 1000);
  (void)tu_alloc(w, 1000);   /* leaked on purpose */
  (void)tu_alloc(w, 2 << 20);
  RAP_CHECK_OK(rap_deallocate(w, tu_alloc(w, 2000), NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(tu_stats(w).allocation_count, 2);
  RAP_CHECK_STATUS(rap_allocator_destroy(w), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "2 blocks are still live");
  RAP_CHECK_STATUS(destroy_captured(rm), RAP_ERR_BUSY);
  RAP_CHECK_STR(logged.about_w, "leaked 2 blocks,");
  RAP_CHECK(!logged.about_pool);
}
