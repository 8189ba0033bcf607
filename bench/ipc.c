/* ipc.c — workloads (x) and (x-host): memory across processes, with a second process (this same
 * binary, started as `rap-bench --ipc-importer KIND`, fed through a pipe).
 *
 * (per block) the exporter exports N blocks of one pool (the time per block, after the first), the
 *        importer imports them (the first, which opens the pool, apart) and closes them, in ns
 *        per block: rap over DeviceVmm(export=posix) ("rap") and over StreamOrdered(pool=new,
 *        export=posix) ("rap StreamOrdered": its blocks lie in one allocation of CUDA's pool,
 *        imported once). Peers on a GPU: cudaIpcGetMemHandle / cudaIpcOpenMemHandle per
 *        cudaMalloc'd block, and CUDA's pool IPC (cudaMemPoolExportPointer /
 *        cudaMemPoolImportPointer per pointer, the pool's handle opened once).
 * (open) the first import from a pool holding 1 GiB and 64 GiB (device: what fits), in ms: the
 *        control block, the range and the one mapping the block lies in (StreamOrdered: the
 *        pool's handle and the one allocation the block lies in). Peer: opening one
 *        cudaIpcMemHandle of a cudaMalloc of the same size.
 * Sizes that do not fit are skipped, saying so. (x) needs CUDA and a device; (x-host) runs anywhere
 * Linux gives pidfd_getfd.
 */
#include "bench.h"

#include <rap/rap.h>
#include <execinfo.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

extern char **environ;

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define REC 72   /* one record: 64 bytes of handle, 8 of offset */

/* ---- the importer: reads "n" then n records, answers "first per close" in ns ---------------- */

static int read_all(int fd, void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* The importer's crash says where it was (its stderr is the bench's). */
static void importer_crashed(int sig) {
  static const char msg[] = "rap-bench importer: crashed; its stack:\n";
  void *frames[64];
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

int ipc_importer_main(const char *kind) {
  signal(SIGSEGV, importer_crashed);
  signal(SIGBUS, importer_crashed);
  uint32_t n = 0;
  int fd = -1;
  pid_t pid = 0;
  if (read_all(0, &n, sizeof n) != 0 || read_all(0, &pid, sizeof pid) != 0 ||
      read_all(0, &fd, sizeof fd) != 0 || n == 0)
    return 2;
  unsigned char *recs = malloc((size_t)n * REC);
  void **ptrs = calloc(n, sizeof *ptrs);
  if (recs == NULL || ptrs == NULL || read_all(0, recs, (size_t)n * REC) != 0) return 2;
  double t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  int st = 0;
#ifdef RAP_BENCH_CUDA
  /* The process's CUDA context (about 140 ms on the H100) is paid once whatever it imports, and
   * by every peer alike: made before the clock starts, so that the first import is the opening. */
  if (cudaFree(0) != cudaSuccess) (void)cudaGetLastError();
#endif
  if (strcmp(kind, "rap") == 0) {
    rap_manager *rm = NULL;
    if (rap_manager_create(&rm) != RAP_OK) {
      fprintf(stderr, "rap-bench importer: %s\n", rap_last_error());
      return 2;
    }
    t0 = now_ns();
    for (uint32_t i = 0; i < n && st == 0; i++) {
      if (i == 1) t1 = now_ns();
      st = rap_ipc_import(rm, (const rap_ipc_desc *)(recs + (size_t)i * REC), NULL, &ptrs[i]);
    }
    t2 = now_ns();
    if (n == 1) t1 = t2;
    for (uint32_t i = 0; i < n && st == 0; i++) st = rap_ipc_close(rm, ptrs[i], NULL);
    t3 = now_ns();
    if (st != 0) fprintf(stderr, "rap-bench importer: %s\n", rap_last_error());
    rap_manager_destroy(rm);
#ifdef RAP_BENCH_CUDA
  } else if (strcmp(kind, "legacy") == 0) {
    t0 = now_ns();
    for (uint32_t i = 0; i < n && st == 0; i++) {
      if (i == 1) t1 = now_ns();
      cudaIpcMemHandle_t h;
      memcpy(&h, recs + (size_t)i * REC, sizeof h);
      st = cudaIpcOpenMemHandle(&ptrs[i], h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess;
    }
    t2 = now_ns();
    if (n == 1) t1 = t2;
    for (uint32_t i = 0; i < n && st == 0; i++) st = cudaIpcCloseMemHandle(ptrs[i]) != cudaSuccess;
    t3 = now_ns();
  } else if (strcmp(kind, "pool") == 0) {
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int mine = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0) : -1;
    cudaMemPool_t pool;
    t0 = now_ns();
    st = mine < 0 || cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)mine,
                                                          cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess;
    for (uint32_t i = 0; i < n && st == 0; i++) {
      if (i == 1) t1 = now_ns();
      struct cudaMemPoolPtrExportData d;
      memcpy(&d, recs + (size_t)i * REC, sizeof d);
      st = cudaMemPoolImportPointer(&ptrs[i], pool, &d) != cudaSuccess;
    }
    t2 = now_ns();
    if (n == 1) t1 = t2;
    for (uint32_t i = 0; i < n && st == 0; i++) st = cudaFree(ptrs[i]) != cudaSuccess;
    t3 = now_ns();
#endif
  } else {
    st = 1;
  }
  if (st != 0) return 1;
  printf("%.1f %.1f %.1f\n", t1 - t0, n > 1 ? (t2 - t1) / (n - 1) : 0.0, (t3 - t2) / n);
  fflush(stdout);
  char c;
  (void)read(0, &c, 1);   /* the exporter lets go of its memory only after this ends */
  return 0;
}

