#!/usr/bin/env bash
# device-cpp-py.sh — rap's C++ and Python CUDA layers on the GPU machine, over a carried
# device-build/ (make device-build): the CUDA cases of rap.hpp (ctest -R CppCuda), the Thrust
# example (examples/rap_thrust.cu) where it was built, and rap.cuda_core and rap.numba under pytest
# (integrations/cuda_core/run_tests.sh, integrations/numba/run_tests.sh, which put
# device-build/python on PYTHONPATH). Each part's log is under $OUT; the terminal gets one line a
# part and the failing cases' names, then "device-cpp-py: PASS" or "FAIL (...)".
#   bash scripts/device-cpp-py.sh                 # every part
#   RAP_PARTS="cpp thrust" bash scripts/device-cpp-py.sh   # some: cpp, thrust, cuda_core, numba
# Exit status 1 when a part fails; a part whose package is missing (cuda.core, numba-cuda) says so
# and counts as failed, since it did not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
b=${RAP_BUILD:-device-build}
parts=${RAP_PARTS:-cpp thrust cuda_core numba}
failed=()

if [ ! -f "$b/CTestTestfile.cmake" ]; then
  echo "device-cpp-py: no $b (make device-build here, then carry it)"
  exit 1
fi

for part in $parts; do
  case "$part" in
    cpp)
      log=$out/cpp_cuda.log
      (cd "$b" && timeout 300 ctest -R '^CppCuda\.' --output-on-failure) >"$log" 2>&1
      st=$?
      skipped=$(grep -c '\*\*\*Skipped' "$log")
      echo "cpp: $(grep -E 'tests passed|No tests were found' "$log" | tail -1), $skipped skipped (log: $log)"
      grep -E '\*\*\*(Failed|Exception|Timeout)|Failed +[0-9.]+ sec' "$log" | sed 's/^/  /' | head -10
      grep -E 'rap::error:|Failure$' -A2 "$log" | grep -v '^--$' | sed 's/^/    /' | head -20
      [ "$st" = 0 ] || failed+=(cpp)
      ;;
    thrust)
      log=$out/rap_thrust.log
      if [ ! -x "$b/examples/rap_thrust" ]; then
        echo "thrust: not built in $b (no Thrust here): skipped"
        continue
      fi
      timeout 120 "$b/examples/rap_thrust" >"$log" 2>&1
      st=$?
      echo "thrust: exit $st: $(tail -1 "$log") (log: $log)"
      [ "$st" = 0 ] || failed+=(thrust)
      ;;
    cuda_core | numba)
      log=$out/${part}_run.log
      OUT=$out RAP_BUILD=$b bash "integrations/$part/run_tests.sh" >"$log" 2>&1
      st=$?
      echo "$part: $(grep -E '^(cuda_core|numba): ' "$log" | tail -1 || true)"
      grep -E '^(FAILED|ERROR) |[0-9]+ (passed|failed)|Fatal Python error|Segmentation fault|File ".*", line|No module named|Error: ' "$log" |
        sed 's/^/  /' | head -12
      [ "$st" = 0 ] || failed+=("$part")
      ;;
    *)
      echo "device-cpp-py: RAP_PARTS names cpp, thrust, cuda_core or numba, not '$part'"
      exit 2
      ;;
  esac
done

if [ ${#failed[@]} = 0 ]; then
  echo "device-cpp-py: PASS ($parts)"
else
  echo "device-cpp-py: FAIL (${failed[*]})"
  exit 1
fi
