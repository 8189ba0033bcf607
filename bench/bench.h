/* bench.h — what rap-bench's pieces share: the peer interface and the environment (also the C++
 * peers' and the PyTorch plugin's), then the program's own layers, by the file that defines them:
 * main.c (options, the run), measure.c (timing), peers.c (the peers), report.c (results and
 * output) and the workloads (pairs.c, trace.c, runahead.c, threads.c, vmm.c, sleep.c).
 *
 * A peer is one allocator under test (a rap strategy, malloc, mimalloc, cudaMallocAsync, CUB,
 * PyTorch's caching allocator) behind one small table of functions, so every workload drives every peer
 * through the same indirect call. Streams are named by index: 0 is the main stream, 1..4 are the
 * side streams; a peer that does not track streams ignores the index.
 */
#ifndef RAP_BENCH_H
#define RAP_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_STREAMS 5   /* 0 = main, 1..4 = side streams */

typedef struct bench_env {
  int have_gpu;                 /* a CUDA device is usable */
  char no_gpu_reason[160];      /* why not, when it is not */
  void *streams[BENCH_STREAMS]; /* cudaStream_t, created non-blocking; NULL without a GPU */
  int device;
  char gpu_name[128];
  int driver_version, runtime_version;
} bench_env;


typedef struct bench_peer {
  char name[64];
  int device_mem;               /* 1: device memory, 0: host memory */
  int thread_safe;              /* concurrent callers allowed */
  void *ctx;
  int  (*alloc)(void *ctx, void **p, size_t n, int stream);
  int  (*free)(void *ctx, void *p, size_t n, int stream);
  /* p is also used on stream (PyTorch's record_stream); NULL: the peer has no such call. */
  int  (*record)(void *ctx, void *p, int stream);
  /* bytes held from the system now and at peak since the peer was made; NULL: unknown. */
  int  (*held)(void *ctx, size_t *now, size_t *peak);
  /* Peers that can only learn their peak by looking after each call do so while this is on;
   * NULL: the peak costs nothing to keep. */
  void (*track_peak)(void *ctx, int on);
  /* calls that mapped or unmapped memory so far (rap_stats' maps, unmaps); NULL: not known. */
  int  (*calls)(void *ctx, size_t *maps, size_t *unmaps);
  void (*destroy)(void *ctx);
} bench_peer;

/* Peers (peers.c). Each returns 0, or -1 with a sentence in why[160]. */
int peer_malloc(bench_peer *p, char *why);
/* The ceiling of the threads workloads: each thread's own stacks of blocks, nothing shared. */
int peer_local(bench_peer *p, char *why);
/* mimalloc's mi_malloc/mi_free, from a libmimalloc.so.2 that mimalloc_load found. */
int peer_mimalloc(bench_peer *p, char *why);
/* spec: a rap spec, "QuickPool(HOST, alignment=16)"; the streams map to rap resources
 * (CUDA streams with a GPU, host_async queues without one when host_async is set). */
int peer_rap(bench_peer *p, const bench_env *env, const char *label, const char *spec,
             int host_async, char *why);
int peer_cuda_malloc(bench_peer *p, const bench_env *env, char *why);
int peer_cuda_async_default(bench_peer *p, const bench_env *env, char *why);
int peer_cuda_async_fresh(bench_peer *p, const bench_env *env, char *why);
/* peer_cub.cpp */
int peer_cub(bench_peer *p, const bench_env *env, char *why);
/* peer_rmm.cpp, where RMM's sources were there to build it (RAP_BENCH_RMM): one of RMM's device
 * memory resources; peer_rmm_error is the text of the first exception a call of one threw. */
enum { BENCH_RMM_POOL, BENCH_RMM_ARENA, BENCH_RMM_BINNING, BENCH_RMM_ASYNC, BENCH_RMM_CUDA };
int peer_rmm(bench_peer *p, const bench_env *env, int kind, char *why);
const char *peer_rmm_error(void);
/* peer_umpire.cpp, where scripts/build-umpire.sh installed Umpire (RAP_BENCH_UMPIRE): Umpire's
 * QuickPool over DEVICE, behind Umpire's ThreadSafeAllocator when thread_safe is set. */
int peer_umpire(bench_peer *p, const bench_env *env, int thread_safe, char *why);
/* The PyTorch peer is a plugin, librap_bench_torch.so (peer_torch.cpp), built on the GPU machine
 * against the installed torch by bench/build-torch-peer.sh and loaded with --torch-plugin PATH (or
 * RAP_BENCH_TORCH_PLUGIN): rap-bench itself stays the same binary everywhere. The plugin exports
 *   int rap_bench_torch_factory(const bench_env *env, int with_record, bench_peer *p, char *why);
 * with_record: allocate through DataPtrs, so that record maps to recordStream. */