/* ---- the exporter's side ---------------------------------------------------------------------- */

typedef struct importer {
  pid_t pid;
  int in, out;
} importer;

static int importer_start(importer *im, const char *kind) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return -1;
  self[len] = '\0';
  char *argv[] = {self, (char *)"--ipc-importer", (char *)kind, NULL};
  int err = posix_spawn(&im->pid, self, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  im->in = in[1];
  im->out = out[0];
  return err == 0 ? 0 : -1;
}

/* Sends n records (and the exporter's pid and a descriptor number for pool IPC), reads the three
 * figures back; the importer then waits until importer_end. */
static int importer_run(importer *im, const unsigned char *recs, uint32_t n, int fd, double out[3]) {
  pid_t me = getpid();
  if (write(im->in, &n, sizeof n) != sizeof n || write(im->in, &me, sizeof me) != sizeof me ||
      write(im->in, &fd, sizeof fd) != sizeof fd ||
      write(im->in, recs, (size_t)n * REC) != (ssize_t)((size_t)n * REC))
    return -1;
  char line[128] = "";
  FILE *f = fdopen(im->out, "r");
  int ok = f != NULL && fgets(line, sizeof line, f) != NULL &&
           sscanf(line, "%lf %lf %lf", &out[0], &out[1], &out[2]) == 3;
  if (f != NULL) fclose(f);
  return ok ? 0 : -1;
}

static void importer_end(importer *im) {
  close(im->in);
  int status;
  waitpid(im->pid, &status, 0);
}

/* Ends an importer that failed and says how it ended: its own sentence went to stderr. */
static const char *importer_failed(importer *im) {
  static char why[96];
  close(im->in);
  int status = 0;
  if (waitpid(im->pid, &status, 0) != im->pid) snprintf(why, sizeof why, "the importer process failed");
  else if (WIFSIGNALED(status)) snprintf(why, sizeof why, "the importer process was killed by signal %d", WTERMSIG(status));
  else snprintf(why, sizeof why, "the importer process failed (exit status %d)", WEXITSTATUS(status));
  return why;
}

/* rap: n blocks of size from spec, exported (ns per block) and imported in the importer. */
static void rap_per_block(const char *wl, const char *who, const char *spec, uint32_t n, size_t size,
                          const char *cas) {
  rap_manager *rm = NULL;
  rap_allocator *pool = NULL;
  if (rap_manager_create(&rm) != RAP_OK) return;
  if (rap_allocator_make_spec(rm, "x", spec, &pool) != RAP_OK) {
    add_skip(wl, "%s: %s", spec, rap_last_error());
    rap_manager_destroy(rm);
    return;
  }
  unsigned char *recs = calloc(n, REC);
  void **p = calloc(n, sizeof *p);
  int st = recs && p ? RAP_OK : RAP_ERR_NOMEM;
  for (uint32_t i = 0; i < n && st == RAP_OK; i++) st = rap_allocate(pool, &p[i], size, NULL);
  double t0 = now_ns();
  for (uint32_t i = 0; i < n && st == RAP_OK; i++)
    st = rap_ipc_export(pool, p[i], (rap_ipc_desc *)(recs + (size_t)i * REC));
  double t1 = now_ns();
  importer im;
  double r[3];
  if (st != RAP_OK) {
    add_skip(wl, "%s: %s", who, rap_last_error());
  } else if (importer_start(&im, "rap") != 0) {
    add_skip(wl, "%s: the importer process could not start", who);
  } else if (importer_run(&im, recs, n, -1, r) != 0) {
    add_skip(wl, "%s: %s", who, importer_failed(&im));
  } else {
    char c[64];
    add_one(wl, cas, who, "export ns/block", (t1 - t0) / n, 1);
    add_one(wl, cas, who, "import ns/block", r[1], 1);
    add_one(wl, cas, who, "close ns/block", r[2], 1);
    snprintf(c, sizeof c, "open (first import)");
    add_one(wl, c, who, "us", r[0] / 1e3, 1);
    importer_end(&im);
  }
  for (uint32_t i = 0; i < n; i++)
    if (p && p[i]) rap_deallocate(pool, p[i], NULL);
  free(recs);
  free(p);
  rap_manager_destroy(rm);
}

