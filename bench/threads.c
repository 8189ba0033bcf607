/* threads.c — threads on thread-safe allocators, operations (allocations plus frees) per second
 * over all threads, at the thread counts of --threads (default 1, 4, 16). (e): each thread frees
 * and allocates its own blocks, device memory, 256 B..64 KiB; e-host: host memory, 64 B..64 KiB.
 * (e-x), e-x-host: the same sizes, but the threads stand in a ring and every block is freed by the
 * next thread, on the stream it was allocated on. Thread i allocates on side stream 1 + i % 4.
 * The threads of a thread count are started once (a crew) and live through an untimed first window
 * and the --reps timed ones, as an application's worker threads live through its run: a window
 * measures threads at work, not threads starting with empty caches (which the first window is).
 */
#include "bench.h"

#include <pthread.h>
#include <rap/rap.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- (e-x)'s hand-over: a bounded single-producer single-consumer ring ------------------------ */

/* A block on its way from the thread that allocated it to the one that frees it. */
typedef struct xq_item {
  void *p;
  size_t n;
  int stream;
} xq_item;

#define XQ_CAP 64   /* a power of two */

/* Lock-free: the producer alone writes tail, the consumer alone head, each on its own cache line
 * with its cached copy of the other's index, so a hand-over costs the allocator's calls and about
 * one cache-line transfer per few blocks. Invariant: head <= tail <= head + XQ_CAP. */
typedef struct xq {
  _Alignas(64) atomic_size_t tail;
  size_t head_seen;   /* producer's copy of head */
  _Alignas(64) atomic_size_t head;
  size_t tail_seen;   /* consumer's copy of tail */
  _Alignas(64) xq_item items[XQ_CAP];
} xq;

static int xq_room(xq *q) {
  size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
  if (t - q->head_seen < XQ_CAP) return 1;
  q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
  return t - q->head_seen < XQ_CAP;
}

/* Only after xq_room said yes. */
static void xq_push(xq *q, const xq_item *it) {
  size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
  q->items[t & (XQ_CAP - 1)] = *it;
  atomic_store_explicit(&q->tail, t + 1, memory_order_release);
}

static int xq_pop(xq *q, xq_item *it) {
  size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
  if (h == q->tail_seen) {
    q->tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (h == q->tail_seen) return 0;
  }
  *it = q->items[h & (XQ_CAP - 1)];
  atomic_store_explicit(&q->head, h + 1, memory_order_release);
  return 1;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- the watchdog ----------------------------------------------------------------------------- */

/* The stop bounds the timed loops, not the allocator: a peer whose threads do not finish (a
 * deadlock, or a thread-exit hook that never returns) would hold the run until the machine's
 * limit. A thread started once looks every second; when the threads of a run have not all been
 * joined WATCH_S seconds after the stop, it ends the run with what was measured. The deadline
 * (now_ns's clock) is 0 when nothing is watched and -1 once the watchdog has claimed it. */
#define WATCH_S 30

static atomic_llong watch_deadline;
static char watch_wl[16], watch_what[96];   /* written before the deadline is set */
static pthread_once_t watch_once = PTHREAD_ONCE_INIT;

static void *watchdog(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    long long d = atomic_load(&watch_deadline);
    if (d <= 0 || now_ns() < (double)d || !atomic_compare_exchange_strong(&watch_deadline, &d, -1))
      continue;
    progress("%s: threads still running %d s after the stop; the run ends here", watch_what, WATCH_S);
    SKIP(watch_what, "its threads had not finished %d s after they were told to stop (hung in the "
         "allocator?); the run ended there", WATCH_S);
    bench_end_early(watch_wl);
  }
  return NULL;
}

static void watch_start(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, watchdog, NULL) == 0) pthread_detach(t);
}

static void watch_arm(void) {
  pthread_once(&watch_once, watch_start);
  atomic_store(&watch_deadline, (long long)(now_ns() + WATCH_S * 1e9));
}

static void watch_disarm(void) {
  if (atomic_exchange(&watch_deadline, 0) == -1)
    for (;;) pause();   /* too late: the watchdog is ending the process */
}

/* ---- the threads ------------------------------------------------------------------------------ */

