/* rap_torch.cpp — PyTorch's pluggable CUDA allocator ABI over rap's ResourceAwarePool.
 *
 *   torch.cuda.memory.CUDAPluggableAllocator(path, "rap_torch_malloc", "rap_torch_free")
 *
 * PyTorch passes the device and the current stream to malloc and the allocation's stream to free,
 * so each tensor's block is owned by the stream it was made on: freed, it is pending on that
 * stream, which may reuse it at once; other streams get it only once the stream has passed the
 * free (and every stream it was recorded on, through rap_torch_record_stream). See rap_glue.c for
 * the pools, the stream table and CUDA graph capture.
 *
 * This file is C++ for one reason: PyTorch's pluggable allocator does not check for NULL, so a
 * NULL from malloc becomes a tensor at address 0. By default a failed allocation throws (a
 * std::bad_alloc whose what() carries rap's sentence), which PyTorch turns into a Python
 * exception; RAP_TORCH_OOM=null returns NULL instead. Either way the failure is logged.
 */
#include "rap_glue.h"
#include "rap_pyframes.h"
#include "rap_torch.h"

#include <rap/strategy.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

extern "C" const rap_glue_config glue_cfg = {
    "torch",
    "RAP_TORCH_SPEC",
    /* cross_resource=wait: past 512 MiB held, and once more than 512 MiB is pending on other
     * streams (record_stream, FSDP and NCCL hand-offs), a stream whose memory another stream still
     * uses waits for it on the GPU instead of the pool growing with the CPU's lead; below that
     * it grows, so FSDP's streams are not queued behind each other; on one stream nothing waits. */
    RAP_DEFAULT_DEVICE_SPEC,
    RAP_FALLBACK_DEVICE_SPEC,
    "RAP_TORCH_GRAPHS",
};

