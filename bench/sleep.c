/* sleep.c — workload (s): sleep and wake of a ResourceAwarePool over DEVICE_VMM, against a plain
 * copy of the same bytes, for 1, 8 and 32 GiB live (quick: 1 GiB).
 *
 * (copy) one cudaMemcpyAsync of all the bytes, device to pinned host memory and back, on one
 *        stream: what the bus gives a plain copy, in GiB/s (cases "copy d2h N GiB", "copy h2d").
 * (sleep, wake) rap_allocator_sleep(BACKUP) of a pool holding N GiB live in 256 MiB blocks (the
 *        first sleep alone, unprepared: it makes the pageable backup and the platform's pinned
 *        ring, and copies through the ring; then later ones), and the wake that maps and
 *        restores, in GiB/s of live bytes; the fraction of the pool's device memory that
 *        cudaMemGetInfo shows free while asleep ("returned", %); RAP_SLEEP_RELEASE of the kept
 *        backup ("release", ms); discard-mode sleep and wake in ms.
 * (prepare) a fresh pool: RAP_SLEEP_PREPARE (ms: the pinning, off the sleep's path), then its
 *        first sleep ("sleep first prepared").
 * Sizes that do not fit the device's free memory (with room to spare) or the host's are skipped,
 * saying so. Without CUDA this workload is empty; without a device main.c skips it.
 */
#include "bench.h"

#include <rap/rap.h>
#include <stdlib.h>
#include <string.h>

#ifndef RAP_BENCH_CUDA
void wl_s(void) {}
#else
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define BLOCK (256 * MiB)

static double gibps(size_t bytes, double ns) { return ns > 0 ? (double)bytes / GiB / (ns * 1e-9) : 0; }

