/* hostmt.c — the multi-thread tests the field runs on CPU allocators, over host memory, at the
 * thread counts of --threads; operations (allocations plus frees) per second over all threads.
 *   larson   (Larson and Krishnan's server test, as mimalloc-bench runs it: larson 5 8 1000 5000 ..)
 *            each of N chains owns 5000 blocks of 8..1000 B; a thread frees a random one of them
 *            and allocates a new one in its place, 50 000 times, then starts the next thread of
 *            its chain, which takes the blocks over and frees them: blocks outlive their thread.
 *   xmalloc  (xmalloc-test: producers allocate, consumers free) N/2 threads allocate 64 B blocks
 *            in batches of 64 and publish them; the other N/2 take batches and free them: every
 *            free is on another thread (one thread alternates both parts).
 *   mstress  (mimalloc's stress test, mstress in mimalloc-bench) each thread keeps 500 long-lived
 *            blocks and makes and frees short-lived ones in bursts; now and then it replaces a
 *            long-lived block, or swaps one with a slot of a table shared by all threads, so
 *            blocks are freed by other threads and live across them. Sizes: mostly 16..256 B,
 *            1 in 10 up to 8 KiB, 1 in 100 up to 256 KiB.
 * Every block carries its size in its first word (the peers' free takes the size). The threads
 * run ten times opt.rep_ms against a stop flag; after the stop everything still live is freed, so a rap
 * pool ends empty.
 */
#include "bench.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mt_run {
  bench_peer *p;
  int nthreads;
  atomic_int halt, failed, live;   /* live: larson's chains still running */
  atomic_llong ops;
  pthread_barrier_t start;
  void *state;                     /* the test's shared state */
} mt_run;

typedef struct mt_arg {
  mt_run *run;
  int id;
  uint64_t seed;
  void **blocks;                   /* larson: the chain's blocks */
  size_t nblocks;
  pthread_t prev, last;            /* larson: the thread before this one; the chain's last thread */
  int has_prev;
} mt_arg;

static int halted(mt_run *r) { return atomic_load_explicit(&r->halt, memory_order_relaxed); }

/* An allocation of n >= 16 bytes that records n in its first word; NULL on failure. */
static void *get(mt_run *r, size_t n) {
  void *p;
  if (r->p->alloc(r->p->ctx, &p, n, 0) != 0) {
    atomic_store(&r->failed, 1);
    return NULL;
  }
  *(size_t *)p = n;
  return p;
}

static void put(mt_run *r, void *p) {
  if (p && r->p->free(r->p->ctx, p, *(size_t *)p, 0) != 0) atomic_store(&r->failed, 1);
}

/* ---- larson ----------------------------------------------------------------------------------- */

#define LARSON_BLOCKS 5000
#define LARSON_ROUND 50000

static size_t larson_size(uint64_t *s) { return 16 + splitmix(s) % (1000 - 16 + 1); }

/* Each thread of a chain joins the one before it, and the main thread joins the last: every thread
 * has ended (its thread-exit work in the allocator done) before the peer is destroyed. */
static void *larson_thread(void *arg) {
  mt_arg *a = arg;
  mt_run *r = a->run;
  long long ops = 0;
  if (a->has_prev) pthread_join(a->prev, NULL);
  for (long i = 0; i < LARSON_ROUND && !atomic_load_explicit(&r->failed, memory_order_relaxed); i++) {
    if ((i & 255) == 0 && halted(r)) break;
    size_t k = splitmix(&a->seed) % a->nblocks;
    put(r, a->blocks[k]);
    a->blocks[k] = get(r, larson_size(&a->seed));
    ops += 2;
  }
  atomic_fetch_add(&r->ops, ops);
  /* The next thread of the chain takes the blocks over; the last one leaves them for the main
   * thread to free. */
  pthread_t next;
  a->prev = pthread_self();
  a->has_prev = 1;
  if (halted(r) || atomic_load(&r->failed) || pthread_create(&next, NULL, larson_thread, a) != 0) {
    a->last = pthread_self();
    atomic_fetch_sub(&r->live, 1);   /* seq_cst: main reads last after it sees live fall */
  }
  return NULL;
}

