#!/usr/bin/env bash
# device-run.sh — what runs on the GPU machine over a carried device-build/ (make device-build):
# the CUDA tests, the host tests, the demo and the benchmarks, with logs under $OUT.
#   RAP_DEVICE_RUN=bench bash scripts/device-run.sh      only the benchmarks (and machine.txt)
#   RAP_DEVICE_RUN=tests bash scripts/device-run.sh      everything but the benchmarks
#   RAP_DEVICE_RUN=sanitizer bash scripts/device-run.sh  only the compute-sanitizer runs
#   RAP_DEVICE_RUN=scale bash scripts/device-run.sh      (e) at 1, 4, 16, 32 and 60 threads (those
#       the machine has cores for; RAP_SCALE_THREADS=1,4,16,32 names them), each peer's scaling
#       against its one-thread figure (bench/scaling.py), then the ThreadCache race detector at the
#       top count (ThreadCache.RaceDetectorAtScale, RAP_TEST_THREADS): its line of foreign words.
#       Results: $OUT/scale.{json,csv,log}, $OUT/scale-race.log; RAP_BENCH_ARGS adds options.
#   RAP_DEVICE_RUN=distributed bash scripts/device-run.sh  torch.distributed on every GPU (at least
#     two; RAP_DIST_RANKS=N for fewer): DDP and FSDP2 native vs rap per rank, NCCL's registration of
#     rap memory (integrations/torch/run_distributed.sh)
# The CUDA tests also run under compute-sanitizer (memcheck with leak check, racecheck, synccheck),
# with RAP_TEST_SMALL=1: the long test loops run a tenth of their rounds there (tests/cuda/
# gpu_test.h), since every launch and API call costs far more under a tool. Each tool's log is
# $OUT/sanitizer-<tool>.log and their summary lines are in $OUT/sanitizer.txt. To keep each command
# within a time limit, run the tools one per invocation, and if one is still too slow, split the
# cases into shards (GoogleTest's sharding):
#   RAP_DEVICE_RUN=sanitizer RAP_SANITIZER=memcheck bash scripts/device-run.sh
#   RAP_DEVICE_RUN=sanitizer RAP_SANITIZER=racecheck bash scripts/device-run.sh
#   RAP_DEVICE_RUN=sanitizer RAP_SANITIZER=synccheck RAP_SANITIZER_SHARD=0/2 bash scripts/device-run.sh
# RAP_SANITIZER names the tools to run (default "memcheck racecheck synccheck"; "none" for the
# tests alone: RAP_DEVICE_RUN=tests RAP_SANITIZER=none); RAP_SANITIZER_SHARD
# is I/N, shard I of N (logs sanitizer-<tool>-<I>of<N>.log); RAP_SANITIZER_TIMEOUT=S stops a tool
# after S seconds and says so, so that the next tool still runs.
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
case "$what" in
  all|tests|bench|sanitizer|scale) ;;
  distributed) OUT=$out exec bash integrations/torch/run_distributed.sh ;;
  *) echo "RAP_DEVICE_RUN is all, tests, bench, sanitizer, scale or distributed, not '$what'"; exit 2 ;;
esac
tools=${RAP_SANITIZER:-memcheck racecheck synccheck}
[ "$tools" = none ] && tools=
for tool in $tools; do
  case "$tool" in
    memcheck|racecheck|synccheck) ;;
    *) echo "RAP_SANITIZER names memcheck, racecheck or synccheck, not '$tool'"; exit 2 ;;
  esac
