/* test_vmm_release.c — a release gives back the inside too: over a growable platform made without
 * piece= (the default's kind), the mappings growth made that lie wholly inside a free block go back
 * at rap_release, not only the range's free tail; the block keeps its addresses and maps them again
 * when it is taken. Observers hear of the hole before the pages go and of the fill after they came.
 * unmap_free=0 keeps them. On an exporting platform (HostVmm(export=posix)) a mapping another
 * process still maps stays until it let go, and a later import reads the memory mapped again. The
 * importer is rap_ipc_peer, driven through pipes (ipc_driver.h).
 */
#define _GNU_SOURCE   /* pipe2, fdopen */
#include "ipc_driver.h"
#include "test_util.h"

#include <stdio.h>

#define G ((size_t)64 * 1024)   /* the platform's granularity */

typedef struct release_pool {
  const char *label;
  const char *strategy;
} release_pool;

static const release_pool release_pools[] = {
    {"QuickPool", "QuickPool"}, {"DynamicPoolList", "DynamicPoolList"},
    {"ResourceAwarePool", "ResourceAwarePool"},
};

typedef struct holes_seen {
  int hole, fill;
  char *hole_at, *fill_at;
  size_t hole_bytes, fill_bytes;
} holes_seen;

static void on_pool(const rap_segment_event *ev, void *user) {
  holes_seen *s = user;
  if (ev->replay) return;
  if (ev->kind == RAP_SEGMENT_HOLE) {
    s->hole++;
    s->hole_at = ev->addr;
    s->hole_bytes += ev->bytes;
    memset(ev->addr, 0x5A, ev->bytes);   /* told before: faults if the pages were gone already */
  } else if (ev->kind == RAP_SEGMENT_FILL) {
    s->fill++;
    s->fill_at = ev->addr;
    s->fill_bytes += ev->bytes;
    memset(ev->addr, 0xA5, ev->bytes);   /* told after: faults if not mapped yet */
  }
}

/* Three growths: a (4 granules) and b (4) one after the other, then c (1) at the top. */
static rap_allocator *grown(rap_manager *rm, const release_pool *P, const char *extra, char **a,
                            char **b, char **c) {
  char opts[128];
  tu_make(rm, "v", "HostVmm", NULL, "reserve=16MiB granularity=64KiB");
  snprintf(opts, sizeof opts, "initial_size=%zu next_size=%zu heuristic=never %s", G, G, extra);
  rap_allocator *pool = tu_make(rm, "pool", P->strategy, "v", opts);
  *a = tu_alloc(pool, 4 * G);
  *b = tu_alloc(pool, 4 * G);
  *c = tu_alloc(pool, G);
  RAP_CHECK(*b == *a + 4 * G && *c == *b + 4 * G);
  return pool;
}

RAP_TEST_P(VmmRelease, TheMappingsInsideAFreeBlockGoBackAndComeBack, release_pool, release_pools) {
  rap_manager *rm = tu_manager();
  char *a, *b, *c;
  rap_allocator *pool = grown(rm, param, "", &a, &b, &c);
  rap_allocator *v = tu_get(rm, "v");
  holes_seen seen = {0};
  RAP_CHECK_OK(rap_allocator_observe(pool, on_pool, &seen));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));   /* one free block of 8 below c, live at the top */
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 9 * G);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, G);   /* the tail alone would have kept all nine */
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, G);
  RAP_CHECK_EQ(seen.hole, 1);
  RAP_CHECK(seen.hole_at == a && seen.hole_bytes == 8 * G);
  TU_CHECK(pool);
  /* A part of the block: the mapping it lies in comes back (a's four granules), no more. */
  char *d = tu_alloc(pool, 2 * G);
  RAP_CHECK(d == a);
  memset(d, 1, 2 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 5 * G);
  RAP_CHECK_EQ(seen.fill, 1);
  RAP_CHECK(seen.fill_at == a && seen.fill_bytes == 4 * G);   /* the whole mapping */
  /* The rest of it, across the mapping still gone: all of it mapped, writable. */
  char *e = tu_alloc(pool, 6 * G);
  RAP_CHECK(e == a + 2 * G);
  memset(e, 2, 6 * G);
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 9 * G);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 9 * G);
  TU_CHECK(pool);
  /* Given back again, then a release with nothing inside: the same counts, no new hole. */
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, e, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, G);
  int holes = seen.hole;
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(seen.hole, holes);
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, G);
  RAP_CHECK_OK(rap_allocator_unobserve(pool, on_pool, &seen));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_release(pool));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* unmap_free=0 says no pages go back from inside free blocks: a release keeps them. */