/* Every thread runs until the main thread says stop, after opt.rep_ms: the time is bounded even
 * when a lock makes every operation a hand-over between cores. */
typedef struct thr_shared {
  bench_peer *p;
  size_t lo, hi;
  int nthreads;
  xq *queues;   /* (e-x): thread i's outgoing queue is queues[i]; NULL in (e) */
  pthread_barrier_t start, stop;
  atomic_int halt, failed, quit;   /* quit: the crew's last start, after its last window */
  atomic_llong ops;
  char why[200];   /* the first failure, written by the thread that set failed */
} thr_shared;

typedef struct thr_arg {
  thr_shared *sh;
  int id;
} thr_arg;

/* The first failure, told in the words of the thread it happened in: rap_last_error() is per
 * thread, so the main thread could not read it afterwards. */
static void thr_fail(thr_shared *sh, int id, const char *call, size_t n, int stream) {
  if (atomic_exchange(&sh->failed, 1) != 0) return;
  const char *e = rap_last_error();
  snprintf(sh->why, sizeof sh->why, "%s of %zu B on stream %d in thread %d: %s", call, n, stream,
           id, e && *e ? e : "no reason given");
}

static void fill_sizes(size_t *sizes, int id, size_t lo, size_t hi) {
  uint64_t seed = 1000 + (uint64_t)id;
  for (int j = 0; j < 256; j++) sizes[j] = log_uniform(&seed, lo, hi);
}

/* (e): frees and allocates in a ring of 8 blocks of its own. */
static void *thr_main(void *arg) {
  thr_arg *ta = arg;
  thr_shared *sh = ta->sh;
  bench_peer *p = sh->p;
  size_t sizes[256];
  void *ring[8] = {0};
  size_t ring_n[8] = {0};
  fill_sizes(sizes, ta->id, sh->lo, sh->hi);
  int stream = 1 + ta->id % 4, failed = 0;
  long i = 0;
  for (;;) {   /* a window each time round; the ring and i carry on from one to the next */
    pthread_barrier_wait(&sh->start);
    if (atomic_load(&sh->quit)) break;
    long long ops = 0;
    for (long w = 0; !failed; w++, i++) {
      if ((w & 63) == 0 && atomic_load_explicit(&sh->halt, memory_order_relaxed)) break;
      int slot = (int)(i & 7);
      if (ring[slot]) {
        if (p->free(p->ctx, ring[slot], ring_n[slot], stream) != 0) {
          thr_fail(sh, ta->id, "free", ring_n[slot], stream);
          failed = 1;
        }
        ops++;
      }
      ring_n[slot] = sizes[i & 255];
      if (p->alloc(p->ctx, &ring[slot], ring_n[slot], stream) != 0) {
        thr_fail(sh, ta->id, "allocation", ring_n[slot], stream);
        ring[slot] = NULL;
        failed = 1;
      }
      ops++;
    }
    atomic_fetch_add(&sh->ops, ops);
    pthread_barrier_wait(&sh->stop);
  }
  for (int j = 0; j < 8; j++)
    if (ring[j]) p->free(p->ctx, ring[j], ring_n[j], stream);
  return NULL;
}

/* (e-x): frees what the thread before it handed over (8 at most at a time), then allocates one
 * block and hands it to the thread after it, while its queue has room. A thread that failed stops
 * allocating but goes on freeing, so its neighbours are not held up; one with nothing to do spins
 * a little, then yields (more threads than cores). After the stop, when no thread allocates any
 * more, each frees what is left in its incoming queue: every block is freed. */
