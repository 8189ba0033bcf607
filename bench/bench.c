/* bench.c — rap-bench: rap's strategies and their peers, side by side, in one process.
 *
 * Workloads (ids for --only):
 *   a  allocate+free pair, same size, same stream, device memory: 256 B, 64 KiB, 1 MiB, 64 MiB
 *   b  random trace on 4 streams: log-uniform 256 B..4 MiB, <= 1000 live blocks, 200 000
 *      operations, fixed seed; ns per pair and peak held / peak live (pools: 1 MiB chunks)
 *   c  pair cost with 10..10^6 live blocks
 *   d  CPU running ahead of 4 busy streams: 400 temporaries of 64 MiB, each used by a 1 ms kernel
 *      and freed at once; (d1) on its own stream, (d2) allocated on the main stream, used on a
 *      side stream (record_stream), freed on the main stream
 *   e  1, 4, 16 threads on thread-safe allocators, operations per second
 *   h  host: QuickPool over HOST with alignment 16 against glibc malloc, 64 B..64 KiB pairs
 * b, c and e also run over host memory (b-host, c-host, e-host); without a GPU only those and h
 * run, and the program says what it skipped and why. Every figure is the median of several
 * repetitions after a warm-up; the ratio column divides by the group's reference allocator.
 */
#include "bench.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <rap/rap.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

static bench_torch_factory_fn bench_torch_factory;
static char torch_note[240];

/* ---- options ---------------------------------------------------------------------------------- */

static struct {
  const char *out;
  const char *only;   /* comma-separated workload ids, NULL = all */
  const char *torch_plugin;
  int quick;          /* fewer repetitions and smaller sizes: a smoke run */
  int reps;
  double rep_ms;      /* target length of one timed repetition */
  double max_s;       /* no workload starts after this many seconds (0: no limit) */
} opt = {NULL, NULL, NULL, 0, 7, 20.0, 0};

static double t_start;

static bench_env env;

static int wanted(const char *id) {
  if (opt.only == NULL) return 1;
  size_t n = strlen(id);
  for (const char *p = opt.only; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, id, n) == 0) return 1;
    p += len + (e != NULL);
  }
  return 0;
}

/* ---- results ---------------------------------------------------------------------------------- */

typedef struct row {
  char wl[12], cas[40], peer[64], metric[20];
  double med, lo, hi;
  int n, ref;
} row;

typedef struct note {
  char what[96], text[240];
  int met;   /* targets: 1 met, 0 missed, -1 not measured */
} note;

static row *rows;
static size_t nrows, caprows;
static note skips[64], targets[32];
static size_t nskips, ntargets;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void add_row(const char *wl, const char *cas, const char *peer, const char *metric,
                    const double *v, int n, int ref) {
  if (n <= 0) return;
  if (nrows == caprows) {
    caprows = caprows ? caprows * 2 : 256;
    rows = realloc(rows, caprows * sizeof *rows);
    if (rows == NULL) abort();
  }
  double *s = malloc((size_t)n * sizeof *s);
  if (s == NULL) abort();
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  row *r = &rows[nrows++];
  memset(r, 0, sizeof *r);
  snprintf(r->wl, sizeof r->wl, "%s", wl);
  snprintf(r->cas, sizeof r->cas, "%s", cas);
  snprintf(r->peer, sizeof r->peer, "%s", peer);
  snprintf(r->metric, sizeof r->metric, "%s", metric);
  r->med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  r->lo = s[0];
  r->hi = s[n - 1];
  r->n = n;
  r->ref = ref;
  free(s);
}

static void add_one(const char *wl, const char *cas, const char *peer, const char *metric, double v,
                    int ref) {
  add_row(wl, cas, peer, metric, &v, 1, ref);
}

static const row *find_row(const char *wl, const char *cas, const char *peer, const char *metric) {
  for (size_t i = 0; i < nrows; i++)
    if (!strcmp(rows[i].wl, wl) && !strcmp(rows[i].cas, cas) && !strcmp(rows[i].metric, metric) &&
        (peer ? !strcmp(rows[i].peer, peer) : rows[i].ref))
      return &rows[i];
  return NULL;
}

static double ratio_of(const row *r) {
  const row *ref = find_row(r->wl, r->cas, NULL, r->metric);
  return ref && ref->med != 0 ? r->med / ref->med : NAN;
}

static void add_note(note *list, size_t *n, size_t cap, int met, const char *what, const char *fmt,
                     ...) {
  if (*n == cap) return;
  note *x = &list[(*n)++];
  snprintf(x->what, sizeof x->what, "%s", what);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->text, sizeof x->text, fmt, ap);
  va_end(ap);
  x->met = met;
}

#define SKIP(what, ...) add_note(skips, &nskips, 64, -1, what, __VA_ARGS__)
#define TARGET(met, what, ...) add_note(targets, &ntargets, 32, met, what, __VA_ARGS__)

/* ---- time, randomness, synchronization -------------------------------------------------------- */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%6.1fs] ", (now_ns() - t_start) / 1e9);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

static size_t log_uniform(uint64_t *s, size_t lo, size_t hi) {
  size_t v = (size_t)exp(log((double)lo) + uniform(s) * (log((double)hi) - log((double)lo)));
  return v < lo ? lo : v > hi ? hi : v;
}

