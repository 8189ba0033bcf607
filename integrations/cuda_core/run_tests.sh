#!/usr/bin/env bash
# run_tests.sh — rap.cuda_core (cuda.core memory resources over rap pools) on a GPU machine, over a
# build made by `make device-build`: test_cuda_core.py under pytest (buffer properties, copies both
# ways, close and collection, a kernel built and launched by cuda.core writing rap's device and
# pinned buffers, a close on a busy stream, rap.Buffer read by CuPy and PyTorch). Under a minute.
#   bash integrations/cuda_core/run_tests.sh
# Writes $OUT/cuda_core_log.txt; exit status 1 on a failure. Environment: RAP_BUILD (default
# device-build), OUT, PYTHON, RAP_CUDA_CORE_SPEC, RAP_CUDA_CORE_PINNED_SPEC.
need=cuda_core
# shellcheck source-path=SCRIPTDIR source=../common/rap_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/rap_python.sh"
log=$out/cuda_core_log.txt
"$py" -c 'import cuda.core' 2>/dev/null || { echo "cuda_core: cuda.core is not installed here" | tee "$log"; exit 1; }
timeout 170 "$py" -m pytest -q -rfEs -p no:cacheprovider "$root/integrations/cuda_core/test_cuda_core.py" 2>&1 | tee "$log" | tail -20
status=${PIPESTATUS[0]}
echo "cuda_core: $([ "$status" = 0 ] && echo PASS || echo FAIL) (log: $log)"
exit "$status"
