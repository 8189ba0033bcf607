#!/usr/bin/env bash
# device-run.sh — what runs on the GPU machine over a carried device-build/ (make device-build):
# the CUDA tests, the host tests, the demo and the benchmarks, with logs under $OUT.
#   RAP_DEVICE_RUN=bench bash scripts/device-run.sh    only the benchmarks (and machine.txt)
#   RAP_DEVICE_RUN=tests bash scripts/device-run.sh    everything but the benchmarks
# The CUDA tests also run under compute-sanitizer (memcheck with leak check, racecheck, synccheck);
# each tool's log is $OUT/sanitizer-<tool>.log and their summary lines are in $OUT/sanitizer.txt.
# Benchmarks: where python3 has torch, bench/build-torch-peer.sh first builds librap_bench_torch.so,
# which rap-bench loads to add PyTorch's caching allocator as a peer; otherwise rap-bench says why
# that peer was skipped. The mimalloc peer uses the libmimalloc.so.2 that make device-build put
# beside rap-bench (or RAP_BENCH_MIMALLOC). Results: $OUT/bench.{json,csv,log}; RAP_BENCH_ARGS adds
# options, e.g. RAP_BENCH_ARGS="--only e,e-x,e-host,e-x-host --threads 1,2,4,8,16" for a plot of
# each with bench/plot_threads.py.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
b=device-build
what=${RAP_DEVICE_RUN:-all}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
} > "$out/machine.txt"
cat "$out/machine.txt"
status=0
if [ "$what" != bench ]; then
  for t in "$b"/tests/rap_cuda_tests "$b"/tests/rap_host_tests; do
    [ -x "$t" ] || continue
    "$t" --gtest_color=no > "$out/$(basename "$t").log" 2>&1 || status=1
    tail -3 "$out/$(basename "$t").log"
  done
  if [ -x "$b/tests/stress/rap_stress_cuda" ]; then
    "$b"/tests/stress/rap_stress_cuda --ops 100000 > "$out/stress_cuda.log" 2>&1 || status=1
    tail -1 "$out/stress_cuda.log"
  fi
  "$b"/examples/demo > "$out/demo.log" 2>&1 || status=1
  cat "$out/demo.log"
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$cs" ] && [ -x "$b/tests/rap_cuda_tests" ]; then
    : > "$out/sanitizer.txt"
    for tool in "memcheck --leak-check full" racecheck synccheck; do
      name=${tool%% *}
      # Only the CUDA tests run (the host tests make no CUDA calls). API errors are not reported:
      # one test makes cudaMalloc run out of memory on purpose (its status is what it checks).
      $cs --tool $tool --report-api-errors no --error-exitcode 3 "$b/tests/rap_cuda_tests" --gtest_color=no \
        > "$out/sanitizer-$name.log" 2>&1 || status=1
      { echo "$name: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$out/sanitizer-$name.log" | tr '\n' ' ')";
        grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/sanitizer-$name.log" | head -3; } >> "$out/sanitizer.txt"
    done
    cat "$out/sanitizer.txt"
  fi
fi
if [ "$what" = tests ]; then exit $status; fi
if [ -x "$b/bench/rap-bench" ]; then
  plugin="$b/bench/librap_bench_torch.so"
  rm -f "$plugin"
  note=$(bash bench/build-torch-peer.sh "$plugin" 2>&1)
  echo "$note"
  args=(--out "$out/bench.json")
  if [ -f "$plugin" ]; then
    args+=(--torch-plugin "$plugin")
  else
    export RAP_BENCH_TORCH_NOTE="not built on this machine: $(echo "$note" | head -3 | tr '\n' ' ')"
  fi
  # bench.log: the plugin build's note, the progress lines, then the table (last, for the tail).
  "$b/bench/rap-bench" "${args[@]}" ${RAP_BENCH_ARGS:-} > "$out/bench.table" 2> "$out/bench.progress" || status=1
  if [ ! -s "$out/bench.json" ] && [ -f "$plugin" ]; then
    # The run with the plugin died early: run again without it, saying so.
    { echo "rap-bench with the PyTorch plugin failed:"; tail -5 "$out/bench.table"; } >> "$out/bench.progress"
    export RAP_BENCH_TORCH_NOTE="rap-bench with the plugin failed on this machine (see bench.log)"
    "$b/bench/rap-bench" --out "$out/bench.json" ${RAP_BENCH_ARGS:-} > "$out/bench.table" 2>> "$out/bench.progress" || status=1
  fi
  { echo "$note"; cat "$out/bench.progress" "$out/bench.table"; } > "$out/bench.log"
  rm -f "$out/bench.table" "$out/bench.progress"
  cat "$out/bench.log"
fi
exit $status