static void *xthr_main(void *arg) {
  thr_arg *ta = arg;
  thr_shared *sh = ta->sh;
  bench_peer *p = sh->p;
  xq *out = &sh->queues[ta->id], *in = &sh->queues[(ta->id + sh->nthreads - 1) % sh->nthreads];
  size_t sizes[256];
  fill_sizes(sizes, ta->id, sh->lo, sh->hi);
  int stream = 1 + ta->id % 4, failed = 0, idle = 0;
  unsigned made = 0;
  xq_item it;
  for (;;) {   /* a window each time round; what is in the queues waits for the next */
    pthread_barrier_wait(&sh->start);
    if (atomic_load(&sh->quit)) break;
    long long ops = 0;
    for (long i = 0;; i++) {
      if ((i & 63) == 0 && atomic_load_explicit(&sh->halt, memory_order_relaxed)) break;
      int did = 0;
      for (; did < 8 && xq_pop(in, &it); did++) {
        if (p->free(p->ctx, it.p, it.n, it.stream) != 0) {
          thr_fail(sh, ta->id, "free", it.n, it.stream);
          failed = 1;
        }
        ops++;
      }
      if (!failed && xq_room(out)) {
        it.n = sizes[made++ & 255];
        it.stream = stream;
        if (p->alloc(p->ctx, &it.p, it.n, stream) != 0) {
          thr_fail(sh, ta->id, "allocation", it.n, stream);
          failed = 1;
        } else {
          xq_push(out, &it);
          ops++;
          did++;
        }
      }
      if (did) {
        idle = 0;
      } else if (++idle < 64) {
        cpu_relax();
      } else {
        sched_yield();
        idle = 0;
      }
    }
    atomic_fetch_add(&sh->ops, ops);
    pthread_barrier_wait(&sh->stop);
  }
  /* After the last window no thread allocates any more: the quit start let them all past. */
  while (xq_pop(in, &it)) p->free(p->ctx, it.p, it.n, it.stream);
  return NULL;
}

/* A crew: nthreads threads started once, then a window at a time until crew_end. */
typedef struct crew {
  thr_shared sh;
  pthread_t tid[BENCH_MAX_THREADS];
  thr_arg ta[BENCH_MAX_THREADS];
} crew;

/* 0, or -1 with why[200] (the crew is then not started). */
static int crew_start(crew *c, bench_peer *p, int nthreads, size_t lo, size_t hi, int cross, char *why) {
  thr_shared *sh = &c->sh;
  memset(sh, 0, sizeof *sh);
  sh->p = p;
  sh->lo = lo;
  sh->hi = hi;
  sh->nthreads = nthreads;
  if (cross) {
    sh->queues = aligned_alloc(_Alignof(xq), (size_t)nthreads * sizeof(xq));
    if (sh->queues == NULL) return snprintf(why, 200, "out of host memory for the queues"), -1;
    memset(sh->queues, 0, (size_t)nthreads * sizeof(xq));
  }
  atomic_init(&sh->halt, 0);
  atomic_init(&sh->failed, 0);
  atomic_init(&sh->quit, 0);
  atomic_init(&sh->ops, 0);
  pthread_barrier_init(&sh->start, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&sh->stop, NULL, (unsigned)nthreads + 1);
  for (int t = 0; t < nthreads; t++) {
    c->ta[t] = (thr_arg){sh, t};
    if (pthread_create(&c->tid[t], NULL, cross ? xthr_main : thr_main, &c->ta[t]) != 0) {
      fprintf(stderr, "rap-bench: cannot start thread %d of %d\n", t + 1, nthreads);
      abort();   /* the barriers wait for all */
    }
  }
  return 0;
}

/* One window of opt.rep_ms: operations (allocations plus frees) per second over all threads; -1
 * on failure, with why[200] (the crew stays joinable: a failed thread waits at every barrier). */
static double crew_window(crew *c, char *why) {
  thr_shared *sh = &c->sh;
  atomic_store(&sh->halt, 0);
  atomic_store(&sh->ops, 0);
  pthread_barrier_wait(&sh->start);
  double t0 = now_ns();
  struct timespec nap = {(time_t)(opt.rep_ms / 1e3), (long)(opt.rep_ms * 1e6) % 1000000000L};
  nanosleep(&nap, NULL);
  atomic_store(&sh->halt, 1);
  watch_arm();
  pthread_barrier_wait(&sh->stop);
  double t = now_ns() - t0;
  watch_disarm();
  if (atomic_load(&sh->failed)) return snprintf(why, 200, "%s", sh->why), -1;
  return (double)atomic_load(&sh->ops) / (t / 1e9);
}

/* The threads free what they hold and end. */
static void crew_end(crew *c) {
  thr_shared *sh = &c->sh;
  atomic_store(&sh->quit, 1);
  watch_arm();
  pthread_barrier_wait(&sh->start);
  for (int i = 0; i < sh->nthreads; i++) pthread_join(c->tid[i], NULL);
  watch_disarm();
  pthread_barrier_destroy(&sh->start);
  pthread_barrier_destroy(&sh->stop);
  free(sh->queues);
  sync_device();
}