/* ---- xmalloc ---------------------------------------------------------------------------------- */

#define XM_BATCH 64
#define XM_SIZE 64
#define XM_MAX_BATCHES 256   /* producers wait while this many are published */

typedef struct xm_batch {
  struct xm_batch *next;
  void *blocks[XM_BATCH];
} xm_batch;

typedef struct xm_state {
  pthread_mutex_t lock;
  xm_batch *full;              /* published, waiting for a consumer */
  int nfull;
} xm_state;

static void xm_publish(xm_state *x, xm_batch *b) {
  pthread_mutex_lock(&x->lock);
  b->next = x->full;
  x->full = b;
  x->nfull++;
  pthread_mutex_unlock(&x->lock);
}

static xm_batch *xm_take(xm_state *x) {
  pthread_mutex_lock(&x->lock);
  xm_batch *b = x->full;
  if (b) x->full = b->next, x->nfull--;
  pthread_mutex_unlock(&x->lock);
  return b;
}

static int xm_fill(mt_run *r, xm_batch *b) {
  for (int j = 0; j < XM_BATCH; j++)
    if ((b->blocks[j] = get(r, XM_SIZE)) == NULL) return -1;
  return 0;
}

static void xm_empty(mt_run *r, xm_batch *b) {
  for (int j = 0; j < XM_BATCH; j++) put(r, b->blocks[j]);
}

/* Batches are the test's own bookkeeping (malloc'd once, outside the measured peer). */
static void *xmalloc_thread(void *arg) {
  mt_arg *a = arg;
  mt_run *r = a->run;
  xm_state *x = r->state;
  int both = r->nthreads == 1, producer = both || a->id % 2 == 0;
  long long ops = 0;
  pthread_barrier_wait(&r->start);
  while (!halted(r) && !atomic_load_explicit(&r->failed, memory_order_relaxed)) {
    if (producer) {
      int n;
      pthread_mutex_lock(&x->lock);
      n = x->nfull;
      pthread_mutex_unlock(&x->lock);
      if (n < XM_MAX_BATCHES) {
        xm_batch *b = malloc(sizeof *b);
        if (b == NULL || xm_fill(r, b) != 0) {
          atomic_store(&r->failed, 1);
          free(b);
          break;
        }
        xm_publish(x, b);
        ops += XM_BATCH;
      } else if (!both) {
        sched_yield();
      }
    }
    if (!producer || both) {
      xm_batch *b = xm_take(x);
      if (b) {
        xm_empty(r, b);
        free(b);
        ops += XM_BATCH;
      } else {
        sched_yield();
      }
    }
  }
  atomic_fetch_add(&r->ops, ops);
  return NULL;
}

/* ---- mstress ---------------------------------------------------------------------------------- */

#define MS_RETAINED 500
#define MS_TRANSFER 1000
#define MS_BURST 64

typedef struct ms_state {
  _Atomic(void *) transfer[MS_TRANSFER];
} ms_state;

static size_t ms_size(uint64_t *s) {
  uint64_t v = splitmix(s);
  if (v % 100 == 0) return log_uniform(s, 8192, 256 << 10);
  if (v % 10 == 0) return log_uniform(s, 256, 8192);
  return log_uniform(s, 16, 256);
}

static void *mstress_thread(void *arg) {
  mt_arg *a = arg;
  mt_run *r = a->run;
  ms_state *m = r->state;
  void *retained[MS_RETAINED] = {0}, *burst[MS_BURST];
  long long ops = 0;
  pthread_barrier_wait(&r->start);
  for (int k = 0; k < MS_RETAINED && !atomic_load(&r->failed); k++, ops++)
    retained[k] = get(r, ms_size(&a->seed));
  while (!halted(r) && !atomic_load_explicit(&r->failed, memory_order_relaxed)) {
    int n = 1 + (int)(splitmix(&a->seed) % MS_BURST);   /* short-lived: made and freed at once */
    for (int j = 0; j < n; j++) burst[j] = get(r, ms_size(&a->seed));
    for (int j = n; j-- > 0;) put(r, burst[j]);
    ops += 2 * n;
    uint64_t v = splitmix(&a->seed);
    size_t k = (size_t)(v >> 32) % MS_RETAINED;
    if (v % 4 == 0) {                                    /* a long-lived block replaced */
      put(r, retained[k]);
      retained[k] = get(r, ms_size(&a->seed));
      ops += 2;
    } else if (v % 8 == 1) {                             /* one handed to whichever thread comes */
      size_t t = (size_t)(v >> 16) % MS_TRANSFER;
      retained[k] = atomic_exchange(&m->transfer[t], retained[k]);
      if (retained[k] == NULL) {
        retained[k] = get(r, ms_size(&a->seed));
        ops++;
      }
    }
  }
  for (int k = 0; k < MS_RETAINED; k++, ops++) put(r, retained[k]);
  atomic_fetch_add(&r->ops, ops);
  return NULL;
}