RAP_TEST_P(VmmRelease, UnmapFreeZeroKeepsTheInside, release_pool, release_pools) {
  rap_manager *rm = tu_manager();
  char *a, *b, *c;
  rap_allocator *pool = grown(rm, param, "unmap_free=0", &a, &b, &c);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 9 * G);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A pool with holes sleeps and wakes whole: the wake maps the holes again with the rest. */
RAP_TEST(VmmRelease, APoolWithHolesSleepsAndWakes) {
  rap_manager *rm = tu_manager();
  char *a, *b, *c;
  rap_allocator *pool = grown(rm, &release_pools[2], "", &a, &b, &c);
  tu_fill(c, G, 7);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 5 * G);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(c, G, 7));
  TU_CHECK(pool);
  char *d = tu_alloc(pool, 4 * G);
  RAP_CHECK(d == a);
  memset(d, 3, 4 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- an exporting platform -------------------------------------------------------------------- */

#define EXPORTING "ResourceAwarePool(HostVmm(export=posix, reserve=1GiB, granularity=64KiB), " \
                  "initial_size=64KiB, next_size=64KiB)"

static size_t mapped(rap_allocator *pool) { return stats(rap_allocator_parent(pool)).actual_bytes; }

RAP_TEST(VmmRelease, AMappingAnotherProcessMapsStaysUntilItLetGo) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", EXPORTING, &pool));
  char *a = tu_alloc(pool, 4 * G), *b = tu_alloc(pool, 4 * G), *c = tu_alloc(pool, G);
  RAP_CHECK(b == a + 4 * G && c == b + 4 * G);
  rap_ipc_desc da, dc;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  peer p;
  peer_start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &da, "host"));   /* closed, its mapping kept */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  /* A release that keeps a mapping answers OK and leaves the sentence before it as it was. */
  RAP_CHECK_STATUS(rap_deallocate(pool, (char *)c + 8, NULL), RAP_ERR_UNKNOWN_POINTER);
  char before[512];
  snprintf(before, sizeof before, "%s", rap_last_error());
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(strcmp(rap_last_error(), before) == 0);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);   /* a release: b's mapping goes, a's stays */
  RAP_CHECK_EQ(mapped(pool), 5 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_ipc_export(pool, c, &dc));   /* the importer's next call lets a's go */
  unsigned long long i = import(&p, &dc, "host");
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(mapped(pool), G);
  /* Taken again: new memory, published, so that an import reads what the exporter writes now. */
  uint64_t *x = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&x, 8 * G, NULL));
  RAP_CHECK((char *)x == a);
  x[0] = 0xFEED;
  x[G / 2] = 0xBEEF;   /* in b's granules: a mapping of its own */
  rap_ipc_desc dx;
  RAP_CHECK_OK(rap_ipc_export(pool, x, &dx));
  unsigned long long j = import(&p, &dx, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", j), 0xFEED);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", j, 4 * G), 0xBEEF);
  PEER_OK(&p, "write %llu 8 %d", j, 0xD00D);
  RAP_CHECK_EQ(x[1], 0xD00D);
  PEER_OK(&p, "close %llu host", j);
  peer_end(&p, true);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- what the pool's figures say with holes ---------------------------------------------------- */

/* A chunk that became wholly free with holes in it: what a release gives back is what it maps, so
 * releasable bytes stay within the free bytes and the held bytes. */
