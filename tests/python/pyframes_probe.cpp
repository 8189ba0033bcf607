/* pyframes_probe.cpp — rap_torch_malloc's way with Python's frames, without PyTorch or a GPU: the
 * frames are gathered (integrations/torch/rap_pyframes.cpp), handed to the trace, and the block
 * is allocated from any rap allocator. Loaded by tests/python/test_pyframes.py through ctypes:
 * PyDLL keeps the GIL through the call, CDLL lets it go (as PyTorch does around its operators:
 * the frames are gathered with the GIL taken back), and rap_probe_allocate_on_a_c_thread allocates
 * from a thread Python never saw (none). */
#include "rap_pyframes.h"

#include <rap/rap.h>

#include <thread>

extern "C" __attribute__((visibility("default"))) int rap_probe_allocate(rap_allocator *a, void **out,
                                                                       size_t size) {
  char frames[4096];
  bool with_frames = pyframes_gather(frames, sizeof frames);
  if (with_frames) rap_trace_set_pystack(frames);
  int st = rap_allocate(a, out, size, nullptr);
  if (with_frames) rap_trace_set_pystack(nullptr);
  return st;
}

extern "C" __attribute__((visibility("default"))) int rap_probe_allocate_on_a_c_thread(rap_allocator *a,
                                                                                    void **out,
                                                                                    size_t size) {
  int st = RAP_OK;
  std::thread t([&] { st = rap_probe_allocate(a, out, size); });
  t.join();
  return st;
}

extern "C" __attribute__((visibility("default"))) int rap_probe_set_depth(int depth) {
  return pyframes_set_depth(depth);
}
