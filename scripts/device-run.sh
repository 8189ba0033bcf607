#!/usr/bin/env bash
# device-run.sh — what runs on the GPU machine over a carried device-build/ (make device-build):
# the CUDA tests, the host tests, the demo and the benchmarks, with logs under $OUT.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
b=device-build
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
} > "$out/machine.txt"
status=0
for t in "$b"/tests/rap_cuda_tests "$b"/tests/rap_host_tests; do
  [ -x "$t" ] || continue
  "$t" --gtest_color=no > "$out/$(basename "$t").log" 2>&1 || status=1
  tail -3 "$out/$(basename "$t").log"
done
"$b"/examples/demo > "$out/demo.log" 2>&1 || status=1
cat "$out/demo.log"
if [ -x "$b/bench/rap-bench" ]; then
  "$b/bench/rap-bench" --out "$out/bench.json" > "$out/bench.log" 2>&1 || status=1
  cat "$out/bench.log"
fi
exit $status
