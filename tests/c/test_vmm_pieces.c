/* test_vmm_pieces.c — free pages given back from inside a chunk: a pool over HostVmm(piece=)
 * unmaps the whole pieces inside its large free blocks (unmap_free=) when it would otherwise map
 * past its peak, and on rap_release, and maps them again before it hands the bytes out. Proven on what the kernel holds (mincore), on the platform's mapped bytes
 * and backend calls, on the pool's held bytes, on observers (told before an unmap, after a map:
 * the callbacks touch the bytes), and on the failure paths: a map refused (a status, the pool
 * consistent, a retry served), an unmap refused, a sleep and wake, a release, bad options.
 * DEVICE_VMM runs the same engine (tests/cuda/test_cuda_vmm.c).
 */
#define _DEFAULT_SOURCE 1   /* mincore */
#include "gate.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void rapi_vmm_fail_map_at(long nth);     /* platforms/vmm.c: the nth map from now is refused */
void rapi_vmm_fail_unmap_at(long nth);   /* and the nth unmap of a sleep or inside an allocation */
int  rapi_vmm_calls(rap_allocator *a, size_t *maps, size_t *unmaps);
size_t rapi_vmm_unmapped_inside(rap_allocator *a, void *lo, void *hi);

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define G (64 * KiB)   /* granularity and piece: small, so that ranges stay small */

/* A platform "v" in pieces of G with room for `reserve`, and a pool "pool" over it. */
static rap_allocator *pieces(rap_manager *rm, const char *strategy, size_t reserve, const char *pool_opts) {
  char opts[128];
  snprintf(opts, sizeof opts, "reserve=%zu granularity=%zu piece=%zu", reserve, G, G);
  tu_make(rm, "v", "HostVmm", NULL, opts);
  return tu_make(rm, "pool", strategy, "v", pool_opts);
}

static size_t mapped(rap_manager *rm) { return tu_stats(tu_get(rm, "v")).actual_bytes; }
static size_t held(rap_allocator *pool) { return tu_stats(pool).actual_bytes; }

static size_t maps(rap_manager *rm) {
  size_t m = 0, u = 0;
  RAP_CHECK_OK(rapi_vmm_calls(tu_get(rm, "v"), &m, &u));
  return m;
}

/* Pages of [p, p+n) the kernel holds (mincore: valid on an inaccessible range too). */
static size_t resident(const void *p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), count = (n + page - 1) / page, got = 0;
  unsigned char *vec = malloc(count);
  if (vec == NULL || mincore((void *)p, n, vec) != 0) {
    free(vec);
    return SIZE_MAX;
  }
  for (size_t i = 0; i < count; i++) got += vec[i] & 1;
  free(vec);
  return got;
}

/* One chunk of 16 granules, full: a small block, a large one of 8, one of 7.5. The large one
 * starts half way into a piece, so that 7 of the 9 pieces it meets lie wholly inside it. */
typedef struct layout {
  char *a, *big, *c;
} layout;

static layout lay_out(rap_allocator *pool) {
  layout l;
  l.a = tu_alloc(pool, G / 2);
  l.big = tu_alloc(pool, 8 * G);
  l.c = tu_alloc(pool, 15 * G / 2);
  RAP_CHECK(l.big == l.a + G / 2 && l.c == l.big + 8 * G);
  RAP_CHECK(((uintptr_t)l.a & (G - 1)) == 0);
  tu_fill(l.big, 8 * G, 7);   /* the kernel holds every page of it */
  return l;
}

