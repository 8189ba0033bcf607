/* vmm.c — workload (v): what CUDA's virtual memory management costs, and what a pool's miss costs
 * over DEVICE_VMM against one over DEVICE (cudaMalloc).
 *
 * (v1) Each driver call on its own, per 2 MiB and per 64 MiB: cuMemAddressReserve, cuMemCreate,
 *      cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree; p50 (the median
 *      column), min, max and p99 in microseconds over many rounds.
 * (v2) Growing by 1 GiB, in 2 MiB steps, 64 MiB steps or at once: a QuickPool over DEVICE_VMM
 *      (each miss maps at the end of its chunk) against a QuickPool over DEVICE (each miss a
 *      cudaMalloc), and cudaMalloc itself; milliseconds per GiB grown, and per GiB given back by
 *      rap_release (cuMemUnmap against cudaFree).
 * The driver's functions come through cudaGetDriverEntryPointByVersion, as rap's own do: no
 * -lcuda. Without CUDA this workload is empty; without a device main.c skips it.
 */
#include "bench.h"

#include <rap/rap.h>
#include <stdlib.h>
#include <string.h>

#ifndef RAP_BENCH_CUDA
void wl_v(void) {}
#else
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static struct {
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
} cu;

static int load(char *why) {
  static const struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"cuMemAddressReserve", (void **)&cu.reserve}, {"cuMemAddressFree", (void **)&cu.address_free},
      {"cuMemCreate", (void **)&cu.create},          {"cuMemRelease", (void **)&cu.release},
      {"cuMemMap", (void **)&cu.map},                {"cuMemSetAccess", (void **)&cu.set_access},
      {"cuMemUnmap", (void **)&cu.unmap},
      {"cuMemGetAllocationGranularity", (void **)&cu.granularity},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(syms[i].name, syms[i].fn, 12000, cudaEnableDefault, &q) !=
            cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      snprintf(why, 160, "the driver does not provide %s", syms[i].name);
      return -1;
    }
  }
  return 0;
}

enum { C_RESERVE, C_CREATE, C_MAP, C_ACCESS, C_UNMAP, C_RELEASE, C_FREE, C_COUNT };
static const char *const call_names[C_COUNT] = {"cuMemAddressReserve", "cuMemCreate", "cuMemMap",
                                                "cuMemSetAccess", "cuMemUnmap", "cuMemRelease",
                                                "cuMemAddressFree"};