/* ---- the runs --------------------------------------------------------------------------------- */

enum { T_LARSON, T_XMALLOC, T_MSTRESS };

/* Operations per second of one run of test t on n threads; -1 when an allocation failed. */
static double run_test(bench_peer *p, int t, int n) {
  mt_run r;
  memset(&r, 0, sizeof r);
  r.p = p;
  r.nthreads = n;
  atomic_init(&r.halt, 0);
  atomic_init(&r.failed, 0);
  atomic_init(&r.ops, 0);
  atomic_init(&r.live, 0);
  xm_state xs = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};
  ms_state *ms = NULL;
  mt_arg *args = calloc((size_t)n, sizeof *args);
  pthread_t *tid = calloc((size_t)n, sizeof *tid);
  if (args == NULL || tid == NULL) return free(args), free(tid), -1;
  if (t == T_XMALLOC) r.state = &xs;
  if (t == T_MSTRESS) {
    ms = calloc(1, sizeof *ms);
    if (ms == NULL) return free(args), free(tid), -1;
    r.state = ms;
  }
  for (int i = 0; i < n; i++) args[i] = (mt_arg){.run = &r, .id = i, .seed = 0x1a2b3c4d + (uint64_t)i * 7919};
  double t0, t1;
  /* Ten repetitions' time a run: with many threads, their start (cold caches) and end (caches given
   * back) would otherwise be most of a 20 ms window; mimalloc-bench runs these for seconds. */
  double window_ms = opt.rep_ms * 10;
  struct timespec nap = {(time_t)(window_ms / 1e3), (long)(window_ms * 1e6) % 1000000000L};
  if (t == T_LARSON) {
    /* The chains' blocks are made by the main thread, as larson's are, before the clock starts. */
    for (int i = 0; i < n && !atomic_load(&r.failed); i++) {
      args[i].nblocks = LARSON_BLOCKS;
      args[i].blocks = calloc(LARSON_BLOCKS, sizeof(void *));
      if (args[i].blocks == NULL) { atomic_store(&r.failed, 1); break; }
      for (size_t k = 0; k < LARSON_BLOCKS && !atomic_load(&r.failed); k++)
        args[i].blocks[k] = get(&r, larson_size(&args[i].seed));
    }
    t0 = now_ns();
    int started = 0;
    for (int i = 0; i < n && !atomic_load(&r.failed); i++, started++) {
      atomic_fetch_add(&r.live, 1);
      if (pthread_create(&tid[i], NULL, larson_thread, &args[i]) != 0) {
        atomic_fetch_sub(&r.live, 1);
        atomic_store(&r.failed, 1);
        break;
      }
    }
    nanosleep(&nap, NULL);
    atomic_store(&r.halt, 1);
    while (atomic_load(&r.live) > 0) sched_yield();
    t1 = now_ns();
    for (int i = 0; i < started; i++) pthread_join(args[i].last, NULL);
    for (int i = 0; i < n; i++) {
      for (size_t k = 0; args[i].blocks && k < args[i].nblocks; k++) put(&r, args[i].blocks[k]);
      free(args[i].blocks);
    }
  } else {
    pthread_barrier_init(&r.start, NULL, (unsigned)n + 1);
    void *(*fn)(void *) = t == T_XMALLOC ? xmalloc_thread : mstress_thread;
    for (int i = 0; i < n; i++)
      if (pthread_create(&tid[i], NULL, fn, &args[i]) != 0) {
        fprintf(stderr, "rap-bench: cannot start thread %d of %d\n", i + 1, n);
        abort();   /* the barrier waits for all */
      }
    pthread_barrier_wait(&r.start);
    t0 = now_ns();
    nanosleep(&nap, NULL);
    atomic_store(&r.halt, 1);
    for (int i = 0; i < n; i++) pthread_join(tid[i], NULL);
    t1 = now_ns();
    pthread_barrier_destroy(&r.start);
    for (xm_batch *b; (b = xs.full) != NULL;) {
      xs.full = b->next;
      xm_empty(&r, b);
      free(b);
    }
    for (int k = 0; ms && k < MS_TRANSFER; k++) put(&r, atomic_load(&ms->transfer[k]));
  }
  free(ms);
  free(args);
  free(tid);
  if (atomic_load(&r.failed)) return -1;
  return (double)atomic_load(&r.ops) / ((t1 - t0) / 1e9);
}

