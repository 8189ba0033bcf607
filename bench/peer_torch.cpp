// peer_torch.cpp — PyTorch's CUDA caching allocator as a bench peer, through its C++ entry points:
// a plugin (librap_bench_torch.so) that rap-bench loads with --torch-plugin, so that PyTorch runs in
// the same process as every other allocator while rap-bench stays one binary built anywhere.
//
// Built on the GPU machine by bench/build-torch-peer.sh, against the installed torch's headers and
// its libc10/libc10_cuda (nothing else of torch is needed); it uses the shared CUDA runtime that
// libc10_cuda loads, and rap-bench's streams, which every runtime in the process shares through the
// device's primary context. Two modes:
//   raw:    raw_alloc_with_stream / raw_delete, the entry points that extensions use;
//   record: DataPtrs from allocate() on the current stream, so that recordStream (the C++ side of
//           Tensor.record_stream) can mark a block as used by another stream — workload (d2).
#include "bench.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <unordered_map>

// Exported by libc10_cuda but declared in no header: libtorch_cuda's CUDAHooks declares it the same way.
namespace c10::cuda::_internal {
void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

struct torch_ctx {
  cudaStream_t streams[BENCH_STREAMS] = {};
  int device = 0;
  bool record_mode = false;
  std::mutex lock;                                   // guards live (record mode only)
  std::unordered_map<void *, c10::DataPtr> live;
};

c10::cuda::CUDAStream stream_of(torch_ctx *c, int s) {
  return c10::cuda::getStreamFromExternal(c->streams[s], static_cast<c10::DeviceIndex>(c->device));
}

int t_alloc(void *ctx, void **p, size_t n, int s) {
  auto *c = static_cast<torch_ctx *>(ctx);
  try {
    if (!c->record_mode) {
      *p = cca::raw_alloc_with_stream(n, c->streams[s]);
      return *p ? 0 : -1;
    }
    c10::cuda::setCurrentCUDAStream(stream_of(c, s));
    c10::DataPtr dp = cca::get()->allocate(n);
    *p = dp.get();
    std::lock_guard<std::mutex> g(c->lock);
    c->live.emplace(*p, std::move(dp));
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rap-bench torch plugin: allocate(%zu): %.200s\n", n, e.what());
    return -1;
  }
}

int t_free(void *ctx, void *p, size_t, int) {
  auto *c = static_cast<torch_ctx *>(ctx);
  try {
    if (!c->record_mode) {
      cca::raw_delete(p);
      return 0;
    }
    std::lock_guard<std::mutex> g(c->lock);
    return c->live.erase(p) == 1 ? 0 : -1;   // the DataPtr's deleter gives the block back
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rap-bench torch plugin: free: %.200s\n", e.what());
    return -1;
  }
}

int t_record(void *ctx, void *p, int s) {
  auto *c = static_cast<torch_ctx *>(ctx);
  try {
    std::lock_guard<std::mutex> g(c->lock);
    auto it = c->live.find(p);
    if (it == c->live.end()) return -1;
    cca::recordStream(it->second, stream_of(c, s));
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rap-bench torch plugin: recordStream: %.200s\n", e.what());
    return -1;
  }
}

int t_held(void *ctx, size_t *now, size_t *peak) {
  auto *c = static_cast<torch_ctx *>(ctx);
  try {
    auto st = cca::getDeviceStats(static_cast<c10::DeviceIndex>(c->device));
    *now = static_cast<size_t>(st.reserved_bytes[0].current);   // [0]: StatType::AGGREGATE
    *peak = static_cast<size_t>(st.reserved_bytes[0].peak);
    return 0;
  } catch (const std::exception &) {
    return -1;
  }
}

// c10 asks whether a device has a primary context before it switches devices (in the frees of
// blocks that carry recorded streams); libtorch_cuda answers that, and it is not loaded here.
// rap-bench has made the context already, so the answer is yes.
bool has_primary_context(c10::DeviceIndex) { return true; }

void reset(torch_ctx *c) {
  cudaDeviceSynchronize();
  cca::emptyCache();
  cca::resetPeakStats(static_cast<c10::DeviceIndex>(c->device));
}

void t_destroy(void *ctx) {
  auto *c = static_cast<torch_ctx *>(ctx);
  try {
    c->live.clear();
    reset(c);
    c10::cuda::setCurrentCUDAStream(c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(c->device)));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rap-bench torch plugin: teardown: %.200s\n", e.what());
  }
  delete c;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int rap_bench_torch_factory(
    const bench_env *env, int with_record, bench_peer *p, char *why) {
  std::memset(p, 0, sizeof *p);
  auto *c = new (std::nothrow) torch_ctx;
  if (c == nullptr) {
    std::snprintf(why, 160, "out of host memory");
    return -1;
  }
  try {
    static std::once_flag once;   // nothing else in this process initializes the allocator
    std::call_once(once, [] {
      c10::cuda::_internal::setHasPrimaryContext(has_primary_context);
      cca::init(c10::cuda::device_count());
    });
    c->device = env->device;
    c->record_mode = with_record != 0;
    for (int s = 0; s < BENCH_STREAMS; s++) c->streams[s] = static_cast<cudaStream_t>(env->streams[s]);
    reset(c);
  } catch (const std::exception &e) {
    std::snprintf(why, 160, "PyTorch caching allocator: %.120s", e.what());
    delete c;
    return -1;
  }
  std::snprintf(p->name, sizeof p->name, "PyTorch caching allocator");
  p->device_mem = 1;
  p->thread_safe = 1;
  p->ctx = c;
  p->alloc = t_alloc;
  p->free = t_free;
  p->record = with_record ? t_record : nullptr;
  p->held = t_held;
  p->destroy = t_destroy;
  return 0;
}