static void sync_device(void) {
#ifdef RAP_BENCH_CUDA
  if (env.have_gpu) cudaDeviceSynchronize();
#endif
}

static const char *fmt_size(size_t n, char *buf, size_t cap) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(buf, cap, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0) snprintf(buf, cap, "%zu KiB", n >> 10);
  else snprintf(buf, cap, "%zu B", n);
  return buf;
}

/* ---- peers by description --------------------------------------------------------------------- */

enum { P_MALLOC, P_RAP, P_CUDA_MALLOC, P_ASYNC_DEFAULT, P_ASYNC_FRESH, P_CUB, P_TORCH, P_TORCH_REC };

typedef struct pdesc {
  int kind;
  const char *label, *spec;   /* P_RAP only */
  int host_async;             /* P_RAP: streams 1..4 are host_async queues when there is no GPU */
} pdesc;

static const char *pdesc_name(const pdesc *d) {
  switch (d->kind) {
  case P_MALLOC: return "malloc (glibc)";
  case P_RAP: return d->label;
  case P_CUDA_MALLOC: return "cudaMalloc/cudaFree";
  case P_ASYNC_DEFAULT: return "cudaMallocAsync (default pool)";
  case P_ASYNC_FRESH: return "cudaMallocAsync (new pool)";
  case P_CUB: return "CUB CachingDeviceAllocator";
  default: return "PyTorch caching allocator";
  }
}

static int make_peer(const pdesc *d, bench_peer *p, char *why) {
  switch (d->kind) {
  case P_MALLOC: return peer_malloc(p, why);
  case P_RAP: return peer_rap(p, &env, d->label, d->spec, d->host_async, why);
  case P_CUDA_MALLOC: return peer_cuda_malloc(p, &env, why);
  case P_ASYNC_DEFAULT: return peer_cuda_async_default(p, &env, why);
  case P_ASYNC_FRESH: return peer_cuda_async_fresh(p, &env, why);
  case P_CUB: return peer_cub(p, &env, why);
  default:
    if (!env.have_gpu) return snprintf(why, 160, "%s", env.no_gpu_reason), -1;
    if (bench_torch_factory == NULL) return snprintf(why, 160, "not in this binary"), -1;
    return bench_torch_factory(&env, d->kind == P_TORCH_REC, p, why);
  }
}

/* Makes the peer or records why it was skipped. */
static int open_peer(const char *wl, const pdesc *d, bench_peer *p) {
  char why[160] = "";
  if (make_peer(d, p, why) == 0) return 0;
  char what[96];
  snprintf(what, sizeof what, "(%s) %s", wl, pdesc_name(d));
  if (d->kind == P_TORCH || d->kind == P_TORCH_REC) {
    /* Said once, in main, when the binary has no PyTorch peer at all. */
    if (bench_torch_factory == NULL || !env.have_gpu) return -1;
  } else if (d->kind != P_MALLOC && d->kind != P_RAP && !env.have_gpu) {
    return -1;   /* the device workloads as a whole are reported skipped */
  }
  SKIP(what, "%s", why);
  return -1;
}

static void peer_failed(const char *wl, const bench_peer *p, const char *during) {
  char what[96];
  snprintf(what, sizeof what, "(%s) %s", wl, p->name);
  SKIP(what, "an allocation failed during %s: %s", during, rap_last_error());
}

/* ---- measuring -------------------------------------------------------------------------------- */

typedef int (*loop_fn)(void *arg, long iters);

/* Calibrates (doubling, which is also the warm-up) to about opt.rep_ms per repetition, then times
 * opt.reps repetitions; samples[] gets ns per iteration. Returns the number of samples, 0 on error. */