/* RAP_BENCH_TC_OPTIONS="OPTS;OPTS...": a row more per entry, ThreadCache(ResourceAwarePool) with
 * those options (e.g. "cache_blocks=64, cache_bytes=16MiB"), to try the cache's bounds. */
enum { MT_VARIANTS = 4 };
static size_t mt_variants(pdesc *out, char specs[][160], char labels[][160]) {
  const char *env = getenv("RAP_BENCH_TC_OPTIONS");
  size_t n = 0;
  for (const char *w = env; w && *w && n < MT_VARIANTS;) {
    size_t len = strcspn(w, ";");
    if (len > 0 && len < 100) {
      snprintf(specs[n], 160, "ThreadCache(ResourceAwarePool(HOST, alignment=16), %.*s)", (int)len, w);
      snprintf(labels[n], 160, "rap ThreadCache(ResourceAwarePool) %.*s", (int)len, w);
      out[n] = (pdesc){P_RAP, labels[n], specs[n], 0};
      n++;
    }
    w += len + (w[len] == ';');
  }
  return n;
}

static void mt_test(const char *wl, int t) {
  static const pdesc fixed[] = {
      {P_RAP, "rap ThreadCache(ResourceAwarePool)", "ThreadCache(ResourceAwarePool(HOST, alignment=16))", 0},
      {P_RAP, "rap ThreadCache(QuickPool)", "ThreadCache(QuickPool(HOST, alignment=16))", 0},
      {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(HOST, alignment=16))", 0},
      {P_MALLOC, 0, 0, 0}, {P_MIMALLOC, 0, 0, 0}, {P_TCMALLOC, 0, 0, 0},
  };
  enum { NFIXED = sizeof fixed / sizeof *fixed };
  pdesc peers[NFIXED + MT_VARIANTS];
  char specs[MT_VARIANTS][160], labels[MT_VARIANTS][160];
  memcpy(peers, fixed, sizeof fixed);
  size_t npeers = NFIXED + mt_variants(peers + NFIXED, specs, labels);
  int have_ref[BENCH_MAX_COUNTS] = {0};
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    int failed = run_test(&p, t, 2) < 0;   /* warm-up */
    for (int c = 0; c < opt.nthreads && !failed; c++) {
      int n = opt.threads[c], got = 0;
      double samples[64];
      for (int rep = 0; rep < opt.reps && !failed; rep++) {
        double ops = run_test(&p, t, n);
        if (ops < 0) failed = 1;
        else samples[got++] = ops / 1e6;
      }
      char cas[40];
      snprintf(cas, sizeof cas, "%d thread%s", n, n > 1 ? "s" : "");
      if (!failed) {
        add_row(wl, cas, p.name, "Mops/s", samples, got, !have_ref[c]);
        have_ref[c] = 1;
      }
    }
    if (failed) peer_failed(wl, &p, "the run");
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
}

void wl_larson(void) { mt_test("larson", T_LARSON); }
void wl_xmalloc(void) { mt_test("xmalloc", T_XMALLOC); }
void wl_mstress(void) { mt_test("mstress", T_MSTRESS); }
