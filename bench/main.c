/* main.c — rap-bench: rap's strategies and their peers, side by side, in one process. This file
 * reads the options, finds the GPU and the PyTorch plugin, runs the workloads in order and prints;
 * measure.c measures, peers.c makes the allocators, report.c keeps and writes the results, and
 * pairs.c, trace.c, runahead.c, threads.c, vmm.c, sleep.c and ipc.c are the workloads.
 *
 * Workloads (ids for --only):
 *   a  allocate+free pair, same size, same stream, device memory: 256 B, 64 KiB, 1 MiB, 64 MiB
 *   b  random trace on 4 streams: log-uniform 256 B..4 MiB, <= 1000 live blocks, 200 000
 *      operations, fixed seed; ns per pair and peak held / peak live (pools: 1 MiB chunks)
 *   c  pair cost with 10..10^6 live blocks
 *   d  CPU running ahead of 4 busy streams: 400 temporaries of 64 MiB, each used by a 1 ms kernel
 *      and freed at once; (d1) on its own stream, (d2) allocated on the main stream, used on a
 *      side stream (record_stream), freed on the main stream
 *   e  threads on thread-safe allocators (1, 4, 16 or --threads), operations per second
 *   e-x  the same, but the threads stand in a ring and each frees what the one before it
 *      allocated, handed over through a lock-free queue, on the stream it was allocated on
 *   h  host: QuickPool over HOST with alignment 16 against glibc malloc and mimalloc, 64 B..64 KiB
 *   v  CUDA's virtual memory management: each driver call per 2 MiB and per 64 MiB (p50, p99),
 *      and a pool's misses over DEVICE_VMM against DEVICE and cudaMalloc, per GiB grown (vmm.c)
 *   larson, xmalloc, mstress  the multi-thread tests the field runs on CPU allocators (hostmt.c)
 *   x  memory across processes (a second process: rap-bench --ipc-importer): export and import
 *      per block against cudaIpc handles and CUDA's pool IPC, and opening a pool of 1..64 GiB;
 *      x-host the same over HostVmm (ipc.c)
 * b, c, e and e-x also run over host memory (b-host, c-host, e-host, e-x-host); without a GPU only
 * those and h run, and the program says what it skipped and why. Every figure is the median of
 * several repetitions after a warm-up; the ratio column divides by the group's reference allocator.
 */
#include "bench.h"

#include <dlfcn.h>
#include <rap/rap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- options ---------------------------------------------------------------------------------- */

bench_options opt = {NULL, NULL, NULL, 0, 7, 20.0, 0, {1, 4, 16}, 3};
bench_env run_env;
bench_torch_factory_fn bench_torch_factory;
static char torch_note[240];   /* why there is no PyTorch peer */
static char started[64];       /* when the run began, UTC */

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

/* ---- the workloads, in the order they run ----------------------------------------------------- */

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
    {"e-x", 1, wl_e_x, "threads freeing each other's blocks, device memory"},
    {"b-host", 0, wl_b_host, "random trace, host memory"},
    {"f", 1, wl_f, "a recorded transformer training step, device memory"},
    {"g", 1, wl_g, "two GPUs: a pool of device 0 serving device 1's stream, and a hand-off"},
    {"f-host", 0, wl_f_host, "a recorded transformer training step, host memory"},
    {"f1", 1, wl_f1, "recorded: GPT-2 medium training with activation checkpointing, device memory"},
    {"f2", 1, wl_f2, "recorded: a 1F1B pipeline on two streams, device memory"},
    {"f3", 1, wl_f3, "recorded: a top-2 mixture of experts, device memory"},
    {"f4", 1, wl_f4, "recorded: GPT-2 generate serving, device memory"},
    {"f5", 1, wl_f5, "recorded: rank 0 of FSDP2 on two GPUs, device memory"},
    {"f6", 1, wl_f6, "recorded: rank 0 of DDP on two GPUs, device memory"},
    {"f1-host", 0, wl_f1_host, "recorded: activation checkpointing, host memory"},
    {"f2-host", 0, wl_f2_host, "recorded: 1F1B pipeline, host memory"},
    {"f3-host", 0, wl_f3_host, "recorded: mixture of experts, host memory"},
    {"f4-host", 0, wl_f4_host, "recorded: generate serving, host memory"},
    {"f5-host", 0, wl_f5_host, "recorded: FSDP2 rank 0, host memory"},
    {"f6-host", 0, wl_f6_host, "recorded: DDP rank 0, host memory"},
    {"c-host", 0, wl_c_host, "scaling with live blocks, host memory"},
    {"e-host", 0, wl_e_host, "threads, host memory"},
    {"e-x-host", 0, wl_e_x_host, "threads freeing each other's blocks, host memory"},
    {"larson", 0, wl_larson, "larson: chains of threads taking each other's blocks over, host memory"},
    {"xmalloc", 0, wl_xmalloc, "xmalloc: producer threads allocate, consumer threads free, host memory"},
    {"mstress", 0, wl_mstress, "mstress: long- and short-lived blocks shared among threads, host memory"},
    {"v", 1, wl_v, "virtual memory management: call costs and misses"},
    {"s", 1, wl_s, "sleep and wake over DEVICE_VMM: backup and restore against a plain copy"},
    {"x-host", 0, wl_x_host, "memory across processes, host memory: per block, opening a pool"},
    {"x", 1, wl_x, "memory across processes, device memory: per block, opening a pool, CUDA IPC"},
    {"p", 1, wl_p, "the Planned strategy: a hit and a miss per pair, device memory"},
    {"p-host", 0, wl_p_host, "the Planned strategy: a hit and a miss per pair, host memory"},
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
  memset(&run_env, 0, sizeof run_env);