static int measure(loop_fn fn, void *arg, double *samples) {
  long it = 1;
  double t = 0;
  for (;;) {
    double t0 = now_ns();
    if (fn(arg, it) != 0) return 0;
    t = now_ns() - t0;
    sync_device();
    if (t >= opt.rep_ms * 2.5e5 || it >= (1L << 30)) break;
    it *= 2;
  }
  long iters = (long)((double)it * opt.rep_ms * 1e6 / (t > 1 ? t : 1));
  if (iters < 1) iters = 1;
  for (int r = 0; r < opt.reps; r++) {
    double t0 = now_ns();
    if (fn(arg, iters) != 0) return 0;
    samples[r] = (now_ns() - t0) / (double)iters;
    sync_device();
  }
  return opt.reps;
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
      int n = measure(pair_loop, &a, samples);
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

/* ---- (b): the random 4-stream trace ----------------------------------------------------------- */

typedef struct op {
  uint32_t slot;
  uint8_t alloc, stream;
  size_t size;
} op;

typedef struct trace {
  op *ops;
  size_t nops, nallocs, peak_live, slots;
  void **ptrs;
} trace;

static int make_trace(trace *t, size_t total_ops, size_t max_live, size_t lo, size_t hi) {
  memset(t, 0, sizeof *t);
  t->ops = malloc(total_ops * sizeof *t->ops);
  uint32_t *live = malloc(max_live * sizeof *live);     /* slots of live blocks */
  op *slot_op = malloc(max_live * sizeof *slot_op);     /* the allocation in each slot */
  t->ptrs = calloc(max_live, sizeof *t->ptrs);
  if (!t->ops || !live || !slot_op || !t->ptrs) return -1;
  uint32_t *free_slots = (uint32_t *)t->ptrs;           /* borrowed as a stack until the end */
  for (size_t i = 0; i < max_live; i++) free_slots[i] = (uint32_t)(max_live - 1 - i);
  size_t nfree = max_live, nlive = 0, live_bytes = 0;
  uint64_t seed = 0x5eed0001;
  while (t->nops + nlive < total_ops) {
    /* Allocate with probability 1 - live/max: the live count wanders around max/2. */
    int alloc = nlive == 0 || (nlive < max_live && uniform(&seed) >= (double)nlive / (double)max_live);
    op o;
    if (alloc) {
      o.slot = free_slots[--nfree];
      o.alloc = 1;
      o.stream = (uint8_t)(1 + splitmix(&seed) % 4);
      o.size = log_uniform(&seed, lo, hi);
      slot_op[o.slot] = o;
      live[nlive++] = o.slot;
      live_bytes += o.size;
      if (live_bytes > t->peak_live) t->peak_live = live_bytes;
      t->nallocs++;
    } else {
      size_t j = splitmix(&seed) % nlive;
      o = slot_op[live[j]];
      o.alloc = 0;
      live[j] = live[--nlive];
      free_slots[nfree++] = o.slot;
      live_bytes -= o.size;
    }
    t->ops[t->nops++] = o;
  }
  while (nlive > 0) {
    op o = slot_op[live[--nlive]];
    o.alloc = 0;
    t->ops[t->nops++] = o;
  }
  memset(t->ptrs, 0, max_live * sizeof *t->ptrs);
  t->slots = max_live;
  free(live);
  free(slot_op);
  return 0;
}

static int run_trace(bench_peer *p, trace *t) {
  for (size_t i = 0; i < t->nops; i++) {
    const op *o = &t->ops[i];
    if (o->alloc) {
      if (p->alloc(p->ctx, &t->ptrs[o->slot], o->size, o->stream) != 0) return -1;
    } else if (p->free(p->ctx, t->ptrs[o->slot], o->size, o->stream) != 0) {
      return -1;
    }
  }
  return 0;
}

static void random_trace(const char *wl, const pdesc *peers, size_t npeers) {
  trace t;
  size_t total = opt.quick ? 20000 : 200000;
  if (make_trace(&t, total, 1000, 256, 4u << 20) != 0) {
    SKIP(wl, "out of host memory for the trace");
    return;
  }
  char cas[40];
  snprintf(cas, sizeof cas, "%zu ops", t.nops);
  for (size_t k = 0; k < npeers; k++) {
    bench_peer p;
    if (open_peer(wl, &peers[k], &p) != 0) continue;
    if (p.track_peak) p.track_peak(p.ctx, 1);
    double t0 = now_ns();
    int st = run_trace(&p, &t);
    double cold = (now_ns() - t0) / (double)t.nallocs;
    sync_device();
    if (p.track_peak) p.track_peak(p.ctx, 0);
    if (st != 0) {
      peer_failed(wl, &p, "the trace");
      p.destroy(p.ctx);
      continue;
    }
    size_t held_now = 0, held_peak = 0;
    int have_held = p.held && p.held(p.ctx, &held_now, &held_peak) == 0;
    double samples[64];
    int n = 0;
    for (int r = 0; r < opt.reps && st == 0; r++, n++) {
      t0 = now_ns();
      st = run_trace(&p, &t);
      samples[r] = (now_ns() - t0) / (double)t.nallocs;
      sync_device();
    }
    if (st != 0) peer_failed(wl, &p, "the trace");
    else add_row(wl, cas, p.name, "ns/pair", samples, n, k == 0);
    add_one(wl, cas, p.name, "ns/pair first", cold, k == 0);
    if (have_held) add_one(wl, cas, p.name, "held/live", (double)held_peak / (double)t.peak_live, k == 0);
    p.destroy(p.ctx);
    progress("  (%s) %s done", wl, p.name);
  }
  progress("  (%s) trace: %zu ops, %zu allocations, peak live %.1f MiB", wl, t.nops, t.nallocs,
           (double)t.peak_live / 1048576.0);
  free(t.ops);
  free(t.ptrs);
}

/* ---- (c): pair cost against the number of live blocks ----------------------------------------- */

typedef struct scale_peer {
  pdesc d;
  const long *counts;   /* 0-terminated */
} scale_peer;

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

/* ---- (d): the CPU running ahead of busy streams ----------------------------------------------- */

#ifdef RAP_BENCH_CUDA
static void run_ahead(void) {
  const char *wl = "d";
  char why[160];
  if (bench_kernels_init(why) != 0) {
    SKIP("(d) CPU running ahead", "%s", why);
    return;
  }
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool wait",
       "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB, cross_resource=wait, "
       "wait_above=512MiB)", 0},
      {P_RAP, "rap ResourceAwarePool grow",
       "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB, cross_resource=grow)", 0},
      {P_ASYNC_FRESH, NULL, NULL, 0},
      {P_TORCH_REC, NULL, NULL, 0},
  };
  const size_t bytes = (size_t)64 << 20;
  const int count = opt.quick ? 80 : 400, reps = opt.quick ? 1 : 3;
  const unsigned kernel_ns = 1000000;
  cudaEvent_t ev;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    SKIP("(d) CPU running ahead", "cudaEventCreateWithFlags failed");
    return;
  }
  for (int variant = 1; variant <= 2; variant++) {
    char cas[40];
    snprintf(cas, sizeof cas, "d%d %d x 64 MiB", variant, count);
    for (size_t k = 0; k < sizeof peers / sizeof *peers; k++) {
      double wall[8], peak[8];
      int n = 0, failed = 0;
      char name[64] = "";
      for (int r = 0; r < reps + 1 && !failed; r++) {   /* repetition 0 is the warm-up */
        bench_peer p;
        if (open_peer(wl, &peers[k], &p) != 0) {
          failed = 1;
          break;
        }
        snprintf(name, sizeof name, "%s", p.name);
        cudaDeviceSynchronize();
        double t0 = now_ns();
        for (int i = 0; i < count && !failed; i++) {
          int side = 1 + i % 4, home = variant == 1 ? side : 0;
          void *ptr;
          if (p.alloc(p.ctx, &ptr, bytes, home) != 0) {
            failed = 1;
            break;
          }
          if (variant == 2) {   /* the side stream waits for the main stream, as users do */
            cudaEventRecord(ev, (cudaStream_t)env.streams[0]);
            cudaStreamWaitEvent((cudaStream_t)env.streams[side], ev, 0);
          }
          if (bench_busy_kernel(env.streams[side], ptr, bytes, kernel_ns) != 0) failed = 1;
          if (variant == 2 && p.record) {
            if (p.record(p.ctx, ptr, side) != 0) failed = 1;
            if (p.free(p.ctx, ptr, bytes, home) != 0) failed = 1;
          } else if (p.free(p.ctx, ptr, bytes, variant == 2 ? side : home) != 0) {
            /* Without record_stream (cudaMallocAsync) the stream-ordered way is to free on the
             * stream that used the block last. */
            failed = 1;
          }
        }
        cudaDeviceSynchronize();
        double t1 = now_ns();
        size_t now = 0, pk = 0;
        if (!failed && p.held && p.held(p.ctx, &now, &pk) == 0 && r > 0) {
          wall[n] = (t1 - t0) / 1e6;
          peak[n++] = (double)pk / 1048576.0;
        }
        if (failed) peer_failed(wl, &p, cas);
        p.destroy(p.ctx);
      }
      if (n > 0) {
        add_row(wl, cas, name, "wall ms", wall, n, k == 0);
        add_row(wl, cas, name, "peak held MiB", peak, n, k == 0);
      }
      if (name[0]) progress("  (d%d) %s done", variant, name);
    }
  }
  cudaEventDestroy(ev);
  char cas[40];
  snprintf(cas, sizeof cas, "kernel floor");
  add_one(wl, cas, "1 ms x 400 / 4 streams", "wall ms", (double)count * kernel_ns / 4 / 1e6, 0);
}
#endif

