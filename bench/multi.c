/* multi.c — workload (g): two GPUs. A pool of device 0's memory serving a stream of device 1 once
 * device 1 has access (rap_allocator_set_peer_access), against the same pool from device 0's own
 * stream and cudaMallocAsync from a pool of device 0 that device 1 may use; then both devices'
 * streams taking turns on one pool.
 *
 *   (g) pairs        1 MiB allocate+free, ns per pair, from device 0's stream and from device 1's
 *   (g) alternating  per round: allocate + free on device 1's stream, then on device 0's: each
 *                    block freed on one device's stream is pending there while the other allocates
 *                    (whether it is taken, or free space served, is the pool's choice)
 * Needs two devices with peer access (main.c runs it only where two are usable; else skipped).
 */
#include "bench.h"

#include <rap/rap.h>
#include <stdio.h>

#ifndef RAP_BENCH_CUDA
void wl_g(void) {}
#else
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

#define MiB ((size_t)1 << 20)

typedef struct g_arg {
  rap_allocator *a;            /* rap, or NULL: cudaMallocAsync from pool */
  cudaMemPool_t pool;
  rap_resource *on[2];         /* the streams the two halves of a round run on */
  cudaStream_t s[2];
  int handoff;
} g_arg;

static int g_loop(void *arg, long iters) {
  g_arg *g = arg;
  for (long i = 0; i < iters; i++)
    for (int h = 0; h <= g->handoff; h++) {
      void *p;
      if (g->a != NULL) {
        if (rap_allocate(g->a, &p, MiB, g->on[h]) != RAP_OK) return -1;
        if (rap_deallocate(g->a, p, g->on[h]) != RAP_OK) return -1;
      } else {
        if (cudaMallocFromPoolAsync(&p, MiB, g->pool, g->s[h]) != cudaSuccess) return -1;
        if (cudaFreeAsync(p, g->s[h]) != cudaSuccess) return -1;
      }
    }
  return 0;
}

static void row(const char *cas, const char *name, g_arg *g, int base) {
  double samples[64];
  int n = measure(g_loop, g, samples);
  if (n == 0) {
    SKIP("(g)", "%s, %s: failed (%s)", cas, name, g->a ? rap_last_error() : "cudaMallocFromPoolAsync");
    return;
  }
  add_row("g", cas, name, g->handoff ? "ns/round" : "ns/pair", samples, n, base);
  cudaDeviceSynchronize();
}

void wl_g(void) {
  int count = 0, can = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2 ||
      cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    SKIP("g", "two GPUs with peer access are needed (%d found)", count);
    return;
  }
  rap_manager *rm;
  if (rap_manager_create(&rm) != RAP_OK) return;
  rap_resource *r[2];
  cudaStream_t s[2];
  for (int d = 0; d < 2; d++) {
    cudaSetDevice(d);
    rap_resource_create_cuda_stream(rm, &r[d]);
    s[d] = rap_resource_cuda_stream(r[d]);
  }
  cudaSetDevice(0);
  static const struct {
    const char *name, *spec;
  } pools[] = {
      {"rap QuickPool(DEVICE::0)", "QuickPool(DEVICE::0, initial_size=64MiB)"},
      {"rap ResourceAwarePool(DEVICE::0)", "ResourceAwarePool(DEVICE::0, initial_size=64MiB, cross_resource=wait)"},
  };
  for (size_t k = 0; k < sizeof pools / sizeof *pools; k++) {
    rap_allocator *a;
    char name[32];
    snprintf(name, sizeof name, "pool%zu", k);
    if (rap_allocator_make_spec(rm, name, pools[k].spec, &a) != RAP_OK ||
        rap_allocator_set_peer_access(a, 1, 1) != RAP_OK) {
      SKIP("g", "%s: %s", pools[k].name, rap_last_error());
      continue;
    }
    for (int d = 0; d < 2; d++) {
      g_arg g = {a, NULL, {r[d], r[d]}, {s[d], s[d]}, 0};
      row(d == 0 ? "1 MiB pairs, device 0's stream" : "1 MiB pairs, device 1's stream", pools[k].name, &g,
          k == 0);
    }
    if (k == 1) {
      g_arg g = {a, NULL, {r[1], r[0]}, {s[1], s[0]}, 1};
      row("alternating device 1, 0", pools[k].name, &g, 1);
    }
    progress("  (g) %s done", pools[k].name);
  }
  struct cudaMemPoolProps props = {0};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
    struct cudaMemAccessDesc desc = {{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
    uint64_t max = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &max);
    if (cudaMemPoolSetAccess(pool, &desc, 1) == cudaSuccess) {
      for (int d = 0; d < 2; d++) {
        g_arg g = {NULL, pool, {r[d], r[d]}, {s[d], s[d]}, 0};
        row(d == 0 ? "1 MiB pairs, device 0's stream" : "1 MiB pairs, device 1's stream",
            "cudaMallocAsync (pool of device 0)", &g, 0);
      }
      g_arg g = {NULL, pool, {r[1], r[0]}, {s[1], s[0]}, 1};
      row("alternating device 1, 0", "cudaMallocAsync (pool of device 0)", &g, 0);
    } else {
      (void)cudaGetLastError();
      SKIP("g", "cudaMemPoolSetAccess for device 1 failed");
    }
    cudaDeviceSynchronize();
    cudaMemPoolDestroy(pool);
  }
  (void)cudaGetLastError();
  for (int d = 0; d < 2; d++) rap_resource_synchronize(r[d]);
  rap_manager_destroy(rm);
}
#endif