#ifdef RAP_BENCH_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(run_env.no_gpu_reason, sizeof run_env.no_gpu_reason, "no usable CUDA device (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    (void)cudaGetLastError();
    return;
  }
  struct cudaDeviceProp prop;
  if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    snprintf(run_env.no_gpu_reason, sizeof run_env.no_gpu_reason, "device 0: %s",
             cudaGetErrorString(e));
    return;
  }
  for (int s = 0; s < BENCH_STREAMS; s++) {
    cudaStream_t st;
    if ((e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess) {
      snprintf(run_env.no_gpu_reason, sizeof run_env.no_gpu_reason, "cudaStreamCreate: %s",
               cudaGetErrorString(e));
      return;
    }
    run_env.streams[s] = st;
  }
  snprintf(run_env.gpu_name, sizeof run_env.gpu_name, "%.127s", prop.name);
  cudaDriverGetVersion(&run_env.driver_version);
  cudaRuntimeGetVersion(&run_env.runtime_version);
  run_env.have_gpu = 1;
#else
  snprintf(run_env.no_gpu_reason, sizeof run_env.no_gpu_reason,
           "this rap-bench was built without CUDA");
#endif
}

static void env_fini(void) {
#ifdef RAP_BENCH_CUDA
  for (int s = 0; s < BENCH_STREAMS; s++)
    if (run_env.streams[s]) cudaStreamDestroy((cudaStream_t)run_env.streams[s]);
#endif
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: rap-bench [--out FILE] [--only LIST] [--quick] [--reps N] [--rep-ms MS]\n"
          "                 [--max-s S] [--threads LIST] [--torch-plugin PATH]\n"
          "  --out FILE   also write FILE.json and FILE.csv (an extension .json/.csv is dropped)\n"
          "  --only LIST  workloads, comma-separated, of:\n"
          "               a       allocate+free pairs, device memory\n"
          "               b       random trace on 4 streams, device memory\n"
          "               c       pair cost with 10..10^6 live blocks, device memory\n"
          "               d       CPU running ahead of 4 busy streams\n"
          "               e       threads, each freeing its own blocks, device memory\n"
          "               e-x     threads in a ring, each freeing the blocks of the one before it\n"
          "                       (handed over through lock-free queues), device memory\n"
          "               h       pairs of one size, host memory\n"
          "               v       CUDA virtual memory calls, and misses over DEVICE_VMM vs DEVICE\n"
          "               g       two GPUs: device 0's memory from device 1's stream, a hand-off\n"
          "               f       a recorded trace (a GPT-2 training step from PyTorch's memory\n"
          "                       history; RAP_BENCH_TRACE_F names another), device memory\n"
          "               p       the Planned strategy: a hit, a miss in step, a miss lost, per pair\n"
          "               f1..f6  the harder recorded traces in bench/traces/ (bench/record-traces.sh;\n"
          "                       RAP_BENCH_TRACES names another folder): activation checkpointing,\n"
          "                       a 1F1B pipeline on two streams, a mixture of experts, generate\n"
          "                       serving, rank 0 of FSDP2, rank 0 of DDP; device memory\n"
          "               b-host, c-host, e-host, e-x-host, f-host, f1-host..f6-host, p-host: the same over\n"
          "                       host memory\n"
          "               larson, xmalloc, mstress: the multi-thread tests of CPU allocators\n"
          "                       (blocks handed between threads), host memory, at --threads\n"
          "  --quick      a smoke run: fewer repetitions, smaller traces, no 10^5+ live blocks\n"
          "  --reps N     timed repetitions per figure (default 7)\n"
          "  --rep-ms MS  length of one timed repetition (default 20)\n"
          "  --max-s S    start no workload after S seconds (the rest are reported skipped)\n"
          "  --threads LIST  thread counts of e, e-x, e-host, e-x-host, larson, xmalloc, mstress,\n"
          "               comma-separated, each\n"
          "               1..%d (default 1,4,16; bench/plot_threads.py draws them)\n"
          "  --torch-plugin PATH  librap_bench_torch.so (bench/build-torch-peer.sh): adds PyTorch's\n"
          "               caching allocator as a peer; also RAP_BENCH_TORCH_PLUGIN\n"
          "environment: RAP_BENCH_MIMALLOC=PATH  the libmimalloc.so.2 of the mimalloc peer (else one\n"
          "               next to rap-bench, else the system's; without one that peer is skipped)\n",
          BENCH_MAX_THREADS);
}

