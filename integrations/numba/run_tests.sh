#!/usr/bin/env bash
# run_tests.sh — rap.numba (Numba's EMM plugin over rap) on a GPU machine, over a build made by
# `make device-build`. Each form finishes in under 3 minutes on one GPU.
#
#   bash integrations/numba/run_tests.sh          # our tests: test_numba.py under pytest with
#                                                 # NUMBA_CUDA_MEMORY_MANAGER=rap.numba, once with the
#                                                 # default spec and once over DeviceVmm(export=posix)
#                                                 # for IPC with a spawned child
#   bash integrations/numba/run_tests.sh suite    # numba-cuda's own memory-related tests, natively
#                                                 # and over rap, side by side: passed, failed, and
#                                                 # failed under rap only (listed)
#
# Writes $OUT/numba_log.txt (and numba_suite_{native,rap}.txt, numba_suite_summary.txt); exit
# status 1 when a test of ours fails, or (suite) when a test fails under rap only.
# Environment: RAP_BUILD (default device-build), OUT, PYTHON; RAP_NUMBA_SUITE (module names under
# numba.cuda.tests, replacing the list below); RAP_NUMBA_SUITE_TIMEOUT (seconds a run may take,
# default 150; the two runs go side by side); RAP_NUMBA_SUITE_SPEC (the rap run's RAP_NUMBA_SPEC).
need=numba
# shellcheck source-path=SCRIPTDIR source=../common/rap_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/rap_python.sh"
here=$root/integrations/numba
log=$out/numba_log.txt
exporting="ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)"

if [ "${1:-}" != suite ]; then
  : >"$log"
  status=0
  for spec in "" "$exporting"; do
    echo "=== test_numba.py RAP_NUMBA_SPEC=${spec:-<default>}" | tee -a "$log"
    RAP_NUMBA_SPEC=$spec NUMBA_CUDA_MEMORY_MANAGER=rap.numba timeout 85 \
      "$py" -m pytest -q -rfEsxX -p no:cacheprovider "$here/test_numba.py" 2>&1 | tee -a "$log" | tail -15
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
  echo "numba: $([ $status = 0 ] && echo PASS || echo FAIL) (log: $log)"
  exit $status
fi

# ---- numba-cuda's own tests, natively and over rap ----------------------------------------------
modules=${RAP_NUMBA_SUITE:-"cudadrv.test_cuda_memory cudadrv.test_deallocations cudadrv.test_emm_plugins
  cudadrv.test_host_alloc cudadrv.test_managed_alloc cudadrv.test_pinned cudadrv.test_cuda_ndarray
  cudadrv.test_array_attr cudadrv.test_cuda_array_slicing cudadrv.test_streams cudadrv.test_events
  cudadrv.test_reset_device cudapy.test_array cudapy.test_array_methods cudapy.test_cuda_array_interface
  cudapy.test_ipc cudapy.test_slicing cudapy.test_transpose cudapy.test_stream_api cudapy.test_multithreads
  cudapy.test_retrieve_autoconverted_arrays cudapy.test_device_array_capture cudapy.test_laplace
  cudapy.test_reduction cudapy.test_serialize cudapy.test_sync"}
found=()
for m in $modules; do
  if "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('numba.cuda.tests.$m') is None)" 2>/dev/null; then
    found+=("numba.cuda.tests.$m")
  else
    echo "suite: numba.cuda.tests.$m is not in this numba-cuda; left out"
  fi
done
[ ${#found[@]} -gt 0 ] || { echo "suite: none of the modules is here (is numba-cuda installed?)"; exit 1; }
# pytest with xdist (numba-cuda's own way), else pytest alone, else Numba's runner.
if "$py" -c "import pytest, xdist" 2>/dev/null; then
  runner=("$py" -m pytest -v -p no:cacheprovider -o addopts= -n 6 --dist loadscope --pyargs "${found[@]}")
elif "$py" -c "import pytest" 2>/dev/null; then
  runner=("$py" -m pytest -v -p no:cacheprovider -o addopts= --pyargs "${found[@]}")
else
  runner=("$py" -m numba.runtests -v -m 6 "${found[@]}")
fi
echo "suite: ${#found[@]} modules, ${runner[*]:0:6} ..." | tee "$log"
limit=${RAP_NUMBA_SUITE_TIMEOUT:-150}
(env -u NUMBA_CUDA_MEMORY_MANAGER timeout "$limit" "${runner[@]}" >"$out/numba_suite_native.txt" 2>&1) &
native=$!
(RAP_NUMBA_SPEC=${RAP_NUMBA_SUITE_SPEC:-} NUMBA_CUDA_MEMORY_MANAGER=rap.numba timeout "$limit" \
  "${runner[@]}" >"$out/numba_suite_rap.txt" 2>&1) &
over_rap=$!
wait $native; rc_native=$?
wait $over_rap; rc_rap=$?
"$py" "$here/suite_compare.py" "$out/numba_suite_native.txt" "$rc_native" "$out/numba_suite_rap.txt" "$rc_rap" \
  | tee "$out/numba_suite_summary.txt" | tee -a "$log"
exit "${PIPESTATUS[0]}"