/* ---- (e): threads ----------------------------------------------------------------------------- */

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

/* ---- the table, the files, the targets -------------------------------------------------------- */

static const char *wl_title(const char *wl) {
  if (!strcmp(wl, "a")) return "(a) allocate+free pair, same size, same stream, device memory";
  if (!strcmp(wl, "b")) return "(b) random trace on 4 streams, 256 B..4 MiB, <= 1000 live, device memory";
  if (!strcmp(wl, "b-host")) return "(b-host) the same trace over host memory (4 host_async queues)";
  if (!strcmp(wl, "c")) return "(c) pair cost with N live blocks (256 B..4 KiB), device memory";
  if (!strcmp(wl, "c-host")) return "(c-host) pair cost with N live blocks, host memory";
  if (!strcmp(wl, "d")) return "(d) CPU running ahead of 4 busy streams (1 ms kernels, 64 MiB temporaries)";
  if (!strcmp(wl, "e")) return "(e) threads on thread-safe allocators, device memory, 256 B..64 KiB";
  if (!strcmp(wl, "e-host")) return "(e-host) threads on thread-safe allocators, host memory, 64 B..64 KiB";
  if (!strcmp(wl, "h")) return "(h) host: pairs of one size, host memory";
  return wl;
}

static void print_workload(FILE *f, const char *wl) {
  const row *ref = NULL;
  int any = 0;
  for (size_t j = 0; j < nrows; j++)
    if (!strcmp(rows[j].wl, wl)) {
      any = 1;
      if (rows[j].ref && !ref) ref = &rows[j];
    }
  if (!any) return;
  fprintf(f, "\n%s\n  ratio = median / median of %s\n", wl_title(wl), ref ? ref->peer : "-");
  fprintf(f, "  %-18s %-34s %-14s %12s %12s %12s %7s\n", "case", "allocator", "metric", "median", "min",
          "max", "ratio");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    if (strcmp(r->wl, wl) != 0) continue;
    double q = ratio_of(r);
    char qs[16];
    if (isnan(q)) snprintf(qs, sizeof qs, "-");
    else snprintf(qs, sizeof qs, "%.2f", q);
    const char *fmt = r->med < 10 ? "  %-18s %-34s %-14s %12.3f %12.3f %12.3f %7s\n"
                                  : "  %-18s %-34s %-14s %12.1f %12.1f %12.1f %7s\n";
    fprintf(f, fmt, r->cas, r->peer, r->metric, r->med, r->lo, r->hi, qs);
  }
  fflush(f);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isnan(v) || isinf(v)) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

