/* test_stacking.c — every strategy over every allocator, including each other: each pair is its
 * own case (Stacking.EveryStrategyOverEveryAllocator/<child>_over_<parent>), and a few chains whose
 * figures matter: ThreadSafe -> ResourceAwarePool -> SizeLimiter -> HOST, FixedPool over a pool and
 * a pool over a FixedPool (refused once a chunk is larger than an object).
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

typedef struct kind {
  const char *name;
  const char *as_parent;   /* options when it is the parent (over HOST) */
  const char *as_child;    /* options when it is the child */
} kind;

static const kind kinds[] = {
    {"HOST", NULL, NULL},
    {"Fault", NULL, NULL},
    {"QuickPool", "initial_size=1MiB", "initial_size=64KiB next_size=64KiB"},
    {"DynamicPoolList", "initial_size=1MiB", "initial_size=64KiB next_size=64KiB"},
    {"ResourceAwarePool", "initial_size=1MiB", "initial_size=64KiB next_size=64KiB"},
    {"ThreadSafe", NULL, NULL},
    {"SizeLimiter", "limit=64MiB", "limit=16MiB"},
    /* A parent FixedPool's objects must hold a child pool's chunks (64 KiB + padding). */
    {"FixedPool", "object_size=1MiB objects_per_chunk=4", "object_size=512 objects_per_chunk=16"},
};

static const kind *kind_of(const char *name) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kinds[i].name, name) == 0) return &kinds[i];
  rap_test_fail(__FILE__, __LINE__, "no kind %s", name);
}

typedef struct pair {
  const char *label;
  const char *child, *parent;
} pair;

#define OVER(c)                                                                                    \
  {c "_over_HOST", c, "HOST"}, {c "_over_Fault", c, "Fault"}, {c "_over_QuickPool", c, "QuickPool"}, \
      {c "_over_DynamicPoolList", c, "DynamicPoolList"},                                           \
      {c "_over_ResourceAwarePool", c, "ResourceAwarePool"},                                       \
      {c "_over_ThreadSafe", c, "ThreadSafe"}, {c "_over_SizeLimiter", c, "SizeLimiter"},         \
      {c "_over_FixedPool", c, "FixedPool"}

static const pair pairs[] = {
    OVER("Fault"),      OVER("QuickPool"),   OVER("DynamicPoolList"), OVER("ResourceAwarePool"),
    OVER("ThreadSafe"), OVER("SizeLimiter"), OVER("FixedPool"),
};

static bool passes_through(const char *strategy) {
  return strcmp(strategy, "Fault") == 0 || strcmp(strategy, "ThreadSafe") == 0 ||
         strcmp(strategy, "SizeLimiter") == 0;
}

