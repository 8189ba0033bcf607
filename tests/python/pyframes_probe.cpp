/* pyframes_probe.cpp — rap_torch_malloc's way with Python's frames, without PyTorch or a GPU: the
 * frames are gathered (integrations/torch/rap_pyframes.cpp), handed to the trace, and the block
 * is allocated from any rap allocator. Loaded by tests/python/test_pyframes.py through ctypes:
 * PyDLL keeps the GIL through the call (PyTorch's allocations from Python code hold it), CDLL
 * lets it go (a thread without Python frames). */
#include "rap_pyframes.h"

#include <rap/rap.h>

extern "C" __attribute__((visibility("default"))) int rap_probe_allocate(rap_allocator *a, void **out,
                                                                       size_t size) {
  char frames[4096];
  bool with_frames = pyframes_gather(frames, sizeof frames);
  if (with_frames) rap_trace_set_pystack(frames);
  int st = rap_allocate(a, out, size, nullptr);
  if (with_frames) rap_trace_set_pystack(nullptr);
  return st;
}

extern "C" __attribute__((visibility("default"))) int rap_probe_set_depth(int depth) {
  return pyframes_set_depth(depth);
}