/* One round of the seven calls on size bytes; t[c] gets each call's microseconds. */
static int one_round(size_t size, size_t gran, double t[C_COUNT]) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = run_env.device;
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h;
  double s[C_COUNT + 1];
  CUresult r[C_COUNT];
  s[0] = now_ns();
  r[C_RESERVE] = cu.reserve(&va, size, gran, 0, 0);
  s[1] = now_ns();
  r[C_CREATE] = cu.create(&h, size, &prop, 0);
  s[2] = now_ns();
  r[C_MAP] = cu.map(va, size, 0, h, 0);
  s[3] = now_ns();
  r[C_ACCESS] = cu.set_access(va, size, &access, 1);
  s[4] = now_ns();
  r[C_UNMAP] = cu.unmap(va, size);
  s[5] = now_ns();
  r[C_RELEASE] = cu.release(h);
  s[6] = now_ns();
  r[C_FREE] = cu.address_free(va, size);
  s[7] = now_ns();
  for (int c = 0; c < C_COUNT; c++) {
    if (r[c] != CUDA_SUCCESS) return c + 1;
    t[c] = (s[c + 1] - s[c]) / 1e3;
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void per_call(size_t size, size_t gran, int rounds) {
  char cas[32];
  snprintf(cas, sizeof cas, "%zu MiB", size / MiB);
  double *t = malloc(sizeof(double) * C_COUNT * (size_t)rounds);
  if (t == NULL) abort();
  double warm[C_COUNT];
  for (int i = 0; i < 3; i++) (void)one_round(size, gran, warm);
  for (int i = 0; i < rounds; i++) {
    double one[C_COUNT];
    int bad = one_round(size, gran, one);
    if (bad) {
      SKIP("(v) VMM call costs", "%s of %s failed", call_names[bad - 1], cas);
      free(t);
      return;
    }
    for (int c = 0; c < C_COUNT; c++) t[c * rounds + i] = one[c];
  }
  for (int c = 0; c < C_COUNT; c++) {
    double *v = &t[c * rounds];
    add_row("v", cas, call_names[c], "us (p50)", v, rounds, c == C_CREATE);
    qsort(v, (size_t)rounds, sizeof *v, cmp_double);
    add_one("v", cas, call_names[c], "us p99", v[(size_t)(0.99 * (rounds - 1) + 0.5)], 0);
  }
  free(t);
}

/* ---- (v2) misses: growing by 1 GiB ---------------------------------------------------------- */

typedef struct grower {
  const char *label, *parent;   /* parent NULL: cudaMalloc itself */
} grower;

/* Grows by 1 GiB in step-sized requests, each a miss; then gives it all back. ms per GiB each. */
static int grow_once(rap_manager *rm, const grower *g, size_t step, double *grow_ms, double *free_ms) {
  size_t n = GiB / step;
  void **p = calloc(n, sizeof *p);
  if (p == NULL) abort();
  rap_allocator *pool = NULL;
  int st = RAP_OK;
  if (g->parent) {
    char spec[160];
    snprintf(spec, sizeof spec, "QuickPool(%s, initial_size=%zu, next_size=%zu, heuristic=never)",
             g->parent, step, step);
    st = rap_allocator_make_spec(rm, "v-pool", spec, &pool);
  }
  double t0 = now_ns();
  for (size_t i = 0; i < n && st == RAP_OK; i++) {
    if (pool) st = rap_allocate(pool, &p[i], step, NULL);
    else st = cudaMalloc(&p[i], step) == cudaSuccess ? RAP_OK : RAP_ERR_NOMEM;
  }
  *grow_ms = (now_ns() - t0) / 1e6;
  for (size_t i = 0; i < n; i++)
    if (p[i] && pool) (void)rap_deallocate(pool, p[i], NULL);
  t0 = now_ns();
  if (pool) (void)rap_release(pool);
  else
    for (size_t i = 0; i < n; i++)
      if (p[i]) cudaFree(p[i]);
  *free_ms = (now_ns() - t0) / 1e6;
  if (pool) (void)rap_allocator_destroy(pool);
  free(p);
  return st;
}

static void misses(int reps) {
  static const grower growers[] = {
      {"cudaMalloc", NULL},
      {"rap QuickPool(DEVICE)", "DEVICE"},
      {"rap QuickPool(DEVICE_VMM)", "DEVICE_VMM"},
  };
  static const size_t steps[] = {2 * MiB, 64 * MiB, GiB};
  rap_manager *rm = NULL;
  if (rap_manager_create(&rm) != RAP_OK) return;
  rap_allocator *vmm = NULL;
  if (rap_allocator_get(rm, "DEVICE_VMM", &vmm) != RAP_OK) {   /* the reserve, out of the timing */
    SKIP("(v) misses over DEVICE_VMM", "%s", rap_last_error());
    rap_manager_destroy(rm);
    return;
  }
  for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
    char cas[40];
    if (steps[s] == GiB) snprintf(cas, sizeof cas, "1 GiB at once");
    else snprintf(cas, sizeof cas, "1 GiB, %zu MiB steps", steps[s] / MiB);
    for (size_t g = 0; g < sizeof growers / sizeof *growers; g++) {
      double grow[64], back[64];
      int n = 0;
      for (int r = 0; r < reps + 1; r++) {   /* the first is a warm-up */
        double gm = 0, fm = 0;
        if (grow_once(rm, &growers[g], steps[s], &gm, &fm) != RAP_OK) {
          SKIP("(v) misses", "%s, %s: %s", growers[g].label, cas, rap_last_error());
          n = 0;
          break;
        }
        if (r > 0) {
          grow[n] = gm;
          back[n++] = fm;
        }
      }
      add_row("v", cas, growers[g].label, "ms/GiB grown", grow, n, g == 0);
      add_row("v", cas, growers[g].label, "ms/GiB back", back, n, 0);
    }
  }
  rap_manager_destroy(rm);
}

void wl_v(void) {
  char why[160];
  if (load(why) != 0) {
    SKIP("(v) VMM costs", "%s", why);
    return;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = run_env.device;
  size_t gran = 0;
  if (cu.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || gran == 0) {
    SKIP("(v) VMM costs", "cuMemGetAllocationGranularity failed");
    return;
  }
  progress("(v) recommended granularity %zu KiB", gran >> 10);
  per_call(2 * MiB, gran, opt.quick ? 20 : 400);
  per_call(64 * MiB, gran, opt.quick ? 10 : 100);
  sync_device();
  misses(opt.quick ? 2 : opt.reps);
}
#endif
