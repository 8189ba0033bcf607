/* test_vmm.c — the growable platform's host analogue (HOST_VMM, HostVmm) alone and under the
 * pools: placement in the reserved range, resize in place, chunks that merge as they grow, free
 * tail pages given back, pending blocks across the old end of a chunk, out of memory when the
 * range is full, bad options. DEVICE_VMM runs the same engine (tests/cuda/test_cuda_vmm.c).
 * Pending states come from host_async queues held by gates; no sleeps.
 */
#include "gate.h"
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define G (64 * KiB)   /* the tests' granularity: small, so that ranges stay small */

static rap_allocator *vmm_make(rap_manager *rm, const char *name, size_t reserve) {
  char opts[96];
  snprintf(opts, sizeof opts, "reserve=%zu granularity=%zu", reserve, G);
  return tu_make(rm, name, "HostVmm", NULL, opts);
}

/* ---- the platform alone ----------------------------------------------------------------------- */

RAP_TEST(HostVmm, AllocationsFollowEachOtherAndHolesAreReused) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 1 * MiB);
  RAP_CHECK_EQ(rap_allocator_alignment(v), G);
  char *a = tu_alloc(v, 100 * KiB), *b = tu_alloc(v, G), *c = tu_alloc(v, 3 * G);
  RAP_CHECK(b == a + 2 * G && c == b + G);   /* each at the top: 100 KiB took two granules */
  memset(a, 1, 100 * KiB);
  memset(c, 3, 3 * G);
  rap_stats s = tu_stats(v);
  RAP_CHECK_EQ(s.actual_bytes, 6 * G);   /* mapped: whole granules */
  RAP_CHECK_EQ(s.allocation_count, 3);
  RAP_CHECK_OK(rap_deallocate(v, b, NULL));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 5 * G);
  /* The top still has room: the next block goes there, not into the hole. */
  char *d = tu_alloc(v, G);
  RAP_CHECK(d == c + 3 * G);
  /* Fill the top; then a granule fits only in b's hole. */
  char *e = tu_alloc(v, 1 * MiB - 7 * G);
  char *f = tu_alloc(v, G);
  RAP_CHECK(f == b);
  void *g = NULL;
  RAP_CHECK_STATUS(rap_allocate(v, &g, G, NULL), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "reserved range");
  char *ptrs[] = {a, c, d, e, f};
  for (size_t i = 0; i < 5; i++) RAP_CHECK_OK(rap_deallocate(v, ptrs[i], NULL));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  /* Everything went back: the range starts over from its base. */
  char *h = tu_alloc(v, 1 * MiB);
  RAP_CHECK(h == a);
  RAP_CHECK_OK(rap_deallocate(v, h, NULL));
  TU_CHECK(v);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(HostVmm, PlatformNamesAndDefaults) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = tu_get(rm, "HOST_VMM");
  RAP_CHECK_EQ(rap_allocator_alignment(v), 2 * MiB);   /* the device's usual granule */
  void *p = tu_alloc(v, 1);
  memset(p, 7, 2 * MiB);   /* a whole granule is mapped, writable */
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 2 * MiB);
  rap_allocator *found = NULL;
  RAP_CHECK_OK(rap_allocator_find(rm, p, &found));
  RAP_CHECK(found == v);
  size_t free_bytes = 0, total = 0;
  RAP_CHECK_OK(rap_allocator_memory_info(v, &free_bytes, &total));
  RAP_CHECK(total > 0);
  RAP_CHECK_OK(rap_deallocate(v, p, NULL));
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "sp", "QuickPool(HostVmm(reserve=4MiB, granularity=64KiB), "
                                                 "initial_size=64KiB)", &pool));
  p = tu_alloc(pool, 100);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(HostVmm, BadOptionsSayWhich) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=3000", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'granularity' must be a power of two");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=1KiB", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'granularity'");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=0", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'reserve'");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=lots", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "reserve");
  /* The largest size is a size like any other, not "absent": refused, not the default. */
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=18446744073709551615", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'reserve' must be between 1 byte and 64PiB, not 18446744073709551615");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=18446744073709551615", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "'granularity' must be a power of two");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "option 'granularity' needs a size");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "option 'reserve' needs a size");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "peers=1", &a), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "'peers'");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "bogus=1", &a), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "bogus");
  RAP_CHECK_STATUS(rap_allocator_get(rm, "DEVICE_VMM::x", &a), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "DEVICE_VMM::N");
  RAP_CHECK(a == NULL);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Where no device is usable (this build or this machine), DEVICE_VMM says why. */