static void thr_failed(const char *wl, const bench_peer *p, const char *during, const char *why) {
  char what[96];
  snprintf(what, sizeof what, "(%s) %s", wl, p->name);
  SKIP(what, "failed during %s: %s", during, why);
}

/* Every peer at every thread count of opt.threads, a fresh peer per workload. The reference of a
 * case is the first peer measured in it: rap's best comes first, and a peer that is not there (a
 * strategy this rap lacks) leaves the next one as the reference. */
static void threads(const char *wl, const pdesc *peers, size_t npeers, size_t lo, size_t hi, int cross) {
  int have_ref[BENCH_MAX_COUNTS] = {0};
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    snprintf(watch_wl, sizeof watch_wl, "%s", wl);
    snprintf(watch_what, sizeof watch_what, "(%s) %s", wl, p.name);
    if (!p.thread_safe) {
      char what[96];
      snprintf(what, sizeof what, "(%s) %s", wl, p.name);
      SKIP(what, "not thread-safe");
      p.destroy(p.ctx);
      continue;
    }
    char why[200];
    int failed = 0;
    for (int c = 0; c < opt.nthreads && !failed; c++) {
      int n = opt.threads[c], got = 0;
      double samples[64];
      crew cr;
      if (crew_start(&cr, &p, n, lo, hi, cross, why) != 0) {
        failed = 1;
      } else {
        failed = crew_window(&cr, why) < 0;   /* the crew's start: untimed */
        for (int r = 0; r < opt.reps && !failed; r++) {
          double ops = crew_window(&cr, why);
          if (ops < 0) failed = 1;
          else samples[got++] = ops / 1e6;
        }
        crew_end(&cr);
      }
      char cas[40];
      snprintf(cas, sizeof cas, "%d thread%s", n, n > 1 ? "s" : "");
      if (failed) {
        thr_failed(wl, &p, cas, why);
      } else {
        add_row(wl, cas, p.name, "Mops/s", samples, got, !have_ref[c]);
        have_ref[c] = 1;
      }
    }
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
}

/* ---- the workloads' peers --------------------------------------------------------------------- */

static const pdesc device_peers[] = {
    {P_RAP, "rap ThreadCache(ResourceAwarePool)", "ThreadCache(ResourceAwarePool(DEVICE))", 0},
    {P_RAP, "rap ThreadCache(QuickPool)", "ThreadCache(QuickPool(DEVICE))", 0},
    {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(DEVICE))", 0},
    {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(DEVICE))", 0},
    {P_ASYNC_DEFAULT, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
    {P_RMM_POOL, 0, 0, 0}, {P_RMM_ARENA, 0, 0, 0}, {P_RMM_BINNING, 0, 0, 0}, {P_RMM_ASYNC, 0, 0, 0},
    {P_UMPIRE_TS, 0, 0, 0}, {P_LOCAL, 0, 0, 0},
};

static const pdesc host_peers[] = {
    {P_RAP, "rap ThreadCache(ResourceAwarePool)", "ThreadCache(ResourceAwarePool(HOST, alignment=16))", 0},
    {P_RAP, "rap ThreadCache(QuickPool)", "ThreadCache(QuickPool(HOST, alignment=16))", 0},
    {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(HOST, alignment=16))", 0},
    {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(HOST, alignment=16))", 0},
    {P_MALLOC, 0, 0, 0}, {P_MIMALLOC, 0, 0, 0}, {P_TCMALLOC, 0, 0, 0}, {P_LOCAL, 0, 0, 0},
};

#define NPEERS(a) (sizeof a / sizeof *a)

void wl_e(void) { threads("e", device_peers, NPEERS(device_peers), 256, 64 << 10, 0); }
void wl_e_host(void) { threads("e-host", host_peers, NPEERS(host_peers), 64, 64 << 10, 0); }
void wl_e_x(void) { threads("e-x", device_peers, NPEERS(device_peers), 256, 64 << 10, 1); }
void wl_e_x_host(void) { threads("e-x-host", host_peers, NPEERS(host_peers), 64, 64 << 10, 1); }