static void machine_text(char *cpu, size_t cap) {
  snprintf(cpu, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        c += 2;
        c[strcspn(c, "\n")] = 0;
        snprintf(cpu, cap, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

static int write_outputs(const char *out, const char *started) {
  char base[512];
  snprintf(base, sizeof base, "%s", out);
  char *dot = strrchr(base, '.');
  if (dot && (!strcmp(dot, ".json") || !strcmp(dot, ".csv"))) *dot = 0;
  char path[600];
  snprintf(path, sizeof path, "%s.json", base);
  FILE *f = fopen(path, "w");
  if (f == NULL) return perror(path), -1;
  char cpu[160];
  machine_text(cpu, sizeof cpu);
  struct utsname u;
  uname(&u);
  fprintf(f, "{\n  \"tool\": \"rap-bench\",\n  \"rap_version\": \"%d.%d.%d\",\n  \"date\": ",
          RAP_VERSION_MAJOR, RAP_VERSION_MINOR, RAP_VERSION_PATCH);
  json_str(f, started);
  fprintf(f, ",\n  \"host\": {\"cpu\": ");
  json_str(f, cpu);
  fprintf(f, ", \"cores\": %ld, \"kernel\": ", sysconf(_SC_NPROCESSORS_ONLN));
  json_str(f, u.release);
  fprintf(f, "},\n  \"gpu\": ");
  if (env.have_gpu) {
    fprintf(f, "{\"name\": ");
    json_str(f, env.gpu_name);
    fprintf(f, ", \"driver_api\": %d, \"runtime\": %d}", env.driver_version, env.runtime_version);
  } else {
    fprintf(f, "null");
  }
  fprintf(f, ",\n  \"options\": {\"quick\": %d, \"reps\": %d, \"rep_ms\": %g, \"torch_peer\": %d},\n",
          opt.quick, opt.reps, opt.rep_ms, bench_torch_factory != NULL);
  fprintf(f, "  \"rows\": [\n");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    fprintf(f, "    {\"workload\": ");
    json_str(f, r->wl);
    fprintf(f, ", \"case\": ");
    json_str(f, r->cas);
    fprintf(f, ", \"allocator\": ");
    json_str(f, r->peer);
    fprintf(f, ", \"metric\": ");
    json_str(f, r->metric);
    fprintf(f, ", \"median\": ");
    json_num(f, r->med);
    fprintf(f, ", \"min\": ");
    json_num(f, r->lo);
    fprintf(f, ", \"max\": ");
    json_num(f, r->hi);
    fprintf(f, ", \"reps\": %d, \"ref\": %s, \"ratio\": ", r->n, r->ref ? "true" : "false");
    json_num(f, ratio_of(r));
    fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
  }
  fprintf(f, "  ],\n  \"skipped\": [\n");
  for (size_t i = 0; i < nskips; i++) {
    fprintf(f, "    {\"what\": ");
    json_str(f, skips[i].what);
    fprintf(f, ", \"why\": ");
    json_str(f, skips[i].text);
    fprintf(f, "}%s\n", i + 1 < nskips ? "," : "");
  }
  fprintf(f, "  ],\n  \"targets\": [\n");
  for (size_t i = 0; i < ntargets; i++) {
    fprintf(f, "    {\"target\": ");
    json_str(f, targets[i].what);
    fprintf(f, ", \"measured\": ");
    json_str(f, targets[i].text);
    fprintf(f, ", \"met\": %s}%s\n", targets[i].met < 0 ? "null" : targets[i].met ? "true" : "false",
            i + 1 < ntargets ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) return perror(path), -1;
  snprintf(path, sizeof path, "%s.csv", base);
  f = fopen(path, "w");
  if (f == NULL) return perror(path), -1;
  fprintf(f, "workload,case,allocator,metric,median,min,max,reps,ratio\n");
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    fprintf(f, "%s,\"%s\",\"%s\",%s,%.6g,%.6g,%.6g,%d,", r->wl, r->cas, r->peer, r->metric, r->med,
            r->lo, r->hi, r->n);
    double q = ratio_of(r);
    if (!isnan(q)) fprintf(f, "%.4g", q);
    fputc('\n', f);
  }
  if (fclose(f) != 0) return perror(path), -1;
  return 0;
}

/* The targets of issue 7, read off the rows that this run measured. */
static void check_targets(void) {
  char buf[240];
  const char *rap = "rap ResourceAwarePool", *qp = "rap QuickPool";
  static const char *pair_cases[] = {"256 B", "64 KiB", "1 MiB", "64 MiB"};
  for (int w = 0; w < 2; w++) {
    const char *who = w ? qp : rap;
    double limit = w ? 60 : 100, worst = 0;
    int n = 0;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++) {
      const row *r = find_row("a", pair_cases[i], who, "ns/pair");
      if (!r) continue;
      n++;
      if (r->med > worst) worst = r->med;
      len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s %.0f ns", len ? ", " : "",
                              pair_cases[i], r->med);
    }
    char what[96];
    snprintf(what, sizeof what, "(a) %s pair on DEVICE <= %.0f ns", w ? "QuickPool" : "ResourceAwarePool", limit);
    if (n) TARGET(worst <= limit, what, "%s", buf);
    else TARGET(-1, what, "not measured (no GPU)");
  }
  const row *r = find_row("b", "200000 ops", rap, "ns/pair");
  const row *h = find_row("b", "200000 ops", rap, "held/live");
  if (r) TARGET(r->med <= 250, "(b) 4-stream trace, ResourceAwarePool <= 250 ns/pair", "%.0f ns/pair", r->med);
  else TARGET(-1, "(b) 4-stream trace, ResourceAwarePool <= 250 ns/pair", "not measured (no GPU, or a quick run)");
  if (h) TARGET(h->med <= 1.15, "(b) peak held / peak live <= 1.15 (ResourceAwarePool)", "%.3f", h->med);
  else TARGET(-1, "(b) peak held / peak live <= 1.15 (ResourceAwarePool)", "not measured");
  for (int w = 0; w < 2; w++) {
    const char *who = w ? qp : rap;
    const row *lo = find_row("c", "100 live", who, "ns/pair");
    const row *hi = find_row("c", "1000000 live", who, "ns/pair");
    char what[96];
    snprintf(what, sizeof what, "(c) %s: pair at 10^6 live <= 1.5x pair at 10^2", w ? "QuickPool" : "ResourceAwarePool");
    if (lo && hi)
      TARGET(hi->med <= 1.5 * lo->med, what, "%.0f ns / %.0f ns = %.2fx", hi->med, lo->med, hi->med / lo->med);
    else TARGET(-1, what, "not measured");
  }
  const char *d1 = "d1 400 x 64 MiB", *d2 = "d2 400 x 64 MiB";
  const row *async1 = find_row("d", d1, "cudaMallocAsync (new pool)", "peak held MiB");
  for (int w = 0; w < 2; w++) {
    const char *who = w ? "rap ResourceAwarePool grow" : "rap ResourceAwarePool wait";
    const row *m = find_row("d", d1, who, "peak held MiB");
    char what[96];
    snprintf(what, sizeof what, "(d1) %s holds no more than cudaMallocAsync", who + 4);
    if (m && async1)
      TARGET(m->med <= async1->med, what, "%.0f MiB vs %.0f MiB", m->med, async1->med);
    else TARGET(-1, what, "not measured");
  }
  const row *w2 = find_row("d", d2, "rap ResourceAwarePool wait", "peak held MiB");
  const row *t2 = find_row("d", d2, "rap ResourceAwarePool wait", "wall ms");
  /* (d1)'s wall time is the stream-ordered baseline, cudaMallocAsync's: rap's own (d1) with wait
   * could be as slow as its (d2) and would hide a serialization. */
  const row *t1 = find_row("d", d1, "cudaMallocAsync (new pool)", "wall ms");
  const row *w1 = find_row("d", d1, "rap ResourceAwarePool wait", "wall ms");
  if (w2) TARGET(w2->med <= 1024, "(d2) ResourceAwarePool wait holds <= 1 GiB", "%.0f MiB", w2->med);
  else TARGET(-1, "(d2) ResourceAwarePool wait holds <= 1 GiB", "not measured");
  if (t1 && t2)
    TARGET(t2->med <= 1.2 * t1->med, "(d2) wait: wall time within 1.2x of (d1)",
           "%.1f ms vs %.1f ms (d1, cudaMallocAsync) = %.2fx; rap wait's own (d1): %.1f ms", t2->med,
           t1->med, t2->med / t1->med, w1 ? w1->med : NAN);
  else TARGET(-1, "(d2) wait: wall time within 1.2x of (d1)", "not measured");
  static const char *host_cases[] = {"64 B", "256 B", "1 KiB", "4 KiB", "16 KiB", "64 KiB", "mixed 64 B..64 KiB"};
  double worst = 0;
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < 7; i++) {
    const row *q = find_row("h", host_cases[i], "rap QuickPool alignment=16", "ns/pair");
    const row *m = find_row("h", host_cases[i], "malloc (glibc)", "ns/pair");
    if (!q || !m) continue;
    double x = q->med / m->med;
    if (x > worst) worst = x;
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s %.2fx", len ? ", " : "", host_cases[i], x);
  }
  if (len) TARGET(worst <= 1.5, "(h) QuickPool(HOST, alignment=16) within 1.5x of malloc", "%s", buf);
  else TARGET(-1, "(h) QuickPool(HOST, alignment=16) within 1.5x of malloc", "not measured");
}