RAP_TEST(VmmPieces, FreePiecesInsideAChunkGoBackAndComeBackOnReuse) {
  const char *strategies[] = {"ResourceAwarePool", "QuickPool", "DynamicPoolList"};
  for (unsigned s = 0; s < 3; s++) {
    rap_manager *rm = tu_manager();
    rap_allocator *pool = pieces(rm, strategies[s], 4 * MiB, "initial_size=1MiB next_size=1MiB");
    layout l = lay_out(pool);
    size_t before = mapped(rm), pool_before = held(pool);
    RAP_CHECK_EQ(before, 1 * MiB);
    RAP_CHECK_EQ(pool_before, 1 * MiB);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    RAP_CHECK_EQ(resident(l.a + G, 7 * G), 7 * G / page);
    size_t m_free = maps(rm);
    RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
    RAP_CHECK_EQ(held(pool), pool_before);   /* below the peak a free costs no call */
    RAP_CHECK_EQ(maps(rm), m_free);
    RAP_CHECK_OK(rap_release(pool));
    /* The seven whole pieces inside went: the platform maps less, the pool holds less, the kernel
     * holds none of their pages; the half pieces at the ends stay (the neighbours use them). */
    RAP_CHECK_EQ(held(pool), pool_before - 7 * G);   /* first: QuickPool merges its last free here */
    RAP_CHECK_EQ(mapped(rm), before - 7 * G);
    RAP_CHECK_EQ(resident(l.a + G, 7 * G), 0);
    RAP_CHECK_EQ(resident(l.big, G / 2), G / 2 / page);
    TU_CHECK(pool);
    /* The same request takes the same block back, mapped again and writable. */
    size_t m0 = maps(rm);
    char *again = tu_alloc(pool, 8 * G);
    RAP_CHECK(again == l.big);
    RAP_CHECK_EQ(maps(rm), m0 + 1);   /* the seven touching pieces in one call */
    RAP_CHECK_EQ(mapped(rm), before);
    RAP_CHECK_EQ(held(pool), pool_before);
    tu_fill(again, 8 * G, 9);
    RAP_CHECK(tu_stats(pool).actual_high_watermark == pool_before);
    TU_CHECK(pool);
    /* A small request out of the free block maps only the pieces it lies in. */
    RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
    RAP_CHECK_OK(rap_release(pool));
    RAP_CHECK_EQ(held(pool), pool_before - 7 * G);
    RAP_CHECK_EQ(mapped(rm), before - 7 * G);
    char *small = tu_alloc(pool, 4 * G);
    RAP_CHECK(small == l.big);
    RAP_CHECK_EQ(mapped(rm), before - 3 * G);   /* [big, big + 4G) meets five pieces: one was mapped */
    RAP_CHECK_EQ(held(pool), pool_before - 3 * G);
    tu_fill(small, 4 * G, 3);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_deallocate(pool, small, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
    TU_CHECK(pool);
    /* Everything free: the release gives the chunk back, holes and all, and the counts agree. */
    RAP_CHECK_OK(rap_release(pool));
    RAP_CHECK_EQ(held(pool), 0);
    RAP_CHECK_EQ(mapped(rm), 0);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* The policy: a free below the peak keeps its pages (no call); when the pool would map past its
 * peak (here growth for a request no free block fits), the free pieces go back first, so the peak
 * rises only by what the request needs. */
RAP_TEST(VmmPieces, MappingPastThePeakGivesFreePiecesBackFirst) {
  const char *strategies[] = {"ResourceAwarePool", "QuickPool", "DynamicPoolList"};
  for (unsigned s = 0; s < 3; s++) {
    rap_manager *rm = tu_manager();
    rap_allocator *pool = pieces(rm, strategies[s], 4 * MiB, "initial_size=1MiB next_size=1MiB");
    layout l = lay_out(pool);
    RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
    RAP_CHECK_EQ(held(pool), 16 * G);
    RAP_CHECK_EQ(mapped(rm), 16 * G);
    /* No free block fits: the chunk grows by the 9 granules x lacks (a 32nd of what the pool
     * holds is less than a granule), and the 7 free pieces go back first. */
    char *x = tu_alloc(pool, 9 * G);
    RAP_CHECK(x == l.a + 16 * G);
    RAP_CHECK_EQ(held(pool), 25 * G - 7 * G);
    RAP_CHECK_EQ(mapped(rm), 25 * G - 7 * G);
    RAP_CHECK_EQ(tu_stats(pool).actual_high_watermark, 25 * G - 7 * G);
    tu_fill(x, 9 * G, 8);
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
    TU_CHECK(pool);
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

RAP_TEST(VmmPieces, UnmapFreeSetsTheThresholdAndZeroTurnsItOff) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "QuickPool", 4 * MiB, "initial_size=1MiB unmap_free=512KiB");
  layout l = lay_out(pool);
  size_t before = mapped(rm);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(held(pool), before);   /* 448 KiB of whole pieces inside: below 512 KiB */
  RAP_CHECK_EQ(mapped(rm), before);
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));

  rm = tu_manager();
  pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB unmap_free=0");
  l = lay_out(pool);
  before = mapped(rm);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(mapped(rm), before);
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));

  /* A platform without piece= maps growth whole: nothing inside a chunk goes back. */
  rm = tu_manager();
  char opts[96];
  snprintf(opts, sizeof opts, "reserve=%zu granularity=%zu", 4 * MiB, G);
  tu_make(rm, "v", "HostVmm", NULL, opts);
  pool = tu_make(rm, "pool", "ResourceAwarePool", "v", "initial_size=1MiB");
  l = lay_out(pool);
  before = mapped(rm);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(mapped(rm), before);
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- observers ---------------------------------------------------------------------------- */

