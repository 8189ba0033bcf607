// peer_cub.cpp — CUB's cub::CachingDeviceAllocator (the toolkit's CCCL headers) as a bench peer.
//
// Configured to cache everything: bins are powers of two from 256 B (min_bin 8) to 128 MiB
// (max_bin 27), no limit on cached bytes; larger requests go straight to cudaMalloc, as CUB does.
// Its own mutex makes it thread-safe. Its peak of bytes held is read from its cached_bytes map after
// each allocation, only while the workload asks for it (the trace's first run).
#include "bench.h"

#include <cub/util_allocator.cuh>

#include <cstdio>
#include <cstring>
#include <new>

namespace {

struct cub_ctx {
  cub::CachingDeviceAllocator alloc{2u, 8u, 27u, cub::CachingDeviceAllocator::INVALID_SIZE, false};
  cudaStream_t streams[BENCH_STREAMS] = {};
  int device = 0;
  size_t peak = 0;
  bool track = false;
};

size_t held_now(cub_ctx *c) {
  std::lock_guard<std::mutex> lock(c->alloc.mutex);
  auto it = c->alloc.cached_bytes.find(c->device);
  return it == c->alloc.cached_bytes.end() ? 0 : it->second.free + it->second.live;
}

int c_alloc(void *ctx, void **p, size_t n, int s) {
  auto *c = static_cast<cub_ctx *>(ctx);
  if (c->alloc.DeviceAllocate(c->device, p, n, c->streams[s]) != cudaSuccess) return -1;
  if (c->track) {
    size_t h = held_now(c);
    if (h > c->peak) c->peak = h;
  }
  return 0;
}

int c_free(void *ctx, void *p, size_t, int) {
  auto *c = static_cast<cub_ctx *>(ctx);
  return c->alloc.DeviceFree(c->device, p) == cudaSuccess ? 0 : -1;
}

int c_held(void *ctx, size_t *now, size_t *peak) {
  auto *c = static_cast<cub_ctx *>(ctx);
  *now = held_now(c);
  *peak = c->peak;
  return 0;
}

void c_track(void *ctx, int on) { static_cast<cub_ctx *>(ctx)->track = on != 0; }

void c_destroy(void *ctx) {
  cudaDeviceSynchronize();
  delete static_cast<cub_ctx *>(ctx);
}

}  // namespace

extern "C" int peer_cub(bench_peer *p, const bench_env *env, char *why) {
  std::memset(p, 0, sizeof *p);
  if (!env->have_gpu) {
    std::snprintf(why, 160, "%s", env->no_gpu_reason);
    return -1;
  }
  auto *c = new (std::nothrow) cub_ctx;
  if (c == nullptr) {
    std::snprintf(why, 160, "out of host memory");
    return -1;
  }
  c->device = env->device;
  for (int s = 0; s < BENCH_STREAMS; s++) c->streams[s] = static_cast<cudaStream_t>(env->streams[s]);
  std::snprintf(p->name, sizeof p->name, "CUB CachingDeviceAllocator");
  p->device_mem = 1;
  p->thread_safe = 1;
  p->ctx = c;
  p->alloc = c_alloc;
  p->free = c_free;
  p->held = c_held;
  p->track_peak = c_track;
  p->destroy = c_destroy;
  return 0;
}