/* ---- the workloads, in the order they run ------------------------------------------------------ */

static void wl_a(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE)", 0},
      {P_RAP, "rap QuickPool", "QuickPool(DEVICE)", 0},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE)", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0},
      {P_TORCH, 0, 0, 0}, {P_CUDA_MALLOC, 0, 0, 0},
  };
  static const size_t sizes[] = {256, 64 << 10, 1 << 20, 64 << 20};
  pairs("a", peers, sizeof peers / sizeof *peers, sizes, 4, 0, 0);
}

static void wl_b(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap QuickPool", "QuickPool(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE, initial_size=1MiB, next_size=1MiB)", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_ASYNC_FRESH, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
  };
  random_trace("b", peers, sizeof peers / sizeof *peers);
}

static void wl_b_host(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_RAP, "rap QuickPool", "QuickPool(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_RAP, "rap DynamicPoolList", "DynamicPoolList(HOST, initial_size=1MiB, next_size=1MiB)", 1},
      {P_MALLOC, 0, 0, 0},
  };
  random_trace("b-host", peers, sizeof peers / sizeof *peers);
}

static const long big[] = {100, 10000, 1000000, 0}, small[] = {100, 10000, 0},
                  qp_counts[] = {10, 100, 1000, 10000, 100000, 1000000, 0},
                  dpl_counts[] = {10, 1000, 100000, 0};

