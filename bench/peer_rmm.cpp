// peer_rmm.cpp — RAPIDS RMM's device memory resources as bench peers: pool_memory_resource,
// arena_memory_resource, binning_memory_resource, cuda_async_memory_resource and the plain
// cuda_memory_resource under them. Built only where scripts/fetch-peers.sh has placed RMM's sources
// (bench/CMakeLists.txt compiles them into rap_bench_rmm); elsewhere rap-bench says the peers are left out.
//
// Configurations, as RMM's own random_allocations benchmark makes them, except the pool's size:
//   pool     pool_memory_resource over cuda_memory_resource, initial size 0, no maximum: it grows
//            by max(request, its size), so it doubles (rap's pools in (b) start at 1 MiB)
//   arena    arena_memory_resource over cuda_memory_resource, the default global arena (half the
//            device's free memory, taken when it is made)
//   binning  binning_memory_resource with bins of 2^18..2^22 B over a pool as above
//   async    cuda_async_memory_resource: a new cudaMemPool, release threshold at the maximum
//   cuda     cuda_memory_resource: cudaMalloc and cudaFree
// Bytes held are what the upstream cuda_memory_resource handed out (a statistics_resource_adaptor
// between the two, called only when the pool grows), and the CUDA pool's reserved bytes for async.
// Every call is the resource's own allocate(stream, bytes, 256) / deallocate(stream, p, bytes, 256)
// on the workload's stream; RMM's exceptions become a failed call, the first one's text kept.
#include "bench.h"

#include <rmm/aligned.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>

#include <cuda/stream_ref>

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>

namespace {

constexpr std::size_t kAlign = rmm::CUDA_ALLOCATION_ALIGNMENT;

char first_error[200];   // the first exception a peer threw, for the report

void keep_error(const char *what) {
  if (first_error[0] == 0) std::snprintf(first_error, sizeof first_error, "%s", what);
}

template <class MR>
struct rmm_ctx {
  std::optional<rmm::mr::statistics_resource_adaptor> stats;   // over cuda_memory_resource
  std::optional<MR> mr;
  cudaStream_t streams[BENCH_STREAMS] = {};
};

template <class MR>
int r_alloc(void *ctx, void **p, size_t n, int s) {
  auto *c = static_cast<rmm_ctx<MR> *>(ctx);
  try {
    *p = c->mr->allocate(cuda::stream_ref{c->streams[s]}, n, kAlign);
    return 0;
  } catch (const std::exception &e) {
    keep_error(e.what());
    return -1;
  }
}

template <class MR>
int r_free(void *ctx, void *p, size_t n, int s) {
  auto *c = static_cast<rmm_ctx<MR> *>(ctx);
  c->mr->deallocate(cuda::stream_ref{c->streams[s]}, p, n, kAlign);
  return 0;
}

template <class MR>
int r_held(void *ctx, size_t *now, size_t *peak) {
  auto *c = static_cast<rmm_ctx<MR> *>(ctx);
  if (!c->stats) return -1;
  auto b = c->stats->get_bytes_counter();
  *now = static_cast<size_t>(b.value);
  *peak = static_cast<size_t>(b.peak);
  return 0;
}

int async_held(void *ctx, size_t *now, size_t *peak) {
  auto *c = static_cast<rmm_ctx<rmm::mr::cuda_async_memory_resource> *>(ctx);
  cudaMemPool_t pool = c->mr->pool_handle();
  cuuint64_t a = 0, b = 0;
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &a) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &b) != cudaSuccess)
    return -1;
  *now = static_cast<size_t>(a);
  *peak = static_cast<size_t>(b);
  return 0;
}

template <class MR>
void r_destroy(void *ctx) {
  cudaDeviceSynchronize();
  delete static_cast<rmm_ctx<MR> *>(ctx);
}

template <class MR, class Make>
int make(bench_peer *p, const bench_env *env, const char *name, Make &&build, char *why) {
  auto *c = new (std::nothrow) rmm_ctx<MR>;
  if (c == nullptr) return std::snprintf(why, 160, "out of host memory"), -1;
  for (int s = 0; s < BENCH_STREAMS; s++) c->streams[s] = static_cast<cudaStream_t>(env->streams[s]);
  try {
    build(*c);
  } catch (const std::exception &e) {
    std::snprintf(why, 160, "%s", e.what());
    delete c;
    return -1;
  }
  std::snprintf(p->name, sizeof p->name, "%s", name);
  p->device_mem = 1;
  p->thread_safe = 1;   // each of these resources takes its own locks
  p->ctx = c;
  p->alloc = r_alloc<MR>;
  p->free = r_free<MR>;
  p->held = r_held<MR>;
  p->destroy = r_destroy<MR>;
  return 0;
}

}  // namespace

extern "C" int peer_rmm(bench_peer *p, const bench_env *env, int kind, char *why) {
  using namespace rmm::mr;
  std::memset(p, 0, sizeof *p);
  if (!env->have_gpu) return std::snprintf(why, 160, "%s", env->no_gpu_reason), -1;
  switch (kind) {
  case BENCH_RMM_POOL:
    return make<pool_memory_resource>(p, env, "RMM pool_memory_resource", [](auto &c) {
      c.stats.emplace(cuda_memory_resource{});
      c.mr.emplace(*c.stats, 0);
    }, why);
  case BENCH_RMM_ARENA:
    return make<arena_memory_resource>(p, env, "RMM arena_memory_resource", [](auto &c) {
      c.stats.emplace(cuda_memory_resource{});
      c.mr.emplace(*c.stats);
    }, why);
  case BENCH_RMM_BINNING:
    return make<binning_memory_resource>(p, env, "RMM binning_memory_resource", [](auto &c) {
      c.stats.emplace(cuda_memory_resource{});
      c.mr.emplace(pool_memory_resource{*c.stats, 0}, int8_t{18}, int8_t{22});
    }, why);
  case BENCH_RMM_ASYNC: {
    int st = make<cuda_async_memory_resource>(p, env, "RMM cuda_async_memory_resource",
                                              [](auto &c) { c.mr.emplace(); }, why);
    if (st == 0) p->held = async_held;
    return st;
  }
  case BENCH_RMM_CUDA:
    return make<statistics_resource_adaptor>(p, env, "RMM cuda_memory_resource", [](auto &c) {
      c.stats.emplace(cuda_memory_resource{});
      c.mr.emplace(*c.stats);
    }, why);
  default:
    return std::snprintf(why, 160, "no RMM peer of kind %d", kind), -1;
  }
}

extern "C" const char *peer_rmm_error(void) { return first_error; }