typedef struct seen {
  int n, hole, fill, unmap, map;
  size_t hole_bytes, fill_bytes;
  int untouchable;   /* events whose bytes were not writable when they should have been */
} seen;

static void on_pool(const rap_segment_event *ev, void *user) {
  seen *s = user;
  s->n++;
  if (ev->kind == RAP_SEGMENT_HOLE) {
    s->hole++;
    s->hole_bytes += ev->bytes;
    memset(ev->addr, 0x5A, ev->bytes);   /* told before: faults if the pages were gone already */
  } else if (ev->kind == RAP_SEGMENT_FILL) {
    s->fill++;
    s->fill_bytes += ev->bytes;
    memset(ev->addr, 0xA5, ev->bytes);   /* told after: faults if not mapped yet */
  }
  if ((char *)ev->addr < (char *)ev->base || (char *)ev->addr + ev->bytes > (char *)ev->base + ev->size)
    s->untouchable++;
}

static void on_platform(const rap_segment_event *ev, void *user) {
  seen *s = user;
  s->n++;
  if (ev->kind == RAP_SEGMENT_UNMAP) s->unmap++;
  if (ev->kind == RAP_SEGMENT_MAP) s->map++;
  if (ev->kind == RAP_SEGMENT_UNMAP || ev->kind == RAP_SEGMENT_MAP) memset(ev->addr, 0x11, ev->bytes);
}

RAP_TEST(VmmPieces, ObserversHearOfHolesBeforeAndFillsAfter) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB");
  layout l = lay_out(pool);
  seen sp = {0}, sv = {0};
  RAP_CHECK_OK(rap_allocator_observe(pool, on_pool, &sp));
  RAP_CHECK_OK(rap_allocator_observe(tu_get(rm, "v"), on_platform, &sv));
  int replayed = sv.n;
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(sp.hole, 1);
  RAP_CHECK_EQ(sp.hole_bytes, 7 * G);
  RAP_CHECK_EQ(sp.fill, 0);
  RAP_CHECK_EQ(sv.unmap, 7);   /* the platform's segments are its pieces, each told */
  char *again = tu_alloc(pool, 8 * G);
  RAP_CHECK_EQ(sp.fill, 1);
  RAP_CHECK_EQ(sp.fill_bytes, 9 * G);   /* the pieces it meets, the ends' mapped ones too */
  RAP_CHECK_EQ(sv.map - replayed, 7);
  RAP_CHECK_EQ(sp.untouchable, 0);
  RAP_CHECK_OK(rap_allocator_unobserve(pool, on_pool, &sp));
  RAP_CHECK_OK(rap_allocator_unobserve(tu_get(rm, "v"), on_platform, &sv));
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- failures ----------------------------------------------------------------------------- */