/* The first import from a pool holding size bytes in one chunk: ms. */
static void rap_open(const char *wl, const char *platform, size_t size, const char *gb) {
  char spec[256], cas[64];
  bool so = strcmp(platform, "StreamOrdered") == 0;
  /* StreamOrdered: chunks of at most 4 GiB, the largest allocation it exports (stream_ordered.c),
   * the pool filled to size by one 3 GiB block in each further chunk. */
  size_t first = so && size > 4 * GiB ? 4 * GiB : size;
  if (so)
    snprintf(spec, sizeof spec, "ResourceAwarePool(StreamOrdered(pool=new, export=posix), "
             "initial_size=%zuMiB, next_size=4GiB)", first / MiB);
  else
    snprintf(spec, sizeof spec, "ResourceAwarePool(%s(export=posix, reserve=%zuGiB), initial_size=%zuMiB)",
             platform, 2 * size / GiB, size / MiB);
  rap_manager *rm = NULL;
  rap_allocator *pool = NULL;
  void *p = NULL;
  if (rap_manager_create(&rm) != RAP_OK) return;
  unsigned char rec[REC] = {0};
  snprintf(cas, sizeof cas, "open a pool of %s", gb);
  void *fill[16] = {NULL};
  int st = rap_allocator_make_spec(rm, "x", spec, &pool);
  if (st == RAP_OK) st = rap_allocate(pool, &p, MiB, NULL);
  for (size_t k = 0, held = first; st == RAP_OK && held < size && k < 16; k++, held += 4 * GiB)
    st = rap_allocate(pool, &fill[k], 3 * GiB, NULL);
  if (st != RAP_OK || rap_ipc_export(pool, p, (rap_ipc_desc *)rec) != RAP_OK) {
    add_skip(wl, "%s: %s", cas, rap_last_error());
  } else {
    importer im;
    double r[3];
    if (importer_start(&im, "rap") != 0) {
      add_skip(wl, "%s: the importer process could not start", cas);
    } else if (importer_run(&im, rec, 1, -1, r) != 0) {
      add_skip(wl, "%s (%s): %s", cas, so ? "StreamOrdered" : platform, importer_failed(&im));
    } else {
      add_one(wl, cas, so ? "rap StreamOrdered" : "rap", "ms", r[0] / 1e6, 1);
      importer_end(&im);
    }
  }
  if (p) rap_deallocate(pool, p, NULL);
  for (int k = 0; k < 16; k++)
    if (fill[k]) rap_deallocate(pool, fill[k], NULL);
  rap_manager_destroy(rm);
}

void wl_x_host(void) {
  uint32_t n = opt.quick ? 200 : 2000;
  rap_per_block("x-host", "rap", "ResourceAwarePool(HostVmm(export=posix, reserve=64GiB), initial_size=1GiB)",
                n, 64 * 1024, "per block, 64 KiB blocks");
  rap_open("x-host", "HostVmm", GiB, "1 GiB");
  rap_open("x-host", "HostVmm", 64 * GiB, "64 GiB");
}

#ifndef RAP_BENCH_CUDA
void wl_x(void) {}
#else
/* cudaMalloc'd blocks, one legacy IPC handle each. */
static void legacy_per_block(const char *wl, uint32_t n, size_t size, const char *cas, int open_only) {
  unsigned char *recs = calloc(n, REC);
  void **p = calloc(n, sizeof *p);
  int st = recs && p ? 0 : 1;
  for (uint32_t i = 0; i < n && st == 0; i++) st = cudaMalloc(&p[i], size) != cudaSuccess;
  double t0 = now_ns();
  for (uint32_t i = 0; i < n && st == 0; i++)
    st = cudaIpcGetMemHandle((cudaIpcMemHandle_t *)(recs + (size_t)i * REC), p[i]) != cudaSuccess;
  double t1 = now_ns();
  importer im;
  double r[3];
  if (st != 0) {
    (void)cudaGetLastError();
    add_skip(wl, "cudaIpc %s: cudaMalloc or cudaIpcGetMemHandle failed", cas);
  } else if (importer_start(&im, "legacy") != 0 || importer_run(&im, recs, n, -1, r) != 0) {
    add_skip(wl, "cudaIpc %s: the importer process failed", cas);
  } else {
    if (open_only) {
      add_one(wl, cas, "cudaIpcOpenMemHandle", "ms", r[0] / 1e6, 0);
    } else {
      add_one(wl, cas, "cudaIpcGetMemHandle", "export ns/block", (t1 - t0) / n, 0);
      add_one(wl, cas, "cudaIpcOpenMemHandle", "import ns/block", r[1], 0);
      add_one(wl, cas, "cudaIpcCloseMemHandle", "close ns/block", r[2], 0);
    }
    importer_end(&im);
  }
  for (uint32_t i = 0; i < n; i++)
    if (p && p[i]) cudaFree(p[i]);
  free(recs);
  free(p);
}

