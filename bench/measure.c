/* measure.c — how rap-bench measures: the clock, the workloads' fixed-seed randomness, waiting
 * for the device, and the repetitions a figure is the median of.
 *
 * Noise: a loop is first run with 1, 2, 4, ... iterations until one run takes a quarter of a
 * repetition (this is also the warm-up: pools have grown, pages are touched, caches are warm);
 * then opt.reps repetitions of about opt.rep_ms each are timed, with the device synchronized
 * between them and outside the timed part. A figure is the median of the repetitions, with their
 * minimum and maximum beside it, so one preempted repetition moves the median by at most one
 * place and shows up in the spread instead.
 */
#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef RAP_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

double t_start;

/* ---- time, randomness, synchronization -------------------------------------------------------- */

double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

void progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%6.1fs] ", (now_ns() - t_start) / 1e9);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

size_t log_uniform(uint64_t *s, size_t lo, size_t hi) {
  size_t v = (size_t)exp(log((double)lo) + uniform(s) * (log((double)hi) - log((double)lo)));
  return v < lo ? lo : v > hi ? hi : v;
}

void sync_device(void) {
#ifdef RAP_BENCH_CUDA
  if (run_env.have_gpu) cudaDeviceSynchronize();
#endif
}

/* ---- repetitions ------------------------------------------------------------------------------ */

int measure(loop_fn fn, void *arg, double *samples) {
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

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void sample_stats(const double *v, int n, double *med, double *lo, double *hi) {
  double *s = malloc((size_t)n * sizeof *s);
  if (s == NULL) abort();
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  *med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  *lo = s[0];
  *hi = s[n - 1];
  free(s);
}