typedef int (*bench_torch_factory_fn)(const bench_env *env, int with_record, bench_peer *p, char *why);

/* kernels.cu: a kernel that keeps its stream busy for about ns nanoseconds and touches p[0..n). */
int bench_kernels_init(char *why);
int bench_busy_kernel(void *stream, void *p, size_t n, unsigned ns);

#ifndef __cplusplus
/* What rap-bench's own C files share, grouped by the file that defines it. The C++ peers
 * (peer_cub.cpp, the PyTorch plugin) see only the interface above. */

/* ---- main.c: options, the environment, the run ------------------------------------------------ */

#define BENCH_MAX_THREADS 256   /* the most threads one figure of (e) or (e-x) runs */
#define BENCH_MAX_COUNTS 32     /* the most thread counts --threads lists */

typedef struct bench_options {
  const char *out;
  const char *only;   /* comma-separated workload ids, NULL = all */
  const char *torch_plugin;
  int quick;          /* fewer repetitions and smaller sizes: a smoke run */
  int reps;
  double rep_ms;      /* target length of one timed repetition */
  double max_s;       /* no workload starts after this many seconds (0: no limit) */
  int threads[BENCH_MAX_COUNTS];   /* (e), (e-x): the thread counts, each 1..BENCH_MAX_THREADS */
  int nthreads;                    /* how many; default 1, 4, 16 */
} bench_options;

extern bench_options opt;
/* The machine as the running workload sees it: have_gpu is 0 during the host workloads. */
extern bench_env run_env;
extern bench_torch_factory_fn bench_torch_factory;   /* NULL: no PyTorch peer in this run */
/* Ends the run from any thread when a peer hung in workload wl: what was measured is printed and
 * written, with a note on what was not run, and the process exits with status 3. */
void bench_end_early(const char *wl) __attribute__((noreturn));

/* ---- measure.c: time, randomness, repetitions ------------------------------------------------- */

extern double t_start;   /* now_ns() when the run began */

double now_ns(void);     /* CLOCK_MONOTONIC: tens of ns, so read only around a timed loop */
/* A line on stderr, after the seconds since the start. */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The workloads' fixed-seed generators: splitmix64, a double in [0, 1), log-uniform in [lo, hi]. */
uint64_t splitmix(uint64_t *s);
double uniform(uint64_t *s);
size_t log_uniform(uint64_t *s, size_t lo, size_t hi);
void sync_device(void);  /* cudaDeviceSynchronize when a GPU is in use; nothing otherwise */

/* iters iterations of a workload's loop; non-zero: an allocation failed. */
typedef int (*loop_fn)(void *arg, long iters);
/* Calibrates fn to about opt.rep_ms per repetition (the doubling is the warm-up), then times
 * opt.reps repetitions; samples[] (64 at most) gets ns per iteration. Returns the number of
 * samples, 0 when fn failed. Costs under opt.rep_ms calibrating, then opt.reps * opt.rep_ms. */
int measure(loop_fn fn, void *arg, double *samples);
/* The median, minimum and maximum of n > 0 samples (sorts a copy). */
void sample_stats(const double *v, int n, double *med, double *lo, double *hi);

/* ---- peers.c: peers by description ------------------------------------------------------------ */

enum { P_MALLOC, P_MIMALLOC, P_RAP, P_CUDA_MALLOC, P_ASYNC_DEFAULT, P_ASYNC_FRESH, P_CUB, P_TORCH,
       P_TORCH_REC, P_RMM_POOL, P_RMM_ARENA, P_RMM_BINNING, P_RMM_ASYNC, P_RMM_CUDA, P_TCMALLOC,
       P_UMPIRE_QP, P_UMPIRE_TS, P_LOCAL };

/* RMM's resources are compiled in only where scripts/fetch-peers.sh placed RMM's sources before the
 * build; rmm_note says which RMM, or why there is none (said once, in main). */
extern const int have_rmm;
extern const char rmm_note[];
/* Umpire likewise, where scripts/build-umpire.sh installed it before the build. */
extern const int have_umpire;
extern const char umpire_note[];

/* tcmalloc (gperftools' libtcmalloc_minimal.so.4, tc_malloc/tc_free) is loaded at run time like the
 * Debian mimalloc; jemalloc cannot be (its thread-local storage is initial-exec: dlopen refuses it). */
extern int have_tcmalloc;
extern char tcmalloc_note[320];
int tcmalloc_load(void);

