/* pairs.c — allocate+free pairs: (a) one size at a time on device memory; (h) one size at a time
 * and a log-uniform mix 64 B..64 KiB on host memory, QuickPool with alignment 16 against glibc
 * malloc and mimalloc; (c) the pair's cost with 10..10^6 other blocks live (c-host: over host
 * memory).
 *
 * A pair is two indirect calls into the peer; measure() times opt.rep_ms of them per repetition.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>

static const char *fmt_size(size_t n, char *buf, size_t cap) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(buf, cap, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0) snprintf(buf, cap, "%zu KiB", n >> 10);
  else snprintf(buf, cap, "%zu B", n);
  return buf;
}

typedef struct pair_arg {
  bench_peer *p;
  const size_t *sizes;   /* sizes[i & mask] */
  size_t mask;
  int stream;
} pair_arg;

static int pair_loop(void *arg, long iters) {
  pair_arg *a = arg;
  bench_peer *p = a->p;
  for (long i = 0; i < iters; i++) {
    void *ptr;
    size_t n = a->sizes[(size_t)i & a->mask];
    if (p->alloc(p->ctx, &ptr, n, a->stream) != 0) return -1;
    if (p->free(p->ctx, ptr, n, a->stream) != 0) return -1;
  }
  return 0;
}

/* ---- (a) and (h): pairs of one size ----------------------------------------------------------- */

static void pairs(const char *wl, const pdesc *peers, size_t npeers, const size_t *sizes,
                  size_t nsizes, int mixed_lo, int mixed_hi) {
  double samples[64];
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    for (size_t i = 0; i <= nsizes; i++) {
      size_t one, mixed[1024];
      pair_arg a = {&p, &one, 0, 1};
      char cas[40];
      if (i < nsizes) {
        one = sizes[i];
        fmt_size(one, cas, sizeof cas);
      } else {
        if (mixed_hi == 0) break;
        uint64_t seed = 42;
        for (int j = 0; j < 1024; j++) mixed[j] = log_uniform(&seed, (size_t)mixed_lo, (size_t)mixed_hi);
        a.sizes = mixed;
        a.mask = 1023;
        char lo[16], hi[16];
        snprintf(cas, sizeof cas, "mixed %s..%s", fmt_size((size_t)mixed_lo, lo, sizeof lo),
                 fmt_size((size_t)mixed_hi, hi, sizeof hi));
      }
      /* One pair first, untimed: a pool's first call makes its first chunk (a cudaMalloc of
       * 512 MiB for rap's default), which would otherwise end measure()'s calibration at one
       * iteration and leave repetitions of a few pairs, timer-bound. */
      int n = pair_loop(&a, 1) == 0 ? measure(pair_loop, &a, samples) : 0;
      if (n == 0) {
        peer_failed(wl, &p, cas);
        break;
      }
      add_row(wl, cas, p.name, "ns/pair", samples, n, k == 0);
    }
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
}

/* ---- (c): pair cost against the number of live blocks ----------------------------------------- */

typedef struct scale_peer {
  pdesc d;
  const long *counts;   /* 0-terminated */
} scale_peer;

/* Every count gets a fresh peer, filled with live + live/10 blocks before the timing: at 10^6 live
 * the filling takes longer than the measurement. */
static void scaling(const char *wl, const scale_peer *peers, size_t npeers) {
  size_t sizes[1024];
  uint64_t seed = 7;
  for (int j = 0; j < 1024; j++) sizes[j] = log_uniform(&seed, 256, 4096);
  for (size_t k = 0; k < npeers; k++) {
    for (const long *c = peers[k].counts; *c; c++) {
      long live = *c;
      if (opt.quick && live > 10000) continue;
      bench_peer p;
      if (open_peer(wl, &peers[k].d, &p) != 0) break;
      /* live + live/10 blocks, then a random tenth freed: holes among the live blocks. */
      size_t total = (size_t)(live + live / 10);
      void **ptrs = malloc(total * sizeof *ptrs);
      size_t *bytes = malloc(total * sizeof *bytes);
      int ok = ptrs && bytes;
      uint64_t s2 = 11;
      for (size_t i = 0; ok && i < total; i++) {
        bytes[i] = log_uniform(&s2, 256, 4096);
        if (p.alloc(p.ctx, &ptrs[i], bytes[i], 1) != 0) {
          total = i;
          ok = 0;
        }
      }
      for (size_t i = total; ok && i > 1 && i > (size_t)live; i--) {   /* shuffle the tail */
        size_t j = splitmix(&s2) % i;
        void *tp = ptrs[i - 1];
        size_t tb = bytes[i - 1];
        ptrs[i - 1] = ptrs[j], bytes[i - 1] = bytes[j];
        ptrs[j] = tp, bytes[j] = tb;
      }
      for (size_t i = (size_t)live; ok && i < total; i++)
        if (p.free(p.ctx, ptrs[i], bytes[i], 1) != 0) ok = 0;
      size_t keep = ok ? (size_t)live : total;
      double samples[64];
      char cas[40];
      snprintf(cas, sizeof cas, "%ld live", live);
      if (ok) {
        pair_arg a = {&p, sizes, 1023, 1};
        int n = measure(pair_loop, &a, samples);
        if (n == 0) ok = 0;
        else add_row(wl, cas, p.name, "ns/pair", samples, n, k == 0);
      }
      if (!ok) peer_failed(wl, &p, cas);
      for (size_t i = 0; ptrs && bytes && i < keep; i++) p.free(p.ctx, ptrs[i], bytes[i], 1);
      free(ptrs);
      free(bytes);
      sync_device();
      p.destroy(p.ctx);
      progress("  (%s) %s at %ld live done", wl, p.name, live);
      if (!ok) break;
    }
  }
}