RAP_TEST(HostVmm, DeviceVmmWithoutADeviceSaysWhy) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  if (rap_allocator_get(rm, "DEVICE", &a) == RAP_OK) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    RAP_SKIP("a device is usable here: tests/cuda/test_cuda_vmm.c covers DEVICE_VMM");
  }
  a = NULL;
  RAP_CHECK_STATUS(rap_allocator_get(rm, "DEVICE_VMM", &a), RAP_ERR_UNSUPPORTED);
  RAP_CHECK(a == NULL);
  RAP_CHECK_STR(rap_last_error(), "DEVICE_VMM");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "d", "DeviceVmm", NULL, "reserve=1GiB", &a), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- pools over it ---------------------------------------------------------------------------- */

typedef struct vmm_pool {
  const char *label, *strategy;
} vmm_pool;
static const vmm_pool vmm_pools[] = {
    {"QuickPool", "QuickPool"}, {"DynamicPoolList", "DynamicPoolList"},
    {"ResourceAwarePool", "ResourceAwarePool"},
};
#define RAP_TEST_VMM(suite, name) RAP_TEST_P(suite, name, vmm_pool, vmm_pools)

static rap_allocator *pool_make(rap_manager *rm, const vmm_pool *P, const char *parent,
                                const char *extra) {
  char opts[160];
  snprintf(opts, sizeof opts, "initial_size=%zu next_size=%zu %s", 4 * G, G, extra ? extra : "");
  return tu_make(rm, "pool", P->strategy, parent, opts);
}

RAP_TEST_VMM(VmmPool, ChunksMergeAsTheyGrow) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 16 * MiB);
  rap_allocator *pool = pool_make(rm, param, "v", "heuristic=never");
  char *a = tu_alloc(pool, 3 * G), *b = tu_alloc(pool, G);   /* the first chunk, full */
  char *c = tu_alloc(pool, G);                               /* past its old end */
  RAP_CHECK(b == a + 3 * G && c == b + G);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(s.actual_bytes, 5 * G);
  RAP_CHECK_EQ(tu_stats(v).allocation_count, 1);   /* one allocation of the parent, grown */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  /* 2 granules free across the first chunk's old end: one request takes them, no growth. */
  char *d = tu_alloc(pool, 2 * G);
  RAP_CHECK(d == b);
  s = tu_stats(pool);
  RAP_CHECK_EQ(s.actual_bytes, 5 * G);
  RAP_CHECK_EQ(s.chunk_count, 1);
  /* A miss while the end of the chunk is free asks only for the difference. */
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  char *e = tu_alloc(pool, 3 * G);
  RAP_CHECK(e == b);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 6 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, e, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Beyond what a request lacks, a growth adds next_size, or a 32nd of what the pool holds where that
 * is less (at least a granule): a small pool is not left with a free end of next_size. */
RAP_TEST_VMM(VmmPool, GrowthIsAShareOfWhatThePoolHoldsUpToNextSize) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 512 * MiB);
  char opts[128];
  snprintf(opts, sizeof opts, "initial_size=%zu next_size=%zu heuristic=never", G, 64 * G);
  rap_allocator *pool = tu_make(rm, "pool", param->strategy, "v", opts);
  char *p[8];
  for (int i = 0; i < 8; i++) p[i] = tu_alloc(pool, G);   /* a 32nd of what it holds: below a granule */
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 8 * G);        /* with next_size alone: 1 + 7 × 64 */
  char *big = tu_alloc(pool, 88 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 96 * G);       /* the request's lack, above the step */
  char *x = tu_alloc(pool, G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 99 * G);       /* 96 / 32 = 3 granules */
  char *y = tu_alloc(pool, 2 * G);                          /* the free end: no growth */
  char *z = tu_alloc(pool, 2101 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 2200 * G);
  char *w = tu_alloc(pool, G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 2264 * G);     /* 2200 / 32 > 64: next_size */
  RAP_CHECK_EQ(tu_stats(pool).chunk_count, 1);
  TU_CHECK(pool);
  char *all[] = {big, x, y, z, w};
  for (size_t i = 0; i < 5; i++) RAP_CHECK_OK(rap_deallocate(pool, all[i], NULL));
  for (int i = 0; i < 8; i++) RAP_CHECK_OK(rap_deallocate(pool, p[i], NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_VMM(VmmPool, ReleaseGivesBackTheFreeTail) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 64 * MiB);
  rap_allocator *pool = pool_make(rm, param, "v", "heuristic=never");
  char *a = tu_alloc(pool, 4 * G);
  char *b = tu_alloc(pool, 8 * MiB);
  char *c = tu_alloc(pool, 100);
  memset(b, 5, 8 * MiB);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 4 * G + 8 * MiB + G);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 4 * G + 8 * MiB + G);   /* nothing until asked */
  RAP_CHECK_OK(rap_release(pool));
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.actual_bytes, 4 * G);   /* the used block keeps its granules, no more */
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 4 * G);
  TU_CHECK(pool);
  TU_CHECK(v);
  /* And it grows back in place. */
  char *d = tu_alloc(pool, G);
  RAP_CHECK(d == a + 4 * G);
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 0);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The free tail of the range is the last place a request goes: a hole that fits serves first, even
 * where the tail fits tighter, so a block does not land where the tail's size (small while the pool
 * grows, a whole free range a step later) decided. DynamicPoolList keeps its exact best fit. */