static void wl_c(void) {
  static const scale_peer peers[] = {
      {{P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(DEVICE)", 0}, big},
      {{P_RAP, "rap QuickPool", "QuickPool(DEVICE)", 0}, qp_counts},
      {{P_RAP, "rap DynamicPoolList", "DynamicPoolList(DEVICE)", 0}, dpl_counts},
      {{P_ASYNC_FRESH, 0, 0, 0}, big}, {{P_CUB, 0, 0, 0}, small}, {{P_TORCH, 0, 0, 0}, big},
  };
  scaling("c", peers, sizeof peers / sizeof *peers);
}

static void wl_c_host(void) {
  static const scale_peer peers[] = {
      {{P_RAP, "rap ResourceAwarePool", "ResourceAwarePool(HOST)", 0}, big},
      {{P_RAP, "rap QuickPool", "QuickPool(HOST)", 0}, qp_counts},
      {{P_RAP, "rap DynamicPoolList", "DynamicPoolList(HOST)", 0}, dpl_counts},
      {{P_MALLOC, 0, 0, 0}, qp_counts},
  };
  scaling("c-host", peers, sizeof peers / sizeof *peers);
}

static void wl_d(void) {
#ifdef RAP_BENCH_CUDA
  run_ahead();
#endif
}

static void wl_e(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(DEVICE))", 0},
      {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(DEVICE))", 0},
      {P_ASYNC_DEFAULT, 0, 0, 0}, {P_CUB, 0, 0, 0}, {P_TORCH, 0, 0, 0},
  };
  threads("e", peers, sizeof peers / sizeof *peers, 256, 64 << 10);
}

static void wl_e_host(void) {
  static const pdesc peers[] = {
      {P_RAP, "rap ThreadSafe(QuickPool)", "ThreadSafe(QuickPool(HOST, alignment=16))", 0},
      {P_RAP, "rap ThreadSafe(ResourceAwarePool)", "ThreadSafe(ResourceAwarePool(HOST, alignment=16))", 0},
      {P_MALLOC, 0, 0, 0},
  };
  threads("e-host", peers, sizeof peers / sizeof *peers, 64, 64 << 10);
}

static void wl_h(void) {
  static const pdesc peers[] = {
      {P_MALLOC, 0, 0, 0},
      {P_RAP, "rap QuickPool alignment=16", "QuickPool(HOST, alignment=16)", 0},
      {P_RAP, "rap ResourceAwarePool alignment=16", "ResourceAwarePool(HOST, alignment=16)", 0},
      {P_RAP, "rap DynamicPoolList alignment=16", "DynamicPoolList(HOST, alignment=16)", 0},
  };
  static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536};
  pairs("h", peers, sizeof peers / sizeof *peers, sizes, 6, 64, 65536);
}

static const struct workload {
  const char *id;
  int device;              /* needs a GPU; host workloads run with the GPU hidden from peer_rap */
  void (*run)(void);
  const char *what;
} workloads[] = {
    {"a", 1, wl_a, "pairs on device memory"},
    {"b", 1, wl_b, "random trace on 4 streams, device memory"},
    {"d", 1, wl_d, "CPU running ahead of busy streams"},
    {"h", 0, wl_h, "host pairs"},
    {"c", 1, wl_c, "scaling with live blocks, device memory"},
    {"e", 1, wl_e, "threads, device memory"},
    {"b-host", 0, wl_b_host, "random trace, host memory"},
    {"c-host", 0, wl_c_host, "scaling with live blocks, host memory"},
    {"e-host", 0, wl_e_host, "threads, host memory"},
};

static void load_torch_plugin(void) {
  const char *path = opt.torch_plugin ? opt.torch_plugin : getenv("RAP_BENCH_TORCH_PLUGIN");
  if (path == NULL || *path == 0) {
    const char *why = getenv("RAP_BENCH_TORCH_NOTE");
    snprintf(torch_note, sizeof torch_note, "%s", why && *why ? why
             : "no plugin given (--torch-plugin PATH; scripts/device-run.sh builds one where torch is installed)");
    return;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(torch_note, sizeof torch_note, "dlopen(%s): %s", path, dlerror());
    return;
  }
  void *sym = dlsym(h, "rap_bench_torch_factory");
  if (sym == NULL) {
    snprintf(torch_note, sizeof torch_note, "%s has no rap_bench_torch_factory", path);
    return;
  }
  memcpy(&bench_torch_factory, &sym, sizeof sym);   /* object pointer to function pointer */
}

/* ---- main ------------------------------------------------------------------------------------- */