RAP_TEST(VmmPieces, AMapRefusedGivesAStatusAndLeavesThePoolWhole) {
  /* No room to grow: the reserve is the one chunk, so the refused map is the answer. */
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "QuickPool", 1 * MiB, "initial_size=1MiB next_size=1MiB");
  layout l = lay_out(pool);
  size_t before = mapped(rm);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  size_t held_then = held(pool);
  RAP_CHECK_EQ(held_then, before - 7 * G);
  RAP_CHECK_EQ(mapped(rm), before - 7 * G);
  void *x = NULL;
  rapi_vmm_fail_map_at(1);
  int st = rap_allocate(pool, &x, 8 * G, NULL);
  rapi_vmm_fail_map_at(0);
  RAP_CHECK_STATUS(st, RAP_ERR_NOMEM);
  RAP_CHECK(x == NULL);
  /* Out of memory, the pool gave back its free end too (as any pool over a growable platform
   * does); the holes stayed holes and the counts agree. */
  RAP_CHECK(held(pool) <= held_then);
  RAP_CHECK_EQ(mapped(rm), held(pool));
  TU_CHECK(pool);
  /* The block stayed free, with its holes: the next try maps them. */
  char *again = tu_alloc(pool, 8 * G);
  RAP_CHECK(again == l.big);
  tu_fill(again, 8 * G, 1);
  RAP_CHECK_EQ(mapped(rm), held(pool));
  RAP_CHECK(mapped(rm) <= before);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(VmmPieces, AResourceAwarePoolServesFromElsewhereWhenAMapIsRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=1MiB");
  layout l = lay_out(pool);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  void *x = NULL;
  rapi_vmm_fail_map_at(1);   /* the first look's map is refused; its second look maps */
  RAP_CHECK_OK(rap_allocate(pool, &x, 8 * G, NULL));
  rapi_vmm_fail_map_at(0);
  tu_fill(x, 8 * G, 2);
  TU_CHECK(pool);
  RAP_CHECK_EQ(held(pool), mapped(rm));
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(VmmPieces, AnUnmapRefusedKeepsThePagesAndTheCounts) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB");
  layout l = lay_out(pool);
  size_t before = mapped(rm), pool_before = held(pool);
  seen sp = {0};
  RAP_CHECK_OK(rap_allocator_observe(pool, on_pool, &sp));
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  rapi_vmm_fail_unmap_at(1);
  RAP_CHECK_OK(rap_release(pool));   /* logged: the release itself succeeds */
  rapi_vmm_fail_unmap_at(0);
  RAP_CHECK_EQ(mapped(rm), before);
  RAP_CHECK_EQ(held(pool), pool_before);
  RAP_CHECK_EQ(sp.hole, 1);
  RAP_CHECK_EQ(sp.fill, 1);   /* nothing went: observers hear it is all there again */
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_allocator_unobserve(pool, on_pool, &sp));
  char *again = tu_alloc(pool, 8 * G);
  tu_fill(again, 8 * G, 4);
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(VmmPieces, SleepAndWakeMapTheHolesAgain) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=1MiB");
  layout l = lay_out(pool);
  tu_fill(l.a, G / 2, 5);
  RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(held(pool), mapped(rm));
  RAP_CHECK(held(pool) < 1 * MiB);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  /* The wake maps every piece of the chunk: the pool counts them all again, has no holes left
   * (the next take maps nothing), and what was live is intact. */
  RAP_CHECK_EQ(held(pool), mapped(rm));
  TU_CHECK(pool);
  RAP_CHECK(tu_intact(l.a, G / 2, 5));
  size_t m0 = maps(rm);
  char *again = tu_alloc(pool, 8 * G);
  RAP_CHECK_EQ(maps(rm), m0);
  tu_fill(again, 8 * G, 6);
  RAP_CHECK_OK(rap_deallocate(pool, again, NULL));   /* and holes come again afterwards */
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK_EQ(held(pool), mapped(rm));
  RAP_CHECK(held(pool) < 1 * MiB);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(VmmPieces, BadOptionsSayWhich) {
  rap_manager *rm = tu_manager();
  rap_allocator *a = NULL;
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=64KiB piece=96KiB", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "piece");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "granularity=128KiB piece=64KiB", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "multiple of the granularity");
  RAP_CHECK_STATUS(rap_allocator_make(rm, "v", "HostVmm", NULL, "export=posix piece=2MiB", &a),
                   RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "export=");
  tu_make(rm, "h", "QuickPool", "HOST", NULL);
  RAP_CHECK_STATUS(rap_allocator_make(rm, "p", "QuickPool", "HOST", "unmap_free=4MiB", &a),
                   RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "piece=");
  RAP_CHECK_OK(rap_allocator_make(rm, "p", "QuickPool", "HOST", "unmap_free=0", &a));   /* off: fine */
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A resource's own pending block joined with two free neighbours that both have holes, past the
 * peak: mapping the second neighbour's pieces must not give back the first's, which is about to
 * be handed out in the joined block. Every byte handed out is mapped. */
RAP_TEST(VmmPieces, PendingJoinedWithTwoFreeNeighboursWithHolesIsMappedWhole) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=1MiB");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  gate g;
  gate_init(&g);
  /* One chunk of 16 granules: a (1) | f1 (4) | p (1/2) | f2 (4) | rest (6.5), all used. */
  char *a = tu_alloc(pool, G);
  char *f1 = tu_alloc(pool, 4 * G);
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, G / 2, r1));
  char *f2 = tu_alloc(pool, 4 * G);
  char *rest = tu_alloc(pool, 13 * G / 2);
  RAP_CHECK(f1 == a + G && (char *)p == f1 + 4 * G && f2 == (char *)p + G / 2 && rest == f2 + 4 * G);
  RAP_CHECK_EQ(held(pool), 16 * G);
  RAP_CHECK_OK(rap_resource_submit(r1, gate_job, &g));   /* r1 busy: p stays pending */
  RAP_CHECK_OK(rap_deallocate(pool, p, r1));   /* its free neighbours are over 4 times its size */
  RAP_CHECK_OK(rap_deallocate(pool, f1, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, f2, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* f1's 4 whole pieces and f2's 3 go back */
  RAP_CHECK_EQ(held(pool), 9 * G);
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, G / 2);
  /* No free block holds 8 granules, r1's pending block with both neighbours does: r1 takes them
   * joined. Mapping f1's pieces stays below the peak; f2's then goes past it. */
  void *x = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &x, 8 * G, r1));
  RAP_CHECK(x == (void *)f1);
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f1, f1 + 9 * G), 0);
  TU_CHECK(pool);
  RAP_CHECK_EQ(held(pool), mapped(rm));
  if (rapi_vmm_unmapped_inside(tu_get(rm, "v"), f1, f1 + 9 * G) == 0) tu_fill(x, 8 * G, 5);
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_deallocate(pool, x, r1));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, rest, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