RAP_TEST(VmmPool, AHoleServesBeforeTheFreeTail) {
  for (size_t k = 0; k < sizeof vmm_pools / sizeof *vmm_pools; k++) {
    if (strcmp(vmm_pools[k].strategy, "DynamicPoolList") == 0) continue;
    rap_manager *rm = tu_manager();
    rap_allocator *v = vmm_make(rm, "v", 16 * MiB);
    rap_allocator *pool = pool_make(rm, &vmm_pools[k], "v", "heuristic=never");
    char *x = tu_alloc(pool, 2 * G), *y = tu_alloc(pool, G);   /* the tail: one granule, free */
    RAP_CHECK(y == x + 2 * G);
    RAP_CHECK_OK(rap_deallocate(pool, x, NULL));              /* a hole of two */
    char *w = tu_alloc(pool, G);
    RAP_CHECK(w == x);                                         /* not y + G, the exact fit */
    char *z = tu_alloc(pool, G);                               /* the rest of the hole */
    RAP_CHECK(z == x + G);
    char *t = tu_alloc(pool, G);                               /* no hole left: the tail */
    RAP_CHECK(t == y + G);
    rap_stats s = tu_stats(pool);
    RAP_CHECK_EQ(s.actual_bytes, 4 * G);
    RAP_CHECK_EQ(s.chunk_count, 1);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, t, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_allocator_destroy(pool));
    RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* Where the tail last is off, best fit stands and the exact fit at the tail serves: in
 * DynamicPoolList (its exact best fit) and in pools whose free pieces go back (unmap_free, over a
 * platform made with piece=), where cutting the hole would map its pieces again. */
RAP_TEST(VmmPool, TheTailServesAnExactFitWhereTheTailLastIsOff) {
  const char *platforms[] = {"reserve=16MiB granularity=64KiB", "reserve=16MiB granularity=64KiB piece=64KiB"};
  for (size_t k = 0; k < sizeof vmm_pools / sizeof *vmm_pools; k++)
    for (unsigned with_pieces = 0; with_pieces < 2; with_pieces++) {
      bool list = strcmp(vmm_pools[k].strategy, "DynamicPoolList") == 0;
      if (!list && !with_pieces) continue;   /* the tail last: AHoleServesBeforeTheFreeTail */
      rap_manager *rm = tu_manager();
      rap_allocator *v = tu_make(rm, "v", "HostVmm", NULL, platforms[with_pieces]);
      rap_allocator *pool = pool_make(rm, &vmm_pools[k], "v", "heuristic=never");
      char *x = tu_alloc(pool, 2 * G), *y = tu_alloc(pool, G);   /* the tail: one granule, free */
      RAP_CHECK(y == x + 2 * G);
      RAP_CHECK_OK(rap_deallocate(pool, x, NULL));              /* a hole of two */
      char *w = tu_alloc(pool, G);
      RAP_CHECK(w == y + G);                                     /* the exact fit, not the hole */
      TU_CHECK(pool);
      RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
      RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
      RAP_CHECK_OK(rap_allocator_destroy(pool));
      RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
      RAP_CHECK_OK(rap_manager_destroy(rm));
    }
}

RAP_TEST_VMM(VmmPool, PercentHeuristicTrimsTheTail) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 64 * MiB);
  rap_allocator *pool = pool_make(rm, param, "v", "heuristic=percent_releasable:50");
  char *a = tu_alloc(pool, 2 * G), *x = tu_alloc(pool, G), *b = tu_alloc(pool, 4 * MiB);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));   /* QuickPool merges the one freed before now */
  size_t held = tu_stats(pool).actual_bytes;
  RAP_CHECK(held <= 4 * G);
  RAP_CHECK(held >= 2 * G);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, held);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST_VMM(VmmPool, FullRangeIsOutOfMemoryAndChangesNothing) {
  rap_manager *rm = tu_manager();
  vmm_make(rm, "v", 1 * MiB);
  rap_allocator *pool = pool_make(rm, param, "v", NULL);
  char *a = tu_alloc(pool, 10 * G);
  tu_fill(a, 10 * G, 1);
  rap_stats before = tu_stats(pool);
  void *p = NULL;
  RAP_CHECK_STATUS(rap_allocate(pool, &p, 7 * G, NULL), RAP_ERR_NOMEM);
  RAP_CHECK(p == NULL);
  RAP_CHECK_STR(rap_last_error(), "reserved range");
  RAP_CHECK(tu_intact(a, 10 * G, 1));
  rap_stats after = tu_stats(pool);
  RAP_CHECK_EQ(after.current_bytes, before.current_bytes);
  RAP_CHECK_EQ(after.allocation_count, 1);
  TU_CHECK(pool);
  char *b = tu_alloc(pool, 6 * G);   /* what is left still serves */
  RAP_CHECK(b == a + 10 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Once grown, hits of any size that fits touch the platform not at all: nothing is mapped or
 * given back, and the platform's figures stay as they were. */
RAP_TEST_VMM(VmmPool, HitsMakeNoPlatformCall) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 16 * MiB);
  rap_allocator *pool = pool_make(rm, param, "v", NULL);
  void *warm = tu_alloc(pool, 4 * G);   /* one chunk of 4 granules, then all of it free */
  RAP_CHECK_OK(rap_deallocate(pool, warm, NULL));
  rap_stats before = tu_stats(v);
  uint64_t rng = 7;
  for (int i = 0; i < 5000; i++) {
    void *p = tu_alloc(pool, 1 + tu_rand(&rng) % (2 * G));
    RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  }
  rap_stats after = tu_stats(v);
  TU_STATS_EQ(before, after);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 4 * G);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The default heuristic (percent_releasable_hwm:100) keeps what the peak needed once the pool is
 * wholly free: over a growable parent the chunk shrinks in place, at the same address. */
