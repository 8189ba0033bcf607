#!/usr/bin/env bash
# run_tests.sh — rap_cupy on a GPU machine, over a build made by `make device-build`: the full test
# (stream ownership, two streams with early frees, stats, stream retirement, CUDA graph capture,
# out of memory, timing against CuPy's MemoryPool) with CuPy's C current-stream function; CuPy's
# names (the MemoryPool surface, limits, CUPY_GPU_MEMORY_LIMIT, the pinned pool); then ownership
# and timing again with the Python fallback; arrays across processes (rap_cupy.share/open with a
# spawned child, over DeviceVmm(export=posix)). Writes cupy_summary.txt, cupy_results.json and
# cupy_log.txt to $OUT (default <repo>/out). Exit status 1 on a failure.
# The rest (environment, log, results) is integrations/common/run_tests.sh, shared with torch.
show_env="RAP_CUPY_STREAM_SOURCE RAP_CUPY_SPEC"
# shellcheck source-path=SCRIPTDIR source=../common/run_tests.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/run_tests.sh" cupy

run full
run pool
RAP_CUPY_STREAM_SOURCE=python run quick
# Arrays across processes: rap_cupy.share/open over an exporting platform, with a spawned child.
RAP_CUPY_SPEC="ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)" \
  run ipc
RAP_CUPY_SPEC="ResourceAwarePool(StreamOrdered(device={device}, pool=new, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)" \
  run ipc --tag streamordered
finish
