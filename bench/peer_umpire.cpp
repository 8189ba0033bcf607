// peer_umpire.cpp — LLNL Umpire's QuickPool as a bench peer, alone (one thread at a time, as Umpire's
// pools are) and behind Umpire's ThreadSafeAllocator (a mutex, for the thread workloads). Built only
// where scripts/build-umpire.sh installed Umpire into third_party/umpire-install.
//
// Each peer is a new named allocator of Umpire's one ResourceManager: QuickPool over "DEVICE"
// (cudaMalloc) with 1 MiB first and next blocks, as rap's pools in (b), Umpire's default alignment
// (16 B) and coalescing heuristic, tracked as Umpire's allocators are by default. Umpire has no
// streams: the stream index is ignored. Umpire cannot remove a named allocator, so destroy gives the
// pool's free blocks back (release) and leaves the empty allocator in the manager. Bytes held are
// the allocator's actual size, read after each allocation while the workload asks for the peak.
#include "bench.h"

#include <umpire/Allocator.hpp>
#include <umpire/ResourceManager.hpp>
#include <umpire/strategy/QuickPool.hpp>
#include <umpire/strategy/ThreadSafeAllocator.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace {

std::atomic<int> made{0};   // allocator names must be unique in the ResourceManager

struct um_ctx {
  umpire::Allocator a;
  size_t peak = 0;
  bool track = false;
};

int u_alloc(void *ctx, void **p, size_t n, int) {
  auto *c = static_cast<um_ctx *>(ctx);
  try {
    *p = c->a.allocate(n);
  } catch (const std::exception &) {
    return -1;
  }
  if (c->track) {
    size_t h = c->a.getActualSize();
    if (h > c->peak) c->peak = h;
  }
  return 0;
}

int u_free(void *ctx, void *p, size_t, int) {
  auto *c = static_cast<um_ctx *>(ctx);
  try {
    c->a.deallocate(p);
  } catch (const std::exception &) {
    return -1;
  }
  return 0;
}

int u_held(void *ctx, size_t *now, size_t *peak) {
  auto *c = static_cast<um_ctx *>(ctx);
  *now = c->a.getActualSize();
  *peak = c->peak > *now ? c->peak : *now;
  return 0;
}

void u_track(void *ctx, int on) { static_cast<um_ctx *>(ctx)->track = on != 0; }

void u_destroy(void *ctx) {
  auto *c = static_cast<um_ctx *>(ctx);
  try {
    c->a.release();
  } catch (const std::exception &) {
  }
  delete c;
}

}  // namespace

extern "C" int peer_umpire(bench_peer *p, const bench_env *env, int thread_safe, char *why) {
  std::memset(p, 0, sizeof *p);
  if (!env->have_gpu) return std::snprintf(why, 160, "%s", env->no_gpu_reason), -1;
  um_ctx *c = nullptr;
  try {
    auto &rm = umpire::ResourceManager::getInstance();
    std::string name = "rap-bench-quickpool-" + std::to_string(made++);
    auto pool = rm.makeAllocator<umpire::strategy::QuickPool>(name, rm.getAllocator("DEVICE"),
                                                              std::size_t{1} << 20, std::size_t{1} << 20);
    c = new um_ctx{thread_safe ? rm.makeAllocator<umpire::strategy::ThreadSafeAllocator>(name + "-ts", pool)
                               : pool};
  } catch (const std::exception &e) {
    std::snprintf(why, 160, "%s", e.what());
    return -1;
  }
  std::snprintf(p->name, sizeof p->name, thread_safe ? "Umpire ThreadSafe(QuickPool)" : "Umpire QuickPool");
  p->device_mem = 1;
  p->thread_safe = thread_safe;
  p->ctx = c;
  p->alloc = u_alloc;
  p->free = u_free;
  p->held = u_held;
  p->track_peak = u_track;
  p->destroy = u_destroy;
  return 0;
}
