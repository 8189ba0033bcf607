/* runahead.c — (d): the CPU running ahead of 4 busy streams: 400 temporaries of 64 MiB (80 with
 * --quick), each used by a 1 ms kernel and freed at once; (d1) on its own stream, (d2) allocated on
 * the main stream, used on a side stream (record_stream), freed on the main stream. Wall time and
 * peak held memory, beside the kernels' own floor (count x 1 ms / 4 streams). Every repetition
 * makes a fresh peer: one warm-up, then 3 timed (1 with --quick), about half a second each.
 * Device memory only: without CUDA this workload is empty.
 */
#include "bench.h"

#include <stdio.h>

#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>

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
            cudaEventRecord(ev, (cudaStream_t)run_env.streams[0]);
            cudaStreamWaitEvent((cudaStream_t)run_env.streams[side], ev, 0);
          }
          if (bench_busy_kernel(run_env.streams[side], ptr, bytes, kernel_ns) != 0) failed = 1;
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

void wl_d(void) {
#ifdef RAP_BENCH_CUDA
  run_ahead();
#endif
}