typedef struct late {
  int map, hole, replayed_hole;
  size_t hole_bytes;
} late;

static void on_late(const rap_segment_event *ev, void *user) {
  late *s = user;
  if (ev->kind == RAP_SEGMENT_MAP) s->map++;
  if (ev->kind == RAP_SEGMENT_HOLE) {
    s->hole++;
    s->hole_bytes += ev->bytes;
    s->replayed_hole += ev->replay;
  }
}

/* An observer that comes after free pages went hears of them in the replay: the chunk's MAP, then
 * a HOLE over them (a registrant of the whole chunk would otherwise take unmapped pages for
 * mapped ones). */
RAP_TEST(VmmPieces, ALateObserverHearsOfTheHolesInTheReplay) {
  const char *strategies[] = {"ResourceAwarePool", "QuickPool", "DynamicPoolList"};
  for (unsigned s = 0; s < 3; s++) {
    rap_manager *rm = tu_manager();
    rap_allocator *pool = pieces(rm, strategies[s], 4 * MiB, "initial_size=1MiB next_size=1MiB");
    layout l = lay_out(pool);
    RAP_CHECK_OK(rap_deallocate(pool, l.big, NULL));
    RAP_CHECK_OK(rap_release(pool));   /* 7 whole pieces inside go */
    late lt = {0};
    RAP_CHECK_OK(rap_allocator_observe(pool, on_late, &lt));
    RAP_CHECK_EQ(lt.map, 1);
    RAP_CHECK_EQ(lt.hole, 1);
    RAP_CHECK_EQ(lt.replayed_hole, 1);
    RAP_CHECK_EQ(lt.hole_bytes, 7 * G);
    RAP_CHECK_OK(rap_allocator_unobserve(pool, on_late, &lt));
    RAP_CHECK_OK(rap_deallocate(pool, l.a, NULL));
    RAP_CHECK_OK(rap_deallocate(pool, l.c, NULL));
    RAP_CHECK_OK(rap_manager_destroy(rm));
  }
}