RAP_TEST_P(Stacking, EveryStrategyOverEveryAllocator, pair, pairs) {
  const kind *pk = kind_of(param->parent), *ck = kind_of(param->child);
  rap_manager *rm = tu_manager();
  rap_allocator *host = tu_get(rm, "HOST");
  rap_allocator *parent =
      strcmp(pk->name, "HOST") == 0 ? host : tu_make(rm, "parent", pk->name, "HOST", pk->as_parent);
  rap_allocator *child = tu_make(rm, "child", ck->name, rap_allocator_name(parent), ck->as_child);
  RAP_CHECK(rap_allocator_parent(child) == parent);
  RAP_CHECK(strcmp(rap_allocator_strategy(child), ck->name) == 0);
  rap_resource *q = NULL, *host_r = NULL, *owner = NULL;
  RAP_CHECK_OK(rap_resource_host(rm, &host_r));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));

  static const size_t sizes[] = {100, 512, 0, 300};
  rap_resource *on[] = {NULL, q, NULL, host_r};
  void *p[4];
  for (unsigned i = 0; i < 4; i++) {
    RAP_CHECK_OK(rap_allocate(child, &p[i], sizes[i], on[i]));
    RAP_CHECK(p[i] != NULL);
    RAP_CHECK((uintptr_t)p[i] % rap_allocator_alignment(child) == 0);
    tu_fill(p[i], sizes[i], i);
    rap_allocator *found = NULL;
    RAP_CHECK_OK(rap_allocator_find(rm, p[i], &found));
    RAP_CHECK(found == child);
  }
  RAP_CHECK(p[0] != p[1] && p[0] != p[2] && p[1] != p[2] && p[2] != p[3]);
  rap_stats s = tu_stats(child);
  RAP_CHECK_EQ(s.current_bytes, 912);
  RAP_CHECK_EQ(s.allocation_count, 4);
  TU_CHECK(child);
  TU_CHECK(parent);
  /* The resource a block was taken on is kept by a resource-aware pool, also through wrappers. */
  bool tracked = strcmp(ck->name, "ResourceAwarePool") == 0 ||
                 (passes_through(ck->name) && strcmp(pk->name, "ResourceAwarePool") == 0);
  RAP_CHECK_OK(rap_pointer_resource(child, p[1], &owner));
  RAP_CHECK(owner == (tracked ? q : host_r));

  for (unsigned i = 0; i < 4; i++) {
    RAP_CHECK(tu_intact(p[i], sizes[i], i));
    RAP_CHECK_OK(rap_deallocate(child, p[i], NULL));
  }
  RAP_CHECK_STATUS(rap_deallocate(child, p[0], NULL), RAP_ERR_UNKNOWN_POINTER);
  s = tu_stats(child);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.allocation_count, 0);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_release(child));
  TU_EXPECT(parent, allocation_count, 0);   /* every chunk the child held went back */
  TU_CHECK(child);
  TU_CHECK(parent);
  RAP_CHECK_OK(rap_resource_destroy(q));
  RAP_CHECK_OK(rap_allocator_destroy(child));
  if (parent != host) RAP_CHECK_OK(rap_allocator_destroy(parent));
  TU_EXPECT(host, allocation_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ThreadSafe -> ResourceAwarePool -> SizeLimiter -> HOST, with room for one 64 KiB chunk: a block
 * pending on a queue is the only memory there is, so the next request waits for the queue and
 * reuses it rather than growing; a request that needs more is refused with the limiter's sentence. */
static void fill_job(void *arg) { tu_fill(arg, 65536, 77); }

RAP_TEST(Stacking, ThreadSafeOverResourceAwareOverLimiter) {
  rap_manager *rm = tu_manager();
  char opts[64];
  snprintf(opts, sizeof opts, "limit=%zu", tu_chunk(65536, 256));
  rap_allocator *lim = tu_make(rm, "lim", "SizeLimiter", "HOST", opts);
  rap_allocator *pool =
      tu_make(rm, "rap", "ResourceAwarePool", "lim", "initial_size=64KiB next_size=64KiB");
  rap_allocator *ts = tu_make(rm, "ts", "ThreadSafe", "rap", NULL);
  RAP_CHECK(rap_allocator_parent(ts) == pool && rap_allocator_parent(pool) == lim);
  rap_resource *q = NULL, *owner = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(ts, &p, 65536, q));
  RAP_CHECK_OK(rap_resource_submit(q, fill_job, p));   /* q writes the block... */
  RAP_CHECK_OK(rap_deallocate(ts, p, q));              /* ...and it is pending on q */
  for (int round = 0; round < 3; round++) {
    void *h = tu_alloc(ts, 1000);   /* on the host: only once q has passed */
    RAP_CHECK(h == p);
    RAP_CHECK(tu_intact(h, 1000, 77));   /* q's work finished before the host got the block */
    TU_EXPECT(lim, allocation_count, 1);
    TU_EXPECT(ts, pending_count, 0);
    void *big = NULL;
    RAP_CHECK_STATUS(rap_allocate(ts, &big, 65536, q), RAP_ERR_NOMEM);
    RAP_CHECK_STR(rap_last_error(), "limit");
    RAP_CHECK_OK(rap_pointer_resource(ts, h, &owner));
    RAP_CHECK(owner != q);
    RAP_CHECK_OK(rap_deallocate(ts, h, NULL));
    RAP_CHECK_OK(rap_allocate(ts, &p, 65536, q));   /* the whole chunk again */
    RAP_CHECK(p == h);
    RAP_CHECK_OK(rap_resource_submit(q, fill_job, p));
    RAP_CHECK_OK(rap_deallocate(ts, p, NULL));
  }
  TU_CHECK(ts);
  RAP_CHECK_OK(rap_resource_synchronize(q));
  RAP_CHECK_OK(rap_release(ts));
  TU_EXPECT(lim, current_bytes, 0);
  TU_EXPECT(ts, chunk_count, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* FixedPool over a QuickPool: objects are aligned to the smaller of 16 and the parent's alignment,
 * and each chunk is one block of the pool. */
RAP_TEST(Stacking, FixedPoolOverQuickPool) {
  rap_manager *rm = tu_manager();
  rap_allocator *qp = tu_make(rm, "qp", "QuickPool", "HOST", "initial_size=64KiB");
  rap_allocator *fp = tu_make(rm, "fp", "FixedPool", "qp", "object_size=24 objects_per_chunk=100");
  RAP_CHECK_EQ(rap_allocator_alignment(fp), 16);
  void *o[150];
  for (int i = 0; i < 150; i++) {
    o[i] = tu_alloc(fp, 24);
    RAP_CHECK((uintptr_t)o[i] % 16 == 0);
    tu_fill(o[i], 24, (unsigned)i);
  }
  TU_EXPECT(fp, chunk_count, 2);
  TU_EXPECT(fp, actual_bytes, 2 * 3200);   /* stride 32 */
  rap_stats s = tu_stats(qp);
  RAP_CHECK_EQ(s.allocation_count, 2);
  RAP_CHECK_EQ(s.current_bytes, 2 * 3200);
  RAP_CHECK_EQ(s.used_bytes, 2 * 3328);    /* rounded to the pool's 256 */
  for (int i = 0; i < 150; i++) {
    RAP_CHECK(tu_intact(o[i], 24, (unsigned)i));
    RAP_CHECK_OK(rap_deallocate(fp, o[i], NULL));
  }
  RAP_CHECK_OK(rap_release(fp));
  TU_EXPECT(qp, allocation_count, 0);
  TU_CHECK(qp);
  TU_CHECK(fp);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A pool over a FixedPool of 64 KiB objects: a chunk of 32 KiB (+240 padding) is an object; a chunk
 * of next_size=1MiB is larger than any object, and the FixedPool's RAP_ERR_INVALID reaches the
 * caller unchanged (it is not a shortage: releasing and retrying would not help). */
RAP_TEST_POOLS(Stacking, PoolOverFixedPool) {
  rap_manager *rm = tu_manager();
  rap_allocator *fp =
      tu_make(rm, "fp", "FixedPool", rap_allocator_name(tu_parent(rm, param)),
              "object_size=64KiB objects_per_chunk=2");
  rap_allocator *pool = tu_pool_make(rm, param, "pool", "fp", "initial_size=32KiB heuristic=never");
  void *a = tu_alloc(pool, 100);
  TU_EXPECT(fp, allocation_count, 1);
  TU_EXPECT(fp, current_bytes, tu_chunk_on(fp, 32768, 256));
  void *b = tu_alloc(pool, 32768 - 256);   /* the rest of the chunk */
  rap_stats before = tu_stats(pool);
  void *c = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &c, 1, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "object size");
  rap_stats after = tu_stats(pool);
  TU_STATS_EQ(before, after);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  /* With chunks no larger than an object, the same pool grows chunk by chunk. */
  pool = tu_pool_make(rm, param, "pool", "fp", "initial_size=32KiB next_size=60KiB heuristic=never");
  a = tu_alloc(pool, 32768);
  b = tu_alloc(pool, 32768);
  TU_EXPECT(pool, chunk_count, 2);
  TU_EXPECT(fp, allocation_count, 2);
  TU_EXPECT(fp, chunk_count, 1);
  c = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &c, 65536, NULL), RAP_ERR_INVALID);   /* 64 KiB + 240 */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