namespace {

class rap_out_of_memory : public std::bad_alloc {
 public:
  explicit rap_out_of_memory(std::string m) : msg_(std::move(m)) {}
  const char *what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

bool oom_returns_null() {
  static const bool v = [] {
    const char *e = std::getenv("RAP_TORCH_OOM");
    return e != nullptr && std::strcmp(e, "null") == 0;
  }();
  return v;
}

/* PyTorch's c10::cuda::MempoolId_t and the filter its graph captures pass: the signatures its
 * set_begin_allocate_to_pool / set_end_allocate_to_pool_fn / set_release_pool bindings cast the
 * function addresses to (torch/csrc/cuda/Module.cpp). */
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using StreamFilter = std::function<bool(cudaStream_t)>;

int call_filter(void *ctx, cudaStream_t s) {
  try {
    return (*static_cast<StreamFilter *>(ctx))(s) ? 1 : 0;
  } catch (...) {   /* the filter asks CUDA about the stream; an error means "not this capture" */
    return 0;
  }
}

void drop_filter(void *ctx) { delete static_cast<StreamFilter *>(ctx); }

}  // namespace

/* C linkage for a plain symbol name that ctypes finds; the parameters are C++ types, passed as
 * PyTorch's C++ caller passes them (the calling convention does not depend on the linkage). */
extern "C" {

RAP_EXPORT void rap_torch_begin_allocate_to_pool(int device, MempoolId id, StreamFilter filter) {
  auto *f = new (std::nothrow) StreamFilter(std::move(filter));
  int st = f ? glue_begin_pool(device, id.first, id.second, f, call_filter, drop_filter)
             : RAP_ERR_NOMEM;
  if (st != RAP_OK)
    rap_log(RAP_LOG_ERROR, "rap_torch: begin_allocate_to_pool(%d, (%llu, %llu)): %s: %s", device,
            id.first, id.second, rap_status_name(st), rap_last_error());
}

RAP_EXPORT void rap_torch_end_allocate_to_pool(int device, MempoolId id) {
  (void)glue_end_pool(device, id.first, id.second);
}

RAP_EXPORT void rap_torch_release_pool(int device, MempoolId id) {
  (void)glue_release_pool(device, id.first, id.second);
}

/* Called by rap_torch.py once PyTorch takes the three functions above: captures are then known
 * from PyTorch instead of being asked of CUDA at each allocation. */
RAP_EXPORT void rap_torch_use_pool_hooks(int on) { glue_use_pool_hooks(on); }

RAP_EXPORT void *rap_torch_malloc(size_t size, int device, cudaStream_t stream) {
  void *p = nullptr;
  char frames[4096];   /* RAP_TRACE_PYTHON_STACK: the caller's Python frames, before any lock */
  bool with_frames = pyframes_gather(frames, sizeof frames);
  if (with_frames) rap_trace_set_pystack(frames);
  int st = glue_malloc(&p, size, device, stream);
  if (with_frames) rap_trace_set_pystack(nullptr);
  if (st == RAP_OK) return p;
  char msg[1024];
  std::snprintf(msg, sizeof msg, "%srap_torch: cannot allocate %zu bytes on device %d (stream %p): %s: %s",
                st == RAP_ERR_NOMEM ? "CUDA out of memory. " : "", size, device, (void *)stream,
                rap_status_name(st), rap_last_error());
  rap_log(RAP_LOG_ERROR, "%s", msg);
  if (oom_returns_null()) return nullptr;
  throw rap_out_of_memory(msg);
}

RAP_EXPORT void rap_torch_free(void *ptr, size_t size, int device, cudaStream_t stream) {
  (void)size;
  (void)stream;   /* the block's owner: rap finds it from the pointer */
  int st = glue_free(ptr, device);
  if (st != RAP_OK)
    rap_log(RAP_LOG_ERROR, "rap_torch: cannot free %p on device %d: %s: %s", ptr, device,
            rap_status_name(st), rap_last_error());
}

/* For CUDAPluggableAllocator::set_record_stream_fn, or called from rap_torch.py's record_stream. */
RAP_EXPORT void rap_torch_record_stream(void *ptr, cudaStream_t stream) {
  int st = glue_record(ptr, stream);
  if (st != RAP_OK)
    rap_log(RAP_LOG_DEBUG, "rap_torch: record_stream(%p, %p): %s: %s", ptr, (void *)stream,
            rap_status_name(st), rap_last_error());
}

/* For set_reset_fn / torch.cuda.empty_cache: polls every stream and releases wholly free chunks. */
RAP_EXPORT void rap_torch_empty_cache(void) {
  int st = glue_release();
  if (st != RAP_OK)
    rap_log(RAP_LOG_WARN, "rap_torch: empty_cache: %s: %s", rap_status_name(st), rap_last_error());
}

/* torch.cuda.set_per_process_memory_fraction, through set_memory_fraction_fn: the device's pool
 * may reserve at most fraction x the device's total memory; an allocation past it is out of
 * memory (torch.OutOfMemoryError). PyTorch's hook returns nothing, so a refused fraction (outside
 * (0, 1]) or a failure throws, with rap's sentence, which PyTorch raises in Python. */
RAP_EXPORT int rap_torch_memory_fraction(int device, double fraction) {
  return glue_set_memory_fraction(device, fraction);
}

RAP_EXPORT void rap_torch_set_memory_fraction(double fraction, int device) {
  int st = glue_set_memory_fraction(device, fraction);
  if (st == RAP_OK) return;
  std::string msg = std::string("rap_torch: set_per_process_memory_fraction: ") + rap_last_error();
  rap_log(RAP_LOG_ERROR, "%s", msg.c_str());
  if (st == RAP_ERR_INVALID) throw std::invalid_argument(msg);
  throw std::runtime_error(msg);
}

/* The device's limit in bytes (0: none). */
RAP_EXPORT int rap_torch_memory_limit(int device, size_t *limit) { return glue_memory_limit(device, limit); }

/* Gives back the pools of finished CUDA graph captures that hold no live block. Call it only once
 * the graphs captured with rap are destroyed: a graph's replays use that memory. */
RAP_EXPORT size_t rap_torch_release_graph_pools(void) {
  size_t n = 0;
  (void)glue_release_graph_pools(&n);
  return n;
}

/* Statistics, in the order of rap_glue.h's GLUE_* values; graph != 0 sums the graph pools. */
RAP_EXPORT int rap_torch_stat_values(int device, int graph, size_t *out, size_t n) {
  return glue_stat_values(device, graph, out, n);
}

RAP_EXPORT int rap_torch_stat_count(void) { return GLUE_NSTATS; }

/* torch.cuda.reset_peak_memory_stats and reset_accumulated_memory_stats, once enabled. */
RAP_EXPORT int rap_torch_reset_peaks(int device) { return glue_reset_peaks(device); }

RAP_EXPORT int rap_torch_reset_accumulated(int device) { return glue_reset_accumulated(device); }

/* rap.torch.sleep and wake: the device's pool gives its memory back and takes it again
 * (DEVICE_VMM only; rap_allocator_sleep). */
RAP_EXPORT int rap_torch_sleep(int device, int mode) { return glue_sleep(device, mode); }

RAP_EXPORT int rap_torch_wake(int device) { return glue_wake(device); }

RAP_EXPORT int rap_torch_ipc_export(void *ptr, int device, void *desc) {
  return glue_ipc_export(ptr, device, desc);
}
RAP_EXPORT int rap_torch_ipc_import(const void *desc, int device, cudaStream_t s, void **out) {
  return glue_ipc_import(desc, device, s, out);
}
RAP_EXPORT int rap_torch_ipc_close(void *ptr, int device, cudaStream_t s) {
  return glue_ipc_close(ptr, device, s);
}

/* rap.torch.register_mem_pool: whether NCCL can register ptr's memory (NULL: the device pool's). */
RAP_EXPORT int rap_torch_registrable(const void *ptr, int device) { return glue_registrable(ptr, device); }

RAP_EXPORT int rap_torch_spec(int device, char *buf, size_t cap) { return glue_spec(device, buf, cap); }

/* rap.torch.set_python_stack: the Python frames each traced allocation carries (0 to 32; 0: none). */
RAP_EXPORT int rap_torch_python_stack(int depth) { return pyframes_set_depth(depth); }

RAP_EXPORT int rap_torch_python_stack_depth(void) { return pyframes_depth(); }

RAP_EXPORT const char *rap_torch_last_error(void) { return rap_last_error(); }

}  // extern "C"