/* A map of pieces refused half way is undone; where undoing it is refused too, the piece that
 * stays mapped is counted as held again: the pool's held bytes stay the platform's mapped ones. */
RAP_TEST(VmmPieces, AMapUndoneOnlyInPartKeepsHeldEqualToMapped) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "QuickPool", 4 * MiB, "initial_size=1MiB next_size=1MiB");
  char *x1 = tu_alloc(pool, 4 * G);
  char *u = tu_alloc(pool, G);
  char *x2 = tu_alloc(pool, 4 * G);
  char *rest = tu_alloc(pool, 7 * G);
  RAP_CHECK(((uintptr_t)x1 & (G - 1)) == 0 && u == x1 + 4 * G && x2 == u + G && rest == x2 + 4 * G);
  RAP_CHECK_OK(rap_deallocate(pool, x1, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, x2, NULL));
  RAP_CHECK_OK(rap_release(pool));   /* x1's 4 pieces and x2's 4 go */
  RAP_CHECK_OK(rap_deallocate(pool, u, NULL));   /* one free block, holes in two runs */
  RAP_CHECK_EQ(held(pool), 8 * G);
  RAP_CHECK_EQ(mapped(rm), 8 * G);
  /* Taking it maps x1's run, then x2's is refused; of x1's run undone, the first piece's unmap is
   * refused: it stays mapped. The pool serves the request by growing. */
  rapi_vmm_fail_map_at(2);
  rapi_vmm_fail_unmap_at(1);
  void *y = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &y, 9 * G, NULL));
  rapi_vmm_fail_map_at(0);
  rapi_vmm_fail_unmap_at(0);
  RAP_CHECK(y != (void *)x1);
  RAP_CHECK_EQ(held(pool), mapped(rm));
  TU_CHECK(pool);
  char *z = tu_alloc(pool, 9 * G);   /* the rest of the block maps; all of it is touchable */
  RAP_CHECK(z == x1);
  tu_fill(z, 9 * G, 3);
  RAP_CHECK_EQ(held(pool), mapped(rm));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, rest, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- at the peak, memory the pool maps serves before memory it would map anew ----------------
 * Each layout is one chunk of 16 granules, all used; then f, a free block of whole pieces, gives
 * them back because a request no free block fits grows the chunk past its peak: the pool is then
 * at its peak, holding f with holes. */

/* Grows the pool past its peak for a request of 5 granules, so that f's pieces go back. */
static char *grow_past_the_peak(rap_allocator *pool, rap_manager *rm, char *f, size_t f_size) {
  RAP_CHECK_OK(rap_deallocate(pool, f, NULL));
  char *w = tu_alloc(pool, 5 * G);
  RAP_CHECK_EQ(held(pool), 17 * G);   /* 16 - f's 4 pieces + 5 mapped */
  RAP_CHECK_EQ(tu_stats(pool).actual_high_watermark, 17 * G);
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f, f + f_size), f_size);
  return w;
}

/* A block freed on a stream joins a free neighbour as its pending bytes; where that neighbour has
 * holes and mapping them would pass the peak, it stays apart: a deallocation never raises what the
 * pool holds. Below the peak (after a release) the join maps them as before. */
RAP_TEST(VmmPieces, AFreeAtThePeakLeavesANeighboursHolesUnmapped) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=64KiB");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  /* x (4, on r1) | f (4) | y (2) | z (6) */
  void *x = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &x, 4 * G, r1));
  char *f = tu_alloc(pool, 4 * G), *y = tu_alloc(pool, 2 * G), *z = tu_alloc(pool, 6 * G);
  RAP_CHECK(f == (char *)x + 4 * G && y == f + 4 * G && z == y + 2 * G);
  char *w = grow_past_the_peak(pool, rm, f, 4 * G);
  size_t m0 = maps(rm);
  RAP_CHECK_OK(rap_deallocate(pool, x, r1));   /* f is 4 granules, x's size: it would join */
  RAP_CHECK_EQ(held(pool), 17 * G);
  RAP_CHECK_EQ(maps(rm), m0);
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 4 * G);   /* x alone */
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f, f + 4 * G), 4 * G);
  TU_CHECK(pool);
  /* r1 takes x back: mapped memory, no call. */
  void *again = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &again, 4 * G, r1));
  RAP_CHECK(again == x);
  RAP_CHECK_EQ(maps(rm), m0);
  tu_fill(again, 4 * G, 1);
  /* Below the peak the join maps the neighbour whole, as it did: a release first gives back w's
   * pieces (freed on the host). */
  RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
  RAP_CHECK_OK(rap_release(pool));
  RAP_CHECK(held(pool) + 4 * G <= tu_stats(pool).actual_high_watermark);
  RAP_CHECK_OK(rap_deallocate(pool, again, r1));
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 8 * G);   /* x and f joined */
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f, f + 4 * G), 0);
  RAP_CHECK_EQ(held(pool), mapped(rm));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* At the peak a stream's own pending block, larger than the best free block but mapped, serves
 * before the free block's holes are mapped. r1 is kept busy by a gate: its block stays pending
 * through the poll the pool makes first. */
