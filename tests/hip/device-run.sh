#!/usr/bin/env bash
# device-run.sh — what runs on the NVIDIA GPU machine over a carried build-device-hip/
# (make device-build-hip: the HIP backend built over the CUDA runtime with HIP's NVIDIA headers).
# The HIP tests, then the same under compute-sanitizer (memcheck with leak check, racecheck,
# synccheck), and the host tests of that build; logs under $OUT, a summary on stdout.
#   bash tests/hip/device-run.sh
set -uo pipefail
out=${OUT:-out}
b=build-device-hip
mkdir -p "$out"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1; } | tee "$out/machine.txt"
status=0
for t in "$b"/tests/rap_hip_tests "$b"/tests/rap_host_tests; do
  "$t" --gtest_color=no > "$out/$(basename "$t").log" 2>&1 || status=1
  echo "$(basename "$t"): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$(basename "$t").log" | tr '\n' ' ')"
done
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$cs" ]; then
  for tool in "memcheck --leak-check full" racecheck synccheck; do
    name=${tool%% *}
    # API errors are not reported: one test makes hipMalloc (cudaMalloc) run out of memory on purpose.
    $cs --tool $tool --report-api-errors no --error-exitcode 3 "$b/tests/rap_hip_tests" --gtest_color=no \
      > "$out/sanitizer-$name.log" 2>&1 || status=1
    echo "$name: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|^\[  (PASSED|FAILED) ' \
      "$out/sanitizer-$name.log" | tr '\n' ' ')"
  done
else
  echo "no compute-sanitizer here: the race detectors under it did not run"; status=1
fi
exit $status
