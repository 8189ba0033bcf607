/* threads.c — (e): 1, 4 and 16 threads on thread-safe allocators, operations (allocations plus
 * frees) per second over all threads, device memory, 256 B..64 KiB; e-host: host memory,
 * 64 B..64 KiB. Thread i uses side stream 1 + i % 4.
 */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Each thread frees and allocates in a ring of 8 blocks until the main thread says stop, after
 * opt.rep_ms: the time is bounded even when a lock makes every operation a hand-over between
 * cores. */
typedef struct thr_shared {
  bench_peer *p;
  size_t lo, hi;
  pthread_barrier_t start, stop;
  atomic_int halt, failed;
  atomic_llong ops;
} thr_shared;

typedef struct thr_arg {
  thr_shared *sh;
  int id;
} thr_arg;

static void *thr_main(void *arg) {
  thr_arg *ta = arg;
  thr_shared *sh = ta->sh;
  bench_peer *p = sh->p;
  size_t sizes[256];
  void *ring[8] = {0};
  size_t ring_n[8] = {0};
  uint64_t seed = 1000 + (uint64_t)ta->id;
  for (int j = 0; j < 256; j++) sizes[j] = log_uniform(&seed, sh->lo, sh->hi);
  int stream = 1 + ta->id % 4, failed = 0;
  long long ops = 0;
  pthread_barrier_wait(&sh->start);
  for (long i = 0; !failed; i++) {
    if ((i & 63) == 0 && atomic_load_explicit(&sh->halt, memory_order_relaxed)) break;
    int slot = (int)(i & 7);
    if (ring[slot]) {
      if (p->free(p->ctx, ring[slot], ring_n[slot], stream) != 0) failed = 1;
      ops++;
    }
    ring_n[slot] = sizes[i & 255];
    if (p->alloc(p->ctx, &ring[slot], ring_n[slot], stream) != 0) {
      ring[slot] = NULL;
      failed = 1;
    }
    ops++;
  }
  atomic_fetch_add(&sh->ops, ops);
  if (failed) atomic_store(&sh->failed, 1);
  pthread_barrier_wait(&sh->stop);
  for (int j = 0; j < 8; j++)
    if (ring[j]) p->free(p->ctx, ring[j], ring_n[j], stream);
  return NULL;
}

/* Operations (allocations plus frees) per second over all threads; -1 on failure. */
static double run_threads(bench_peer *p, int nthreads, size_t lo, size_t hi) {
  thr_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.p = p;
  sh.lo = lo;
  sh.hi = hi;
  atomic_init(&sh.halt, 0);
  atomic_init(&sh.failed, 0);
  atomic_init(&sh.ops, 0);
  pthread_t tid[64];
  thr_arg ta[64];
  pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&sh.stop, NULL, (unsigned)nthreads + 1);
  for (int t = 0; t < nthreads; t++) {
    ta[t] = (thr_arg){&sh, t};
    if (pthread_create(&tid[t], NULL, thr_main, &ta[t]) != 0) abort();   /* barriers need all */
  }
  pthread_barrier_wait(&sh.start);
  double t0 = now_ns();
  struct timespec nap = {0, (long)(opt.rep_ms * 1e6)};
  nanosleep(&nap, NULL);
  atomic_store(&sh.halt, 1);
  pthread_barrier_wait(&sh.stop);
  double t = now_ns() - t0;
  for (int i = 0; i < nthreads; i++) pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&sh.start);
  pthread_barrier_destroy(&sh.stop);
  sync_device();
  return atomic_load(&sh.failed) ? -1 : (double)atomic_load(&sh.ops) / (t / 1e9);
}

static void threads(const char *wl, const pdesc *peers, size_t npeers, size_t lo, size_t hi) {
  static const int counts[] = {1, 4, 16};
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    int failed = run_threads(&p, 4, lo, hi) < 0;   /* warm-up */
    if (failed) peer_failed(wl, &p, "the warm-up");
    for (size_t c = 0; c < 3 && !failed; c++) {
      double samples[64];
      int n = 0;
      for (int r = 0; r < opt.reps && !failed; r++) {
        double ops = run_threads(&p, counts[c], lo, hi);
        if (ops < 0) failed = 1;
        else samples[n++] = ops / 1e6;
      }
      char cas[40];
      snprintf(cas, sizeof cas, "%d thread%s", counts[c], counts[c] > 1 ? "s" : "");
      if (failed) peer_failed(wl, &p, cas);
      else add_row(wl, cas, p.name, "Mops/s", samples, n, k == 0);
    }
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
}

/* ---- the workloads' peers --------------------------------------------------------------------- */

void wl_e(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(DEVICE))", 0},
      {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(DEVICE))", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
  };
  threads("e", peers, sizeof peers / sizeof *peers, 256, 64 << 10);
}

void wl_e_host(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(HOST, alignment=16))", 0},
      {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(HOST, alignment=16))", 0},
      {P_MALLOC, 0, 0, 0},
  };
  threads("e-host", peers, sizeof peers / sizeof *peers, 64, 64 << 10);
}
