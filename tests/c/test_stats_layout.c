/* test_stats_layout.c — rap_stats grows without breaking callers built against an older header:
 * a caller whose struct is older (smaller) gets exactly its bytes written, one whose struct is newer
 * (larger) than the library's finds the unknown tail zeroed, and the functions called without the
 * macro (as a binary built before sizes existed) write the first layout only. */
#include "test_util.h"

#include <stddef.h>
#include <string.h>

/* rap_stats as the contract first had it: twelve fields, before used_bytes and the cache counts. */
typedef struct old_stats {
  size_t current_bytes, high_watermark, actual_bytes, actual_high_watermark;
  size_t releasable_bytes, free_bytes, pending_bytes, largest_free_block;
  size_t allocation_count, block_count, pending_count, chunk_count;
} old_stats;

#define GUARD 0xA5

/* A buffer of the caller's struct followed by guard bytes that must stay untouched. */
typedef struct framed {
  unsigned char bytes[sizeof(rap_stats) + 64];
} framed;

static int untouched_from(const framed *f, size_t from) {
  for (size_t i = from; i < sizeof f->bytes; i++)
    if (f->bytes[i] != GUARD) return 0;
  return 1;
}

static rap_allocator *pool_with_a_block(rap_manager *rm, void **p) {
  rap_allocator *a;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "QuickPool(HOST, initial_size=1MiB)", &a));
  RAP_CHECK_OK(rap_allocate(a, p, 1000, NULL));
  return a;
}

RAP_TEST(StatsLayout, AnOlderCallerGetsOnlyItsBytes) {
  rap_manager *rm = tu_manager();
  void *p;
  rap_allocator *a = pool_with_a_block(rm, &p);
  rap_resource *host;
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  framed f;
  memset(&f, GUARD, sizeof f);
  /* What an older program's rap_allocator_stats(a, &old) expands to. */
  RAP_CHECK_OK(rap_allocator_stats_sized(a, (rap_stats *)(void *)f.bytes, sizeof(old_stats)));
  RAP_CHECK(untouched_from(&f, sizeof(old_stats)));
  old_stats o;
  memcpy(&o, f.bytes, sizeof o);
  RAP_CHECK_EQ(o.current_bytes, 1000);
  RAP_CHECK_EQ(o.allocation_count, 1);
  RAP_CHECK_EQ(o.chunk_count, 1);
  memset(&f, GUARD, sizeof f);
  RAP_CHECK_OK(rap_allocator_resource_stats_sized(a, host, (rap_stats *)(void *)f.bytes,
                                                  sizeof(old_stats)));
  RAP_CHECK(untouched_from(&f, sizeof(old_stats)));
  memcpy(&o, f.bytes, sizeof o);
  RAP_CHECK_EQ(o.current_bytes, 1000);
  /* One field is the least; a size that holds none is refused and writes nothing. */
  memset(&f, GUARD, sizeof f);
  RAP_CHECK_OK(rap_allocator_stats_sized(a, (rap_stats *)(void *)f.bytes, sizeof(size_t) + 3));
  RAP_CHECK(untouched_from(&f, sizeof(size_t)));
  RAP_CHECK_STATUS(rap_allocator_stats_sized(a, (rap_stats *)(void *)f.bytes, 4), RAP_ERR_INVALID);
  RAP_CHECK(untouched_from(&f, sizeof(size_t)));
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));   /* RAP_OK: nothing leaked */
}

RAP_TEST(StatsLayout, ANewerCallerFindsTheUnknownTailZeroed) {
  rap_manager *rm = tu_manager();
  void *p;
  rap_allocator *a = pool_with_a_block(rm, &p);
  framed f;
  memset(&f, GUARD, sizeof f);
  size_t newer = sizeof(rap_stats) + 2 * sizeof(size_t);   /* two fields this library lacks */
  RAP_CHECK_OK(rap_allocator_stats_sized(a, (rap_stats *)(void *)f.bytes, newer));
  rap_stats s, now;
  memcpy(&s, f.bytes, sizeof s);
  RAP_CHECK_OK(rap_allocator_stats(a, &now));
  TU_STATS_EQ(s, now);
  for (size_t i = sizeof(rap_stats); i < newer; i++) RAP_CHECK_EQ(f.bytes[i], 0);
  RAP_CHECK(untouched_from(&f, newer));
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));   /* RAP_OK: nothing leaked */
}

RAP_TEST(StatsLayout, TheFunctionsWithoutTheMacroWriteTheFirstLayout) {
  rap_manager *rm = tu_manager();
  void *p;
  rap_allocator *a = pool_with_a_block(rm, &p);
  rap_resource *host;
  RAP_CHECK_OK(rap_resource_host(rm, &host));
  size_t first = offsetof(rap_stats, cached_count) + sizeof(size_t);
  framed f;
  memset(&f, GUARD, sizeof f);
  RAP_CHECK_OK((rap_allocator_stats)(a, (rap_stats *)(void *)f.bytes));
  RAP_CHECK(untouched_from(&f, first));
  memset(&f, GUARD, sizeof f);
  RAP_CHECK_OK((rap_allocator_resource_stats)(a, host, (rap_stats *)(void *)f.bytes));
  RAP_CHECK(untouched_from(&f, first));
  rap_stats s;
  memcpy(&s, f.bytes, first);
  RAP_CHECK_EQ(s.current_bytes, 1000);
  RAP_CHECK_OK(rap_deallocate(a, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));   /* RAP_OK: nothing leaked */
}