/* ---- the workloads' peers and sizes ----------------------------------------------------------- */

void wl_a(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE)", 0},
      {P_RAP, "rap QuickPool", "QuickPool(DEVICE)", 0},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE)", 0},
      /* Cached at every size of (a): by default ThreadCache caches up to 1 MiB, 4 MiB a thread. */
      {P_RAP, "rap ThreadCache(ResourceAwarePool)",
       "ThreadCache(ResourceAwarePool(DEVICE), max_size=64MiB, cache_bytes=256MiB)", 0},
      {P_RAP, "rap ThreadCache(QuickPool)",
       "ThreadCache(QuickPool(DEVICE), max_size=64MiB, cache_bytes=256MiB)", 0},
      {P_RAP, "rap StreamOrdered", "StreamOrdered(pool=new, release_threshold=max)", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0},
      {P_TORCH, 0, 0, 0}, {P_RMM_POOL, 0, 0, 0}, {P_RMM_ARENA, 0, 0, 0}, {P_RMM_BINNING, 0, 0, 0},
      {P_RMM_ASYNC, 0, 0, 0}, {P_RMM_CUDA, 0, 0, 0}, {P_UMPIRE_QP, 0, 0, 0}, {P_CUDA_MALLOC, 0, 0, 0},
      {P_LOCAL, 0, 0, 0},   /* the floor of a pair through the bench's calls (host memory) */
  };
  static const size_t sizes[] = {256, 64 << 10, 1 << 20, 64 << 20};
  pairs("a", peers, sizeof peers / sizeof *peers, sizes, 4, 0, 0);
}

void wl_h(void) {
  static const pdesc peers[] = {
      {P_MALLOC, 0, 0, 0},
      {P_RAP, "rap QuickPool alignment=16", "QuickPool(HOST, alignment=16)", 0},
      {P_RAP, "rap ResourceAwarePool alignment=16", "ResourceAwarePool(HOST, alignment=16)", 0},
      {P_RAP, "rap DynamicPoolList alignment=16", "DynamicPoolList(HOST, alignment=16)", 0},
      {P_RAP, "rap ThreadCache(ResourceAwarePool) alignment=16",
       "ThreadCache(ResourceAwarePool(HOST, alignment=16), max_size=64MiB, cache_bytes=256MiB)", 0},
      {P_RAP, "rap ThreadCache(QuickPool) alignment=16",
       "ThreadCache(QuickPool(HOST, alignment=16), max_size=64MiB, cache_bytes=256MiB)", 0},
      {P_MIMALLOC, 0, 0, 0}, {P_TCMALLOC, 0, 0, 0}, {P_LOCAL, 0, 0, 0},
  };
  static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536};
  pairs("h", peers, sizeof peers / sizeof *peers, sizes, 6, 64, 65536);
}

/* Live counts for (c), 0-terminated; --quick stops at 10^4. */
static const long big[] = {100, 10000, 1000000, 0}, small[] = {100, 10000, 0},
                  qp_counts[] = {10, 100, 1000, 10000, 100000, 1000000, 0},
                  dpl_counts[] = {10, 1000, 100000, 0};

void wl_c(void) {
  static const scale_peer peers[] = {
      {{P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE)", 0}, big},
      {{P_RAP, "rap QuickPool", "QuickPool(DEVICE)", 0}, qp_counts},
      {{P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE)", 0}, dpl_counts},
      {{P_ASYNC_FRESH, 0, 0, 0}, big}, {{P_CUB, 0, 0, 0}, small}, {{P_TORCH, 0, 0, 0}, big},
  };
  scaling("c", peers, sizeof peers / sizeof *peers);
}

void wl_c_host(void) {
  static const scale_peer peers[] = {
      {{P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(HOST)", 0}, big},
      {{P_RAP, "rap QuickPool", "QuickPool(HOST)", 0}, qp_counts},
      {{P_RAP, "rap DynamicPoolList", "DynamicPoolList(HOST)", 0}, dpl_counts},
      {{P_MALLOC, 0, 0, 0}, qp_counts}, {{P_MIMALLOC, 0, 0, 0}, qp_counts},
  };
  scaling("c-host", peers, sizeof peers / sizeof *peers);
}