/* A plain copy each way, reps times; 0 or -1 with a skip noted. */
static int plain_copy(size_t live, int reps, const char *gb) {
  void *dev = NULL, *host = NULL;
  cudaStream_t s = run_env.streams[0];
  if (cudaMalloc(&dev, live) != cudaSuccess || cudaHostAlloc(&host, live, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    SKIP("(s) copy", "%s: cudaMalloc or cudaHostAlloc of the bytes failed", gb);
    if (dev) cudaFree(dev);
    return -1;
  }
  cudaMemset(dev, 1, live);
  memset(host, 2, live);   /* the pages are touched before the timing, as a pool's backup is */
  double d2h[64], h2d[64];
  for (int r = 0; r < reps; r++) {
    cudaStreamSynchronize(s);
    double t0 = now_ns();
    cudaMemcpyAsync(host, dev, live, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    double t1 = now_ns();
    cudaMemcpyAsync(dev, host, live, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    double t2 = now_ns();
    d2h[r] = gibps(live, t1 - t0);
    h2d[r] = gibps(live, t2 - t1);
  }
  char cas[40];
  snprintf(cas, sizeof cas, "copy d2h %s", gb);
  add_row("s", cas, "cudaMemcpyAsync", "GiB/s", d2h, reps, 1);
  snprintf(cas, sizeof cas, "copy h2d %s", gb);
  add_row("s", cas, "cudaMemcpyAsync", "GiB/s", h2d, reps, 1);
  cudaFree(dev);
  cudaFreeHost(host);
  return 0;
}

static size_t device_free(void) {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) (void)cudaGetLastError();
  return f;
}

static void timed(int *st, double *ns, int (*fn)(rap_allocator *, int), rap_allocator *a, int mode) {
  double t0 = now_ns();
  *st = fn(a, mode);
  *ns = now_ns() - t0;
}

static int wake(rap_allocator *a, int unused) {
  (void)unused;
  return rap_allocator_wake(a);
}

/* prepare: RAP_SLEEP_PREPARE first (timed), then one sleep and wake; else the cycles. */
static void pool_cycles(size_t live, int reps, const char *gb, int prepare) {
  rap_manager *rm = NULL;
  rap_allocator *pool = NULL;
  rap_resource *r = NULL;
  char spec[96];
  snprintf(spec, sizeof spec, "ResourceAwarePool(DEVICE_VMM, initial_size=%zuMiB)", live / MiB);
  size_t n = live / BLOCK;
  void **blocks = calloc(n, sizeof *blocks);
  if (blocks == NULL || rap_manager_create(&rm) != RAP_OK ||
      rap_allocator_make_spec(rm, "sleepy", spec, &pool) != RAP_OK ||
      rap_resource_create_cuda(rm, run_env.streams[0], &r) != RAP_OK) {
    SKIP("(s) sleep", "%s: %s", gb, rap_last_error());
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    if (rap_allocate(pool, &blocks[i], BLOCK, r) != RAP_OK) {
      SKIP("(s) sleep", "%s: %s", gb, rap_last_error());
      n = i;
      goto out;
    }
    cudaMemsetAsync(blocks[i], (int)(i & 0xff), BLOCK, run_env.streams[0]);
  }
  cudaStreamSynchronize(run_env.streams[0]);   /* the first sleep times no memset */
  rap_allocator *vmm = rap_allocator_parent(pool);
  rap_stats vs;
  double sleep_v[64], wake_v[64], first = 0, returned = 0;
  int ns = 0, nw = 0, st = RAP_OK;
  char cas[40];
  if (prepare) {
    double t = 0, u = 0, w = 0;
    timed(&st, &t, rap_allocator_sleep, pool, RAP_SLEEP_PREPARE);
    if (st == RAP_OK) timed(&st, &u, rap_allocator_sleep, pool, RAP_SLEEP_BACKUP);
    if (st == RAP_OK) timed(&st, &w, wake, pool, 0);
    if (st != RAP_OK) {
      SKIP("(s) sleep after prepare", "%s: %s", gb, rap_last_error());
      goto out;
    }
    snprintf(cas, sizeof cas, "prepare %s", gb);
    add_one("s", cas, "rap", "ms", t * 1e-6, 0);
    snprintf(cas, sizeof cas, "sleep first prepared %s", gb);
    add_one("s", cas, "rap", "GiB/s", gibps(live, u), 0);
    progress("(s) %s: prepare %.0f ms, then the first sleep %.1f GiB/s", gb, t * 1e-6, gibps(live, u));
    goto out;
  }
  for (int c = 0; c <= reps && st == RAP_OK; c++) {
    size_t before = device_free();
    rap_allocator_stats(vmm, &vs);
    size_t held = vs.actual_bytes;
    double t = 0;
    timed(&st, &t, rap_allocator_sleep, pool, RAP_SLEEP_BACKUP);
    if (st != RAP_OK) break;
    size_t asleep = device_free();
    if (c == 0) {
      first = gibps(live, t);
      returned = held ? 100.0 * ((double)asleep - (double)before) / (double)held : 0;
    } else {
      sleep_v[ns++] = gibps(live, t);
    }
    timed(&st, &t, wake, pool, 0);
    if (st == RAP_OK) wake_v[nw++] = gibps(live, t);
  }
  if (st != RAP_OK) {
    SKIP("(s) sleep", "%s: %s", gb, rap_last_error());
    goto out;
  }
  /* The restored bytes are what was written: each block's first, middle and last byte. */
  for (size_t i = 0; i < n; i++) {
    unsigned char b[3] = {0};
    size_t at[3] = {0, BLOCK / 2, BLOCK - 1};
    int ok = 1;
    for (int k = 0; k < 3 && ok; k++)
      ok = cudaMemcpy(&b[k], (char *)blocks[i] + at[k], 1, cudaMemcpyDeviceToHost) == cudaSuccess &&
           b[k] == (unsigned char)(i & 0xff);
    if (!ok) {
      SKIP("(s) sleep", "%s: block %zu did not survive sleep and wake", gb, i);
      goto out;
    }
  }
  snprintf(cas, sizeof cas, "sleep first %s", gb);
  add_one("s", cas, "rap", "GiB/s", first, 0);
  snprintf(cas, sizeof cas, "sleep %s", gb);
  add_row("s", cas, "rap", "GiB/s", sleep_v, ns, 0);
  snprintf(cas, sizeof cas, "wake %s", gb);
  add_row("s", cas, "rap", "GiB/s", wake_v, nw, 0);
  snprintf(cas, sizeof cas, "returned %s", gb);
  add_one("s", cas, "rap", "% of pool", returned, 0);
  rap_stats ps, ring;
  rap_allocator_stats(pool, &ps);
  rap_allocator_stats(vmm, &ring);
  double rel = 0;
  timed(&st, &rel, rap_allocator_sleep, pool, RAP_SLEEP_RELEASE);
  rap_stats after;
  rap_allocator_stats(pool, &after);
  if (st != RAP_OK || ps.backup_bytes < live || after.backup_bytes != 0) {
    SKIP("(s) release", "%s: backup %zu MiB kept, %zu MiB after RAP_SLEEP_RELEASE: %s", gb,
         ps.backup_bytes / MiB, after.backup_bytes / MiB, st == RAP_OK ? "" : rap_last_error());
    st = RAP_OK;
  } else {
    snprintf(cas, sizeof cas, "release %s", gb);
    add_one("s", cas, "rap", "ms", rel * 1e-6, 0);
  }
  double ds[64], dw[64];
  int nd = 0;
  for (int c = 0; c < reps && st == RAP_OK; c++) {
    double t = 0, u = 0;
    timed(&st, &t, rap_allocator_sleep, pool, RAP_SLEEP_DISCARD);
    if (st == RAP_OK) timed(&st, &u, wake, pool, 0);
    if (st == RAP_OK) {
      ds[nd] = t * 1e-6;
      dw[nd++] = u * 1e-6;
    }
  }
  snprintf(cas, sizeof cas, "sleep discard %s", gb);
  add_row("s", cas, "rap", "ms", ds, nd, 0);
  snprintf(cas, sizeof cas, "wake discard %s", gb);
  add_row("s", cas, "rap", "ms", dw, nd, 0);
  progress("(s) %s: first sleep %.1f GiB/s, later %.1f, wake %.1f, %.1f %% returned; backup %zu "
           "MiB, ring %zu MiB, released in %.1f ms", gb, first, ns ? sleep_v[ns - 1] : 0.0,
           nw ? wake_v[nw - 1] : 0.0, returned, ps.backup_bytes / MiB, ring.backup_bytes / MiB,
           rel * 1e-6);
out:
  for (size_t i = 0; i < n && pool != NULL; i++)
    if (blocks[i] != NULL) rap_deallocate(pool, blocks[i], r);
  if (r != NULL) rap_resource_destroy(r);
  if (rm != NULL) rap_manager_destroy(rm);
  free(blocks);
}

void wl_s(void) {
  static const size_t sizes[] = {1, 8, 32};
  int reps = opt.quick ? 2 : (opt.reps < 5 ? opt.reps : 5);
  if (reps > 63) reps = 63;
  for (size_t i = 0; i < (opt.quick ? 1u : sizeof sizes / sizeof *sizes); i++) {
    size_t live = sizes[i] * GiB;
    char gb[16];
    snprintf(gb, sizeof gb, "%zu GiB", sizes[i]);
    /* The copy needs the bytes once on the device and once pinned; the pool the same, one after
     * the other; keep a tenth of the device free for the rest. */
    if (device_free() < live + live / 8) {
      SKIP("(s) sleep", "%s: the device has %zu MiB free", gb, device_free() / MiB);
      continue;
    }
    sync_device();
    plain_copy(live, reps, gb);
    pool_cycles(live, reps, gb, 0);
    pool_cycles(live, reps, gb, 1);
  }
}
#endif