RAP_TEST(VmmPieces, AtThePeakAStreamsOwnPendingBlockServesBeforeHoles) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=64KiB");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  gate g;
  gate_init(&g);
  /* x (8, on r1) | s (1) | f (4) | y (2) | z (1) */
  void *x = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &x, 8 * G, r1));
  char *s = tu_alloc(pool, G), *f = tu_alloc(pool, 4 * G), *y = tu_alloc(pool, 2 * G), *z = tu_alloc(pool, G);
  RAP_CHECK(s == (char *)x + 8 * G && f == s + G && y == f + 4 * G && z == y + 2 * G);
  char *w = grow_past_the_peak(pool, rm, f, 4 * G);
  RAP_CHECK_OK(rap_resource_submit(r1, gate_job, &g));   /* r1 busy: x stays pending */
  RAP_CHECK_OK(rap_deallocate(pool, x, r1));
  size_t m0 = maps(rm);
  void *p = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &p, 4 * G, r1));   /* f fits better, but has holes */
  RAP_CHECK(p == x);
  RAP_CHECK_EQ(held(pool), 17 * G);
  RAP_CHECK_EQ(maps(rm), m0);
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 4 * G);   /* x's other half, still r1's */
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f, f + 4 * G), 4 * G);
  tu_fill(p, 4 * G, 2);
  TU_CHECK(pool);
  gate_open(&g);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_deallocate(pool, p, r1));
  RAP_CHECK_OK(rap_deallocate(pool, s, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gate_destroy(&g);
}

/* At the peak, before the best free block's holes are mapped, pending memory whose batch has
 * passed comes back: here r1's block, freed on an idle queue and never fenced, is the host's exact
 * fit once it is free. */
RAP_TEST(VmmPieces, AtThePeakPassedPendingMemoryComesBackBeforeHolesAreMapped) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = pieces(rm, "ResourceAwarePool", 4 * MiB, "initial_size=1MiB next_size=64KiB");
  rap_resource *r1;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &r1));
  /* q (2, on r1) | s (1) | f (4) | y (2) | z (7) */
  void *q = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &q, 2 * G, r1));
  char *s = tu_alloc(pool, G), *f = tu_alloc(pool, 4 * G), *y = tu_alloc(pool, 2 * G), *z = tu_alloc(pool, 7 * G);
  RAP_CHECK(s == (char *)q + 2 * G && f == s + G && y == f + 4 * G && z == y + 2 * G);
  char *w = grow_past_the_peak(pool, rm, f, 4 * G);
  RAP_CHECK_OK(rap_deallocate(pool, q, r1));
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 2 * G);
  size_t m0 = maps(rm);
  char *p = tu_alloc(pool, 2 * G);   /* the host: f is the only free block that fits */
  RAP_CHECK(p == (char *)q);
  RAP_CHECK_EQ(held(pool), 17 * G);
  RAP_CHECK_EQ(maps(rm), m0);
  RAP_CHECK_EQ(tu_stats(pool).pending_bytes, 0);
  RAP_CHECK_EQ(rapi_vmm_unmapped_inside(tu_get(rm, "v"), f, f + 4 * G), 4 * G);
  tu_fill(p, 2 * G, 3);
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_deallocate(pool, p, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, s, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, z, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, w, NULL));
  TU_CHECK(pool);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