/* mimalloc is linked in as libmimalloc.a (v2.4.1, built by its own CMake from third_party/src/mimalloc,
 * RAP_BENCH_MIMALLOC_LINKED) where scripts/fetch-peers.sh placed its source before the build; else
 * it is loaded at run time, so that rap-bench builds and runs without it: from the file
 * $RAP_BENCH_MIMALLOC names (or libmimalloc.so.2 in the folder it names) when set, else
 * libmimalloc.so.2 next to the rap-bench executable (make device-build puts one there), else the
 * system's. Returns 0 with have_mimalloc set and "VERSION (PATH)" in mimalloc_note, or -1 with
 * why there is none there; without it the mimalloc peer is skipped (said once, in main). */
extern int have_mimalloc;
extern char mimalloc_note[320];
int mimalloc_load(void);

/* One allocator a workload names; made afresh (open_peer) for every group of measurements. */
typedef struct pdesc {
  int kind;
  const char *label, *spec;   /* P_RAP only */
  int host_async;             /* P_RAP: streams 1..4 are host_async queues when there is no GPU */
} pdesc;

/* Makes the peer on run_env or records why it was skipped (-1). */
int open_peer(const char *wl, const pdesc *d, bench_peer *p);
int open_peer_quietly(const pdesc *d, bench_peer *p);   /* the same, saying nothing when it fails */
/* Records that p failed an allocation during what, with rap's last error. */
void peer_failed(const char *wl, const bench_peer *p, const char *during);

/* ---- report.c: results, the table, JSON and CSV, the targets ---------------------------------- */

/* One row: the median, minimum and maximum of v[0..n) (n <= 0: nothing); ref marks the
 * workload's reference allocator, which the ratio column divides by. */
void add_row(const char *wl, const char *cas, const char *peer, const char *metric,
             const double *v, int n, int ref);
void add_one(const char *wl, const char *cas, const char *peer, const char *metric, double v,
             int ref);
/* What was not measured and why (64 at most; more are dropped). */
void add_skip(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SKIP(what, ...) add_skip(what, __VA_ARGS__)

void print_workload(FILE *f, const char *wl);          /* wl's rows as a table */
/* FILE.json and FILE.csv (an extension .json/.csv of out is dropped), rewritten whole after
 * each workload; -1 when one cannot be written. */
int write_outputs(const char *out, const char *started);
void check_targets(void);                              /* the targets, from the rows measured */
void print_summary(FILE *f);                           /* what was skipped, then the targets */
void report_fini(void);

/* ---- pairs.c, trace.c, runahead.c, threads.c, vmm.c: the workloads ---------------------------- */

void wl_a(void);        /* pairs.c */
void wl_h(void);
void wl_c(void);
void wl_c_host(void);
void wl_b(void);        /* trace.c */
void wl_b_host(void);
void wl_f(void);        /* trace.c: a recorded trace (RAP_BENCH_TRACE_F) */
void wl_g(void);        /* multi.c: two GPUs */
void wl_f_host(void);
/* trace.c: the harder recorded traces, f1..f6 (bench/record-traces.sh), device and host memory */
enum { BENCH_RECORDED = 6 };
typedef struct bench_recorded {
  const char *id, *file, *what;
} bench_recorded;
extern const bench_recorded bench_recorded_traces[BENCH_RECORDED];
/* trace_plans.c: a plan (rap-trace plan) of the trace at path, made from its first share of
 * allocations, written to a temporary file named in plan_path (the caller unlinks it); 0, or -1
 * with the planner's sentence in why. */
int bench_make_plan(const char *path, double share, char *plan_path, size_t cap, char *why,
                    size_t whylen);
void wl_f1(void);
void wl_f2(void);
void wl_f3(void);
void wl_f4(void);
void wl_f5(void);
void wl_f6(void);
void wl_f1_host(void);
void wl_f2_host(void);
void wl_f3_host(void);
void wl_f4_host(void);
void wl_f5_host(void);
void wl_f6_host(void);
void wl_d(void);        /* runahead.c; nothing without CUDA */
void wl_e(void);        /* threads.c */
void wl_e_host(void);
void wl_e_x(void);
void wl_e_x_host(void);
void wl_v(void);        /* vmm.c; nothing without CUDA */
void wl_larson(void);   /* hostmt.c */
void wl_xmalloc(void);
void wl_mstress(void);
void wl_s(void);        /* sleep.c; nothing without CUDA */
void wl_x_host(void);   /* ipc.c */
void wl_p(void);        /* plan.c */
void wl_p_host(void);   /* plan.c */
void wl_x(void);        /* ipc.c; nothing without CUDA */
int  ipc_importer_main(const char *kind);   /* ipc.c: rap-bench --ipc-importer KIND */
#endif

#ifdef __cplusplus
}
#endif
#endif