static void env_init(void) {
  memset(&env, 0, sizeof env);
#ifdef RAP_BENCH_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(env.no_gpu_reason, sizeof env.no_gpu_reason, "no usable CUDA device (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    (void)cudaGetLastError();
    return;
  }
  struct cudaDeviceProp prop;
  if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    snprintf(env.no_gpu_reason, sizeof env.no_gpu_reason, "device 0: %s", cudaGetErrorString(e));
    return;
  }
  for (int s = 0; s < BENCH_STREAMS; s++) {
    cudaStream_t st;
    if ((e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess) {
      snprintf(env.no_gpu_reason, sizeof env.no_gpu_reason, "cudaStreamCreate: %s", cudaGetErrorString(e));
      return;
    }
    env.streams[s] = st;
  }
  snprintf(env.gpu_name, sizeof env.gpu_name, "%.127s", prop.name);
  cudaDriverGetVersion(&env.driver_version);
  cudaRuntimeGetVersion(&env.runtime_version);
  env.have_gpu = 1;
#else
  snprintf(env.no_gpu_reason, sizeof env.no_gpu_reason, "this rap-bench was built without CUDA");
#endif
}

static void env_fini(void) {
#ifdef RAP_BENCH_CUDA
  for (int s = 0; s < BENCH_STREAMS; s++)
    if (env.streams[s]) cudaStreamDestroy((cudaStream_t)env.streams[s]);
#endif
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: rap-bench [--out FILE] [--only LIST] [--quick] [--reps N] [--rep-ms MS]\n"
          "  --out FILE   also write FILE.json and FILE.csv (an extension .json/.csv is dropped)\n"
          "  --only LIST  workloads, comma-separated: a,b,b-host,c,c-host,d,e,e-host,h\n"
          "  --quick      a smoke run: fewer repetitions, smaller traces, no 10^5+ live blocks\n"
          "  --reps N     timed repetitions per figure (default 7)\n"
          "  --rep-ms MS  length of one timed repetition (default 20)\n"
          "  --max-s S    start no workload after S seconds (the rest are reported skipped)\n"
          "  --torch-plugin PATH  librap_bench_torch.so (bench/build-torch-peer.sh): adds PyTorch's\n"
          "               caching allocator as a peer; also RAP_BENCH_TORCH_PLUGIN\n");
}

int rap_bench_main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) opt.out = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) opt.only = argv[++i];
    else if (!strcmp(argv[i], "--quick")) opt.quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) opt.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rep-ms") && i + 1 < argc) opt.rep_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-s") && i + 1 < argc) opt.max_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--torch-plugin") && i + 1 < argc) opt.torch_plugin = argv[++i];
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
    else return usage(stderr), 2;
  }
  if (opt.quick) {
    opt.reps = opt.reps > 3 ? 3 : opt.reps;
    opt.rep_ms = opt.rep_ms > 5 ? 5 : opt.rep_ms;
  }
  if (opt.reps < 1 || opt.reps > 64 || !(opt.rep_ms > 0)) return usage(stderr), 2;
  if (getenv("RAP_LOG_LEVEL") == NULL) rap_log_set_level(RAP_LOG_ERROR);

  char started[64];
  time_t now = time(NULL);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  t_start = now_ns();
  env_init();
  if (env.have_gpu) load_torch_plugin();
  printf("rap-bench %d.%d.%d, %s; %s%s%s\n", RAP_VERSION_MAJOR, RAP_VERSION_MINOR, RAP_VERSION_PATCH,
         started, env.have_gpu ? "GPU: " : "", env.have_gpu ? env.gpu_name : env.no_gpu_reason,
         bench_torch_factory ? "; with the PyTorch peer" : "");
  fflush(stdout);
  if (!env.have_gpu) SKIP("(a) (b) (c) (d) (e): device memory", "%s", env.no_gpu_reason);
  else if (bench_torch_factory == NULL) SKIP("PyTorch caching allocator", "%s", torch_note);

  for (size_t i = 0; i < sizeof workloads / sizeof *workloads; i++) {
    const struct workload *w = &workloads[i];
    if (!wanted(w->id) || (w->device && !env.have_gpu)) continue;
    char what[64];
    snprintf(what, sizeof what, "(%s) %s", w->id, w->what);
    if (opt.max_s > 0 && (now_ns() - t_start) / 1e9 > opt.max_s) {
      SKIP(what, "not started: the time budget (--max-s %g) was spent", opt.max_s);
      continue;
    }
    progress("%s", what);
    bench_env saved = env;
    if (!w->device) env.have_gpu = 0;   /* host memory: rap resources are host or host_async */
    w->run();
    env = saved;
    print_workload(stdout, w->id);
    if (opt.out) write_outputs(opt.out, started);
  }

  check_targets();
  if (nskips) {
    printf("\nskipped:\n");
    for (size_t i = 0; i < nskips; i++) printf("  %s: %s\n", skips[i].what, skips[i].text);
  }
  printf("\ntargets (issue 7):\n");
  for (size_t i = 0; i < ntargets; i++)
    printf("  [%s] %s: %s\n", targets[i].met < 0 ? "n/a " : targets[i].met ? "met " : "MISS",
           targets[i].what, targets[i].text);
  fflush(stdout);
  int rc = 0;
  if (opt.out && write_outputs(opt.out, started) != 0) rc = 1;
  env_fini();
  free(rows);
  return rc;
}
