#!/usr/bin/env bash
# run_tests.sh — rap.numba (Numba's EMM plugin over rap) on a GPU machine, over a build made by
# `make device-build`; our tests finish in under 3 minutes on one GPU, the suite in under 6.
#
#   bash integrations/numba/run_tests.sh          # our tests: test_numba.py under pytest with
#                                                 # NUMBA_CUDA_MEMORY_MANAGER=rap.numba, once with the
#                                                 # default spec and once over DeviceVmm(export=posix)
#                                                 # for IPC with a spawned child
#   bash integrations/numba/run_tests.sh suite    # numba-cuda's own tests natively and over rap:
#                                                 # scripts/device-numba-suite.sh (its environment)
#
# Writes $OUT/numba_log.txt; exit status 1 when a test of ours fails.
# Environment: RAP_BUILD (default device-build), OUT, PYTHON.
if [ "${1:-}" = suite ]; then
  exec bash "$(dirname "${BASH_SOURCE[0]}")/../../scripts/device-numba-suite.sh"
fi
need=numba
# shellcheck source-path=SCRIPTDIR source=../common/rap_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/rap_python.sh"
here=$root/integrations/numba
log=$out/numba_log.txt
# The default exports (rap.DEFAULT_DEVICE_SPEC); the fallback over DEVICE does not.
fallback="ResourceAwarePool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never)"

: >"$log"
status=0
for spec in "" "$fallback"; do
  echo "=== test_numba.py RAP_NUMBA_SPEC=${spec:-<default>}" | tee -a "$log"
  RAP_NUMBA_SPEC=$spec NUMBA_CUDA_MEMORY_MANAGER=rap.numba timeout 85 \
    "$py" -m pytest -q -rfEsxX -p no:cacheprovider "$here/test_numba.py" 2>&1 | tee -a "$log" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
echo "numba: $([ $status = 0 ] && echo PASS || echo FAIL) (log: $log)"
exit $status
