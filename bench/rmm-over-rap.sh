#!/usr/bin/env bash
# rmm-over-rap.sh — on the GPU machine: RMM 26.06's device_buffer, device_uvector and device_scalar
# with a rap::memory_resource as the current device resource (bench/rmm_over_rap.cpp), then rap.hpp's
# own CUDA tests (cuda::mr resource, Thrust), also under compute-sanitizer memcheck where it is.
#   bash bench/rmm-over-rap.sh            # the build in ${RAP_BUILD:-device-build}
# rap_rmm_check exists only where scripts/fetch-peers.sh placed RMM's sources before the build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAP_BUILD:-device-build}
status=0
if [ -x "$build/bench/rap_rmm_check" ]; then
  "$build/bench/rap_rmm_check" || status=1
else
  echo "rmm-over-rap: no $build/bench/rap_rmm_check (RMM's sources were not there at the build: scripts/fetch-peers.sh)"
fi
"$build/tests/rap_cpp_cuda_tests" || status=1
# API errors are not reported: finding out whether a device is usable makes calls that may fail.
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$cs" ]; then
  "$cs" --tool memcheck --report-api-errors no --error-exitcode 3 "$build/tests/rap_cpp_cuda_tests" \
    --gtest_brief=1 || status=1
  if [ -x "$build/bench/rap_rmm_check" ]; then
    "$cs" --tool memcheck --report-api-errors no --error-exitcode 3 "$build/bench/rap_rmm_check" --gtest_brief=1 || status=1
  fi
else
  echo "rmm-over-rap: no compute-sanitizer here: the memcheck runs did not happen"
fi
exit $status