RAP_TEST_P(VmmRelease, AWhollyFreeChunkWithHolesCountsItsMappedBytesReleasable, release_pool,
           release_pools) {
  rap_manager *rm = tu_manager();
  char *a, *b, *c;
  rap_allocator *pool = grown(rm, param, "", &a, &b, &c);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* a's four granules go */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));   /* the chunk is free whole, with the holes */
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.actual_bytes, 5 * G);
  RAP_CHECK_EQ(s.free_bytes, 5 * G);
  RAP_CHECK_EQ(s.releasable_bytes, 5 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 0);
  RAP_CHECK_EQ(tu_stats(tu_get(rm, "v")).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* percent_releasable:100 fires once every chunk is free whole, holes or not: the two chunks go back
 * and one of their size is taken, as without the holes. */
RAP_TEST_P(VmmRelease, AHeuristicAtAHundredPercentFiresOverAChunkWithHoles, release_pool,
           release_pools) {
  rap_manager *rm = tu_manager();
  rap_allocator *v = tu_make(rm, "v", "HostVmm", NULL, "reserve=16MiB granularity=64KiB");
  char opts[128];
  snprintf(opts, sizeof opts, "initial_size=%zu next_size=%zu heuristic=percent_releasable:100", G, G);
  rap_allocator *pool = tu_make(rm, "pool", param->strategy, "v", opts);
  char *a = tu_alloc(pool, 4 * G), *b = tu_alloc(pool, 4 * G), *c = tu_alloc(pool, G);
  RAP_CHECK(b == a + 4 * G && c == b + 4 * G);
  void *x = tu_alloc(v, G);   /* right after the chunk: the next growth makes a second chunk */
  RAP_CHECK((char *)x == c + G);
  char *d = tu_alloc(pool, G);
  RAP_CHECK_EQ(tu_stats(pool).chunk_count, 2);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* a's four granules go; the chunk stays (b, c live) */
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 6 * G);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));   /* every chunk free whole: the heuristic fires */
  RAP_CHECK_EQ(tu_stats(pool).chunk_count, 1);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(v, x, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_EQ(tu_stats(v).actual_bytes, 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A taker maps every mapping its bytes meet: what is left of the block may then be mapped whole,
 * and counts among the blocks that serve without a map while another block still has holes. */
RAP_TEST_P(VmmRelease, WhatATakerLeavesMappedCountsAsAWholeFreeBlock, release_pool, release_pools) {
  rap_manager *rm = tu_manager();
  char *a, *b, *c;
  rap_allocator *pool = grown(rm, param, "", &a, &b, &c);   /* mappings of 1, 3, 4 and 1 granules */
  char *d = tu_alloc(pool, 4 * G), *e = tu_alloc(pool, G);  /* and of 4 and 1 more */
  RAP_CHECK(d == c + G && e == d + 4 * G);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* a and b's three mappings go, and d's */
  RAP_CHECK_EQ(tu_stats(pool).actual_bytes, 2 * G);
  char *x = tu_alloc(pool, 6 * G);   /* maps a and b's three again: 2 granules left, mapped */
  RAP_CHECK(x == a);
  rap_stats s = tu_stats(pool);
  RAP_CHECK_EQ(s.actual_bytes, 10 * G);
  RAP_CHECK_EQ(s.free_bytes, 2 * G);
  RAP_CHECK_EQ(s.largest_free_block, 2 * G);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, e, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Observers hear of a hole only where pages went: a mapping another process keeps inside the free
 * block was told as part of the hole, and is told back as a fill when it stays, so that a
 * registrant does not take a block handed out there for unmapped memory. */
static void on_span(const rap_segment_event *ev, void *user) {
  long *holed = user;   /* granules told as a hole and not filled since, by index */
  if (ev->replay) return;
  for (size_t g = 0; g < ev->bytes / G; g++) {
    size_t i = ((size_t)((char *)ev->addr - (char *)holed[64]) / G) + g;
    if (i >= 64) continue;
    if (ev->kind == RAP_SEGMENT_HOLE) holed[i] = 1;
    else if (ev->kind == RAP_SEGMENT_FILL) holed[i] = 0;
  }
}

RAP_TEST(VmmRelease, AMappingKeptForAnotherProcessIsNotLeftToldAsAHole) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", EXPORTING, &pool));
  char *a = tu_alloc(pool, G), *b = tu_alloc(pool, G), *c = tu_alloc(pool, G), *d = tu_alloc(pool, G);
  RAP_CHECK(b == a + G && c == b + G && d == c + G);   /* four mappings of a granule */
  long holed[65] = {0};
  holed[64] = (long)(intptr_t)a;
  RAP_CHECK_OK(rap_allocator_observe(pool, on_span, holed));
  rap_ipc_desc db;
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  peer p;
  peer_start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &db, "host"));   /* b's mapping kept there */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);   /* a release: a's and c's go, b's stays */
  RAP_CHECK_EQ(mapped(pool), 2 * G);
  RAP_CHECK(holed[0] == 1 && holed[1] == 0 && holed[2] == 1);
  char *x = tu_alloc(pool, 3 * G);   /* all three again: none is told as a hole now */
  RAP_CHECK(x == a);
  RAP_CHECK(holed[0] == 0 && holed[1] == 0 && holed[2] == 0);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_allocator_unobserve(pool, on_span, holed));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, d, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