done
shard=${RAP_SANITIZER_SHARD:-}
if [ -n "$shard" ] && ! [[ "$shard" =~ ^[0-9]+/[1-9][0-9]*$ && ${shard%/*} -lt ${shard#*/} ]]; then
  echo "RAP_SANITIZER_SHARD is I/N with 0 <= I < N, not '$shard'"; exit 2
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
} > "$out/machine.txt"
cat "$out/machine.txt"
status=0
if [ "$what" = scale ]; then
  cores=$(nproc)
  counts=${RAP_SCALE_THREADS:-}
  if [ -z "$counts" ]; then
    for n in 1 4 16 32 60; do [ "$n" -le "$cores" ] && counts="$counts${counts:+,}$n"; done
  fi
  top=${counts##*,}
  echo "scale: $cores cores; (e) at $counts threads; the race detector at $top"
  if [ -x "$b/bench/rap-bench" ]; then
    "$b/bench/rap-bench" --only e --threads "$counts" --out "$out/scale.json" ${RAP_BENCH_ARGS:-} \
      > "$out/scale.log" 2>&1 || status=1
    python3 bench/scaling.py "$out/scale.json" >> "$out/scale.log" 2>&1 || status=1
    cat "$out/scale.log"
  else
    echo "no $b/bench/rap-bench"; status=1
  fi
  if [ -x "$b/tests/rap_cuda_tests" ]; then
    RAP_TEST_THREADS=$top "$b/tests/rap_cuda_tests" --gtest_color=no \
      --gtest_filter='*ThreadCache.RaceDetectorAtScale' > "$out/scale-race.log" 2>&1 || status=1
    grep -E "foreign words|^\[  (PASSED|FAILED|SKIPPED) " "$out/scale-race.log"
  else
    echo "no $b/tests/rap_cuda_tests"; status=1
  fi
  exit $status
fi
if [ "$what" = all ] || [ "$what" = tests ]; then
  for t in "$b"/tests/rap_cuda_tests "$b"/tests/rap_host_tests "$b"/tests/rap_cpp_cuda_tests \
           "$b"/tests/rap_cpp_tests; do
    [ -x "$t" ] || continue
    "$t" --gtest_color=no > "$out/$(basename "$t").log" 2>&1 || status=1
    tail -3 "$out/$(basename "$t").log"
  done
  if [ -x "$b/tests/stress/rap_stress_cuda" ]; then
    "$b"/tests/stress/rap_stress_cuda --ops 100000 > "$out/stress_cuda.log" 2>&1 || status=1
    tail -1 "$out/stress_cuda.log"
  fi
  if [ -x "$b/tests/rap_ipc_all_to_all" ]; then   # every GPU, one process each (77: fewer than two)
    "$b"/tests/rap_ipc_all_to_all all > "$out/ipc_all_to_all.log" 2>&1
    a2a=$?
    [ "$a2a" = 0 ] || [ "$a2a" = 77 ] || status=1
    grep -E '^(DeviceVmm|StreamOrdered|skipped)' "$out/ipc_all_to_all.log"
  fi
  "$b"/examples/demo > "$out/demo.log" 2>&1 || status=1
  cat "$out/demo.log"
fi
if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = sanitizer ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$cs" ] || [ ! -x "$b/tests/rap_cuda_tests" ]; then
    echo "no compute-sanitizer or no $b/tests/rap_cuda_tests here: the sanitizer runs did not happen"
    [ "$what" = sanitizer ] && status=1
  else
    : > "$out/sanitizer.txt"
    suffix=
    shard_env=()
    if [ -n "$shard" ]; then
      suffix="-${shard%/*}of${shard#*/}"
      shard_env=(GTEST_SHARD_INDEX="${shard%/*}" GTEST_TOTAL_SHARDS="${shard#*/}")
    fi
    limit=()
    [ -n "${RAP_SANITIZER_TIMEOUT:-}" ] && limit=(timeout "$RAP_SANITIZER_TIMEOUT")
    for name in $tools; do
      flags=(--tool "$name")
      [ "$name" = memcheck ] && flags+=(--leak-check full)
      log="$out/sanitizer-$name$suffix.log"
      # Only the CUDA tests run (the host tests make no CUDA calls). API errors are not reported:
      # one test makes cudaMalloc run out of memory on purpose (its status is what it checks).
      start=$(date +%s)
      env RAP_TEST_SMALL=1 "${shard_env[@]}" "${limit[@]}" "$cs" "${flags[@]}" --report-api-errors no \
        --error-exitcode 3 "$b/tests/rap_cuda_tests" --gtest_color=no > "$log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      took=$(( $(date +%s) - start ))
      { echo "$name$suffix ($took s$([ $rc -eq 124 ] && [ ${#limit[@]} -gt 0 ] && echo ", stopped by RAP_SANITIZER_TIMEOUT")): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$log" | tr '\n' ' ')";
        grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | head -3; } >> "$out/sanitizer.txt"
    done
    cat "$out/sanitizer.txt"
  fi
fi
if [ "$what" = tests ] || [ "$what" = sanitizer ]; then exit $status; fi
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