/* The workload in progress is printed as far as it went, the rest are noted as not run, then the
 * summary; the outputs are written and the process exits at once (a peer's threads that hung
 * cannot be joined or destroyed). */
void bench_end_early(const char *wl) {
  print_workload(stdout, wl);
  char what[64];
  snprintf(what, sizeof what, "the workloads after (%s)", wl);
  SKIP(what, "not run: the run ended during (%s)", wl);
  check_targets();
  print_summary(stdout);
  if (opt.out) write_outputs(opt.out, started);
  fflush(stdout);
  fflush(stderr);
  _exit(3);
}

/* "1,2,4,8,16" into opt.threads; -1 on anything else (a count twice too). */
static int parse_threads(const char *s) {
  int n = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > BENCH_MAX_THREADS || n == BENCH_MAX_COUNTS) return -1;
    for (int i = 0; i < n; i++)
      if (opt.threads[i] == v) return -1;   /* one row per count and peer */
    opt.threads[n++] = (int)v;
    if (*end == ',' && end[1]) s = end + 1;
    else if (*end == 0) s = end;
    else return -1;
  }
  if (n == 0) return -1;
  opt.nthreads = n;
  return 0;
}

int main(int argc, char **argv) {
  /* The other process of workloads (x) and (x-host), started by them (ipc.c). */
  if (argc == 3 && !strcmp(argv[1], "--ipc-importer")) return ipc_importer_main(argv[2]);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) opt.out = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) opt.only = argv[++i];
    else if (!strcmp(argv[i], "--quick")) opt.quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) opt.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rep-ms") && i + 1 < argc) opt.rep_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-s") && i + 1 < argc) opt.max_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--torch-plugin") && i + 1 < argc) opt.torch_plugin = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      if (parse_threads(argv[++i]) != 0) {
        fprintf(stderr, "rap-bench: --threads wants distinct counts 1..%d separated by commas, not '%s'\n",
                BENCH_MAX_THREADS, argv[i]);
        return 2;
      }
    }
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
    else return usage(stderr), 2;
  }
  if (opt.quick) {
    opt.reps = opt.reps > 3 ? 3 : opt.reps;
    opt.rep_ms = opt.rep_ms > 5 ? 5 : opt.rep_ms;
  }
  if (opt.reps < 1 || opt.reps > 64 || !(opt.rep_ms > 0)) return usage(stderr), 2;
  if (getenv("RAP_LOG_LEVEL") == NULL) rap_log_set_level(RAP_LOG_ERROR);

  time_t now = time(NULL);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  t_start = now_ns();
  env_init();
  if (run_env.have_gpu) load_torch_plugin();
  mimalloc_load();
  tcmalloc_load();
  printf("rap-bench %d.%d.%d, %s; %s%s%s%s%s%s%s%s%s%s%s\n", RAP_VERSION_MAJOR, RAP_VERSION_MINOR,
         RAP_VERSION_PATCH, started, run_env.have_gpu ? "GPU: " : "",
         run_env.have_gpu ? run_env.gpu_name : run_env.no_gpu_reason,
         bench_torch_factory ? "; with the PyTorch peer" : "", have_mimalloc ? "; mimalloc " : "",
         have_mimalloc ? mimalloc_note : "", have_tcmalloc ? "; tcmalloc " : "",
         have_tcmalloc ? tcmalloc_note : "", have_rmm ? "; " : "", have_rmm ? rmm_note : "",
         have_umpire ? "; " : "", have_umpire ? umpire_note : "");
  fflush(stdout);
  if (!run_env.have_gpu) SKIP("(a) (b) (c) (d) (e) (e-x) (v): device memory", "%s", run_env.no_gpu_reason);
  else if (bench_torch_factory == NULL) SKIP("PyTorch caching allocator", "%s", torch_note);
  if (!have_rmm) SKIP("RMM's memory resources", "%s", rmm_note);
  if (!have_umpire) SKIP("Umpire's QuickPool", "%s", umpire_note);
  if (!have_mimalloc) SKIP("mimalloc", "%s", mimalloc_note);
  if (!have_tcmalloc) SKIP("tcmalloc", "%s", tcmalloc_note);

  for (size_t i = 0; i < sizeof workloads / sizeof *workloads; i++) {
    const struct workload *w = &workloads[i];
    if (!wanted(w->id) || (w->device && !run_env.have_gpu)) continue;
    char what[64];
    snprintf(what, sizeof what, "(%s) %s", w->id, w->what);
    if (opt.max_s > 0 && (now_ns() - t_start) / 1e9 > opt.max_s) {
      SKIP(what, "not started: the time budget (--max-s %g) was spent", opt.max_s);
      continue;
    }
    progress("%s", what);
    bench_env saved = run_env;
    if (!w->device) run_env.have_gpu = 0;   /* host memory: rap resources are host or host_async */
    w->run();
    run_env = saved;
    print_workload(stdout, w->id);
    if (opt.out) write_outputs(opt.out, started);
  }

  check_targets();
  print_summary(stdout);
  int rc = 0;
  if (opt.out && write_outputs(opt.out, started) != 0) rc = 1;
  env_fini();
  report_fini();
  return rc;
}