/* CUDA's pool IPC: one pool made with the POSIX handle type, its handle opened once (the
 * importer takes the descriptor with pidfd_getfd), one exported pointer per block. */
/* CUDA's pool IPC: n allocations of size from a pool made with a POSIX handle, each exported with
 * cudaMemPoolExportPointer; open_only: one, and only its first import (the pool's opening). */
static void pool_per_block(const char *wl, uint32_t n, size_t size, const char *cas, int open_only) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  int fd = -1;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess ||
      cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    add_skip(wl, "CUDA pool IPC: cudaMemPoolCreate or its export failed");
    return;
  }
  unsigned char *recs = calloc(n, REC);
  void **p = calloc(n, sizeof *p);
  int st = recs && p ? 0 : 1;
  cudaStream_t s = run_env.streams[0];
  for (uint32_t i = 0; i < n && st == 0; i++) st = cudaMallocFromPoolAsync(&p[i], size, pool, s) != cudaSuccess;
  cudaStreamSynchronize(s);
  double t0 = now_ns();
  for (uint32_t i = 0; i < n && st == 0; i++)
    st = cudaMemPoolExportPointer((struct cudaMemPoolPtrExportData *)(recs + (size_t)i * REC), p[i]) != cudaSuccess;
  double t1 = now_ns();
  importer im;
  double r[3];
  if (st != 0) {
    (void)cudaGetLastError();
    add_skip(wl, "CUDA pool IPC: an allocation or export failed");
  } else if (importer_start(&im, "pool") != 0) {
    add_skip(wl, "CUDA pool IPC: the importer process could not start");
  } else if (importer_run(&im, recs, n, fd, r) != 0) {
    add_skip(wl, "CUDA pool IPC, %s: %s", cas, importer_failed(&im));
  } else if (open_only) {
    add_one(wl, cas, "cudaMemPoolImportPointer", "ms", r[0] / 1e6, 0);
    importer_end(&im);
  } else {
    add_one(wl, cas, "cudaMemPoolExportPointer", "export ns/block", (t1 - t0) / n, 0);
    add_one(wl, cas, "cudaMemPoolImportPointer", "import ns/block", r[1], 0);
    add_one(wl, cas, "cudaFree (imported)", "close ns/block", r[2], 0);
    importer_end(&im);
  }
  for (uint32_t i = 0; i < n; i++)
    if (p && p[i]) cudaFreeAsync(p[i], s);
  cudaStreamSynchronize(s);
  cudaMemPoolDestroy(pool);
  close(fd);
  free(recs);
  free(p);
}

void wl_x(void) {
  uint32_t n = opt.quick ? 100 : 1000;
  const char *cas = "per block, 1 MiB blocks";
  rap_per_block("x", "rap", "ResourceAwarePool(DeviceVmm(export=posix, reserve=16GiB), initial_size=2GiB)",
                n, MiB, cas);
  rap_per_block("x", "rap StreamOrdered",
                "ResourceAwarePool(StreamOrdered(pool=new, export=posix), initial_size=2GiB)", n, MiB, cas);
  legacy_per_block("x", n, MiB, cas, 0);
  pool_per_block("x", n, MiB, cas, 0);
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) (void)cudaGetLastError();
  size_t sizes[] = {GiB, 16 * GiB, 64 * GiB};
  const char *names[] = {"1 GiB", "16 GiB", "64 GiB"};
  for (int k = 0; k < 3; k++) {
    if (opt.quick && k == 2) continue;
    char c[64];
    snprintf(c, sizeof c, "open a pool of %s", names[k]);
    if (sizes[k] + 2 * GiB > f) {
      add_skip("x", "%s: the device has %zu MiB free", c, f / MiB);
      continue;
    }
    rap_open("x", "DeviceVmm", sizes[k], names[k]);
    rap_open("x", "StreamOrdered", sizes[k], names[k]);
    legacy_per_block("x", 1, sizes[k], c, 1);
    pool_per_block("x", 1, sizes[k], c, 1);
  }
}
#endif
