/* test_cuda_planned.c — the Planned strategy on CUDA streams: a place of the plan freed on one
 * stream, while that stream's kernel still writes it, is taken by another stream behind a wait
 * queued on the GPU (no host block), so the taker's kernel runs after the writer's. The plan is
 * written here: two entries of 4 MiB at the same place, on two streams. Skips without a device.
 */
#include "gpu_test.h"
#include "kernels.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static double secs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A plan (docs/trace.md) of one iteration: A (4 MiB) on stream 0 lives [0, 1), B (4 MiB) on stream 1
 * lives [1, 2), both at offset 0. */
static void write_two_stream_plan(const char *path) {
  char body[512];
  int len = snprintf(body, sizeof body, "rap-plan 1\ndomain torch\nstreams 2\nalignment 256\n"
                     "arena 4194304\nentries 2\n0 4194304 4194304 0 0 1\n1 4194304 4194304 0 1 2\n");
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < len; i++) h = (h ^ (unsigned char)body[i]) * 1099511628211ull;
  FILE *f = fopen(path, "w");
  RAP_CHECK(f != NULL);
  fprintf(f, "%send %016llx\n", body, (unsigned long long)h);
  RAP_CHECK(fclose(f) == 0);
}

GPU_TEST(Planned, CrossStreamPlaceWaitsOnTheGpu) {
  char path[256], spec[512];
  snprintf(path, sizeof path, "/tmp/rap-cuda-plan-%ld.plan", (long)getpid());
  write_two_stream_plan(path);
  rap_manager *rm;
  RAP_CHECK_OK(rap_manager_create(&rm));
  rap_allocator *dev;
  int st = rap_allocator_get(rm, "DEVICE", &dev);
  if (st == RAP_ERR_UNSUPPORTED) {
    RAP_CHECK_OK(rap_manager_destroy(rm));
    unlink(path);
    GPU_SKIP_NO_DEVICE();
  }
  RAP_CHECK_OK(st);
  snprintf(spec, sizeof spec, "Planned(ResourceAwarePool(DEVICE, initial_size=16MiB), plan=%s)", path);
  rap_allocator *a;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "planned", spec, &a));
  rap_resource *r1, *r2;
  RAP_CHECK_OK(gpu_resource_create_stream(rm, &r1));
  RAP_CHECK_OK(gpu_resource_create_stream(rm, &r2));
  gpu_gate *gate;
  RAP_CHECK(gpu_gate_create(&gate) == 0);
  void *p, *b, *q;
  RAP_CHECK_OK(rap_allocate(a, &p, 4 * MiB, r1));   /* finds the iteration: from the parent */
  RAP_CHECK_OK(rap_deallocate(a, p, r1));
  RAP_CHECK_OK(rap_allocate(a, &b, 4 * MiB, r2));   /* B's place */
  RAP_CHECK(gpu_gated_fill(gpu_resource_stream(r2), gate, b, 4 * MiB, 0xAA) == 0);
  RAP_CHECK_OK(rap_deallocate(a, b, r2));
  double t0 = secs();
  RAP_CHECK_OK(rap_allocate(a, &q, 4 * MiB, r1));   /* A's place is B's: r1 waits on the GPU */
  RAP_CHECK(secs() - t0 < 1.0);
  RAP_CHECK(q == b);
  RAP_CHECK(gpu_fill(gpu_resource_stream(r1), q, 4 * MiB, 0x55) == 0);
  gpu_gate_open(gate);
  RAP_CHECK_OK(rap_resource_synchronize(r1));
  RAP_CHECK_OK(rap_resource_synchronize(r2));
  RAP_CHECK(gpu_all_bytes(q, 4 * MiB, 0x55));   /* r1's fill ran after r2's */
  RAP_CHECK_OK(rap_deallocate(a, q, r1));
  RAP_CHECK_OK(rap_allocator_check(a));
  RAP_CHECK_OK(rap_manager_destroy(rm));
  gpu_gate_destroy(gate);
  unlink(path);
}