RAP_TEST_VMM(VmmPool, HwmHeuristicShrinksAWhollyFreeChunkInPlace) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 64 * MiB);
  rap_allocator *pool = tu_make(rm, "pool", param->strategy, "v", "initial_size=64KiB next_size=4MiB");
  /* b grows the chunk by a 32nd of what it holds (below next_size): 8 granules */
  char *a = tu_alloc(pool, 256 * G), *b = tu_alloc(pool, G);
  RAP_CHECK(b == a + 256 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 264 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.actual_bytes, 257 * G);   /* the peak of used bytes */
  RAP_CHECK_EQ(s.chunk_count, 1);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 257 * G);
  char *c = tu_alloc(pool, 100);   /* the chunk kept its address */
  RAP_CHECK(c == a);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Two pools on one range: each grows in place while the other is not in its way, and takes a new
 * chunk elsewhere in the range when it is. */
RAP_TEST_VMM(VmmPool, TwoPoolsShareARange) {
  rap_manager *rm = tu_manager();
  vmm_make(rm, "v", 16 * MiB);
  rap_allocator *p1 = pool_make(rm, param, "v", "heuristic=never");
  rap_allocator *p2 = tu_make(rm, "pool2", param->strategy, "v", "initial_size=64KiB next_size=64KiB");
  char *a = tu_alloc(p1, 4 * G), *b = tu_alloc(p2, G);
  RAP_CHECK(b == a + 4 * G);
  char *c = tu_alloc(p1, G);   /* p2 sits after p1's chunk: a second chunk */
  RAP_CHECK(c == b + G);
  RAP_CHECK_EQ(tu_stats(p1).chunk_count, 2);
  char *d = tu_alloc(p1, G);   /* which grows in place */
  RAP_CHECK(d == c + G);
  RAP_CHECK_EQ(tu_stats(p1).chunk_count, 2);
  TU_CHECK(p1);
  TU_CHECK(p2);
  char *ptrs[] = {a, c, d};
  for (size_t i = 0; i < 3; i++) RAP_CHECK_OK(rap_deallocate(p1, ptrs[i], NULL));
  RAP_CHECK_OK(rap_deallocate(p2, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- the ResourceAwarePool: pending blocks across the old end stay their resource's --------- */

RAP_TEST(VmmResourceAwarePool, PendingAcrossTheOldEndStaysPending) {
  rap_manager *rm = tu_manager();
  vmm_make(rm, "v", 16 * MiB);
  rap_allocator *pool = tu_make(rm, "rap", "ResourceAwarePool", "v",
                                "initial_size=256KiB next_size=64KiB heuristic=never");
  rap_resource *r1 = NULL, *r2 = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r2));
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_resource_submit(r1, gate_job, &g));   /* r1 is busy until the gate opens */
  char *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, 3 * G, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, G, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&c, G, r1));   /* past the first chunk's end */
  RAP_CHECK(c == b + G);
  RAP_CHECK_EQ(tu_stats(pool).chunk_count, 1);
  RAP_CHECK_OK(rap_deallocate(pool, b, r1));
  RAP_CHECK_OK(rap_deallocate(pool, c, r1));
  RAP_CHECK_EQ(tu_rstats(pool, r1).pending_bytes, 2 * G);
  RAP_CHECK_EQ(tu_stats(pool).pending_count, 1);   /* one block, across the old end */
  /* r2 may not have it while r1 is busy: the pool grows instead. */
  RAP_CHECK_OK(rap_allocate(pool, (void **)&d, 2 * G, r2));
  RAP_CHECK(d != b);
  RAP_CHECK(d >= c + G);
  RAP_CHECK_EQ(tu_rstats(pool, r1).pending_bytes, 2 * G);
  TU_CHECK(pool);
  /* r1 takes its own pending block back at once. */
  char *e = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&e, 2 * G, r1));
  RAP_CHECK(e == b);
  RAP_CHECK_OK(rap_deallocate(pool, e, r1));
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_release(pool));   /* polls: r1's block is free now */
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 0);
  char *f = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&f, 2 * G, r2));
  RAP_CHECK(f == b);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, f, r2));
  RAP_CHECK_OK(rap_deallocate(pool, d, r2));
  RAP_CHECK_OK(rap_deallocate(pool, a, r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* Pending blocks at the end of the chunk are not given back; once their resource passed, they are. */
RAP_TEST(VmmResourceAwarePool, ReleaseWaitsForPendingTail) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 16 * MiB);
  rap_allocator *pool = tu_make(rm, "rap", "ResourceAwarePool", "v",
                                "initial_size=64KiB next_size=64KiB heuristic=never");
  rap_resource *r1 = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  gate g;
  gate_init(&g);
  RAP_CHECK_OK(rap_resource_submit(r1, gate_job, &g));
  char *a = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, G, r1));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, 1 * MiB, r1));
  RAP_CHECK_OK(rap_deallocate(pool, b, r1));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, G + 1 * MiB);   /* pending: kept, no host wait */
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, a, r1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* ---- threads: pools on their own threads over one range (TSan sees the platform's lock) ------- */

typedef struct churn {
  rap_allocator *pool;
  unsigned seed;
  tu_report rep;
} churn;

static void *churn_run(void *arg) {
  churn *w = arg;
  void *live[16] = {0};
  size_t sizes[16] = {0};
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ w->seed;
  for (int i = 0; i < 2000; i++) {
    size_t k = tu_rand(&rng) % 16;
    if (live[k] != NULL) {
      EXPECT_TRUE(&w->rep, tu_intact(live[k], sizes[k], w->seed + (unsigned)k));
      EXPECT_ST(&w->rep, rap_deallocate(w->pool, live[k], NULL), RAP_OK);
      live[k] = NULL;
    } else {
      sizes[k] = 1 + tu_rand(&rng) % (3 * G);
      EXPECT_ST(&w->rep, rap_allocate(w->pool, &live[k], sizes[k], NULL), RAP_OK);
      if (live[k] != NULL) tu_fill(live[k], sizes[k], w->seed + (unsigned)k);
    }
    if (i % 200 == 0) EXPECT_ST(&w->rep, rap_release(w->pool), RAP_OK);
  }
  for (size_t k = 0; k < 16; k++)
    if (live[k] != NULL) EXPECT_ST(&w->rep, rap_deallocate(w->pool, live[k], NULL), RAP_OK);
  EXPECT_ST(&w->rep, rap_allocator_check(w->pool), RAP_OK);
  return NULL;
}

RAP_TEST_VMM(VmmPool, PoolsOnThreadsShareOneRange) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = vmm_make(rm, "v", 256 * MiB);
  churn w[2];
  pthread_t t[2];
  for (unsigned i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%u", i);
    w[i] = (churn){tu_make(rm, name, param->strategy, "v", "initial_size=64KiB next_size=64KiB "
                                                          "heuristic=percent_releasable:50"),
                   i + 1, {0, 0, 0}};
  }
  for (unsigned i = 0; i < 2; i++) RAP_CHECK(pthread_create(&t[i], NULL, churn_run, &w[i]) == 0);
  for (unsigned i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (unsigned i = 0; i < 2; i++) tu_check_reports("thread", &w[i].rep, 1);
  for (unsigned i = 0; i < 2; i++) RAP_CHECK_OK(rap_allocator_destroy(w[i].pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  TU_CHECK(v);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- a backend that runs out: the platform's calls through a stand-in ------------------------ */

#include "platforms/vmm.h"

static const rapi_vmm_backend *real_backend;
static size_t device_cap;   /* map answers NOMEM past this many mapped bytes, as a full device */

static int capped_map(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  if (v->mapped + size > device_cap) return rapi_fail(RAP_ERR_NOMEM, "stand-in device: full");
  return real_backend->map(v, addr, size, share);
}
static int capped_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  return real_backend->unmap(v, addr, size, share);
}
static void capped_unreserve(rapi_vmm *v) { real_backend->unreserve(v); }
static const rapi_vmm_backend capped = {capped_map, capped_unmap, capped_unreserve, false, NULL};

/* Out of memory with free pages at the end of an older chunk: the pool's one retry gives them back
 * first (a device full of mappings has room again), then asks once more. */
RAP_TEST(VmmPool, OutOfMemoryGivesBackFreeEndsThenRetries) {
  rap_manager *rm = tu_manager();
  rap_allocator *v, *p1, *p2;
  RAP_CHECK_OK(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=16MiB granularity=64KiB", &v));
  RAP_CHECK_OK(rap_allocator_make(rm, "p1", "QuickPool", "v", "initial_size=128KiB next_size=64KiB heuristic=never", &p1));
  RAP_CHECK_OK(rap_allocator_make(rm, "p2", "QuickPool", "v", "initial_size=64KiB next_size=64KiB heuristic=never", &p2));
  void *a, *x, *y, *z;
  RAP_CHECK_OK(rap_allocate(p1, &a, 2 * G, NULL));
  RAP_CHECK_OK(rap_allocate(p1, &x, 8 * G, NULL));   /* p1's chunk grows in place */
  RAP_CHECK_OK(rap_allocate(p2, &y, G, NULL));       /* p2 right after it: p1 is boxed in */
  RAP_CHECK_OK(rap_deallocate(p1, x, NULL));         /* p1's chunk ends in 8 free granules */
  rapi_vmm *vm = ((rapi_tracked *)v->state)->impl;
  real_backend = vm->ops;
  vm->ops = &capped;
  device_cap = 12 * G;                               /* 11 granules mapped, room for 1 */
  RAP_CHECK_OK(rap_allocate(p1, &z, 9 * G, NULL));   /* fails before the fix: NOMEM */
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(p1, &s));
  RAP_CHECK(s.actual_bytes <= 11 * G);
  RAP_CHECK_OK(rap_deallocate(p1, z, NULL));
  vm->ops = real_backend;
  RAP_CHECK_OK(rap_deallocate(p1, a, NULL));
  RAP_CHECK_OK(rap_deallocate(p2, y, NULL));
  RAP_CHECK_OK(rap_allocator_check(p1));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A _hwm heuristic firing on a wholly free chunk keeps what the peak of used bytes needs: the free
 * end of the chunk that stays counts towards it and is not given back as well. */
RAP_TEST(VmmPool, HwmCoalesceKeepsThePeak) {
  rap_manager *rm = tu_manager();
  rap_allocator *v, *p1, *p2;
  RAP_CHECK_OK(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=64MiB granularity=64KiB", &v));
  RAP_CHECK_OK(rap_allocator_make(rm, "p1", "QuickPool", "v",
                                  "initial_size=128KiB next_size=64KiB heuristic=percent_releasable_hwm:50", &p1));
  RAP_CHECK_OK(rap_allocator_make(rm, "p2", "QuickPool", "v", "initial_size=64KiB next_size=64KiB heuristic=never", &p2));
  void *a, *x, *b, *y;
  RAP_CHECK_OK(rap_allocate(p1, &a, 2 * G, NULL));
  RAP_CHECK_OK(rap_allocate(p1, &x, 4 * G, NULL));   /* chunk 1 grows in place to 6 granules */
  RAP_CHECK_OK(rap_deallocate(p1, x, NULL));
  RAP_CHECK_OK(rap_allocate(p2, &b, G, NULL));       /* p2 right after chunk 1 */
  RAP_CHECK_OK(rap_allocate(p1, &y, 8 * G, NULL));   /* chunk 2; peak of used: 10 granules */
  RAP_CHECK_OK(rap_deallocate(p1, y, NULL));         /* chunk 2 wholly free: the heuristic fires */
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(p1, &s));
  RAP_CHECK(s.actual_bytes >= 10 * G);               /* 6 before the fix */
  RAP_CHECK_OK(rap_allocator_check(p1));
  RAP_CHECK_OK(rap_deallocate(p1, a, NULL));
  RAP_CHECK_OK(rap_deallocate(p2, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

static char *fail_unmap_at;   /* the stand-in's unmap of the extent at this address fails */
static int failing_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  if (addr == fail_unmap_at) return rapi_fail(RAP_ERR_BACKEND, "stand-in device: unmap failed");
  return real_backend->unmap(v, addr, size, share);
}
static const rapi_vmm_backend failing = {capped_map, failing_unmap, capped_unreserve, false, NULL};

/* An unmap that fails half way through giving a grown chunk back: the upper extent is gone, the
 * lower not. The pool must not hand out the chunk again (its upper pages are unmapped). */
RAP_TEST(VmmPool, ChunkRefusedHalfWayIsNotHandedOutAgain) {
  rap_manager *rm = tu_manager();
  rap_allocator *v, *p1;
  RAP_CHECK_OK(rap_allocator_make(rm, "v", "HostVmm", NULL, "reserve=16MiB granularity=64KiB", &v));
  RAP_CHECK_OK(rap_allocator_make(rm, "p1", "QuickPool", "v", "initial_size=128KiB next_size=64KiB heuristic=never", &p1));
  void *a, *x;
  RAP_CHECK_OK(rap_allocate(p1, &a, 2 * G, NULL));
  RAP_CHECK_OK(rap_allocate(p1, &x, 2 * G, NULL));   /* the chunk grows in place: two extents */
  RAP_CHECK_OK(rap_deallocate(p1, x, NULL));
  RAP_CHECK_OK(rap_deallocate(p1, a, NULL));         /* wholly free */
  rapi_vmm *vm = ((rapi_tracked *)v->state)->impl;
  real_backend = vm->ops;
  device_cap = SIZE_MAX;
  fail_unmap_at = (char *)a;                         /* the lower extent's unmap fails */
  vm->ops = &failing;
  RAP_CHECK_OK(rap_release(p1));
  vm->ops = real_backend;
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(p1, &s));
  RAP_CHECK_EQ(s.chunk_count, 0);                    /* before the fix: the chunk, 4 granules */
  void *y;
  RAP_CHECK_OK(rap_allocate(p1, &y, 4 * G, NULL));   /* fresh memory, writable to its end */
  memset(y, 0x5A, 4 * G);
  RAP_CHECK_OK(rap_deallocate(p1, y, NULL));
  RAP_CHECK_OK(rap_allocator_check(p1));
  /* The dropped chunk is still the platform's allocation: the manager names it as leaked (and
   * destroys everything all the same). */
  RAP_CHECK_STATUS(rap_manager_destroy(rm), RAP_ERR_BUSY);
}
