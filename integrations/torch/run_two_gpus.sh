#!/usr/bin/env bash
# run_two_gpus.sh — torch.multiprocessing and NCCL on one rap pool, on two GPUs, over a carried
# device-build/ (make device-build):
#   bash integrations/torch/run_two_gpus.sh            (OUT=dir for the results; default <repo>/out)
# Runs test_torch_capabilities.py share_allreduce twice, each launching torchrun on two GPUs (one
# rank each) itself: with rap enabled on the spec enable() gives (the default, or RAP_TORCH_SPEC),
# a tensor of rap's pool sent to a spawned process that reads, writes and holds it while NCCL
# all-reduces run on the same pool; then (--tag registered) PyTorch's allocator with a MemPool over
# rap.torch.allocator() registered with NCCL. Prints the summary lines and RESULT; exit status 1 on
# a failure. With fewer than two GPUs both are skipped (RESULT: PASS, the lines say skipped).
# Writes $OUT/two_gpus_summary.txt, two_gpus_results.json and two_gpus_log.txt. RAP_TEST_TIMEOUT
# (default 300) bounds each launch, in seconds.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/integrations/torch
out=${OUT:-$root/out}
mkdir -p "$out"
build=${RAP_BUILD_DIR:-$root/device-build}
export RAP_TORCH_LIB=${RAP_TORCH_LIB:-$build/integrations/torch/librap_torch.so}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
py=${PYTHON:-python3}
limit=${RAP_TEST_TIMEOUT:-300}
log=$out/two_gpus_log.txt
: >"$log"
if [ ! -f "$RAP_TORCH_LIB" ]; then
  echo "run_two_gpus.sh: $RAP_TORCH_LIB is missing: run make device-build first" | tee -a "$log"
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-two-gpus.XXXXXX")
for tag in "" registered; do
  t0=$SECONDS
  {
    echo "=== share_allreduce ${tag:+--tag $tag} ${RAP_TORCH_SPEC:+RAP_TORCH_SPEC=$RAP_TORCH_SPEC}"
    # The command ends its own launch at the limit; the outer timeout is a backstop.
    timeout $((limit + 60)) "$py" "$here/test_torch_capabilities.py" share_allreduce ${tag:+--tag "$tag"} \
      --timeout "$limit" --out "$work" 2>&1
    echo "=== exit $? after $((SECONDS - t0)) s"
  } >>"$log"
done
"$py" "$here/test_torch_capabilities.py" summarize_two_gpus --out "$work" >"$out/two_gpus_summary.txt" 2>>"$log"
rc=$?
cat "$out/two_gpus_summary.txt"
"$py" "$root/integrations/common/merge_results.py" "$work" "$out/two_gpus_results.json"
cat "$work"/nccl-cap.*.log >>"$log" 2>/dev/null
rm -rf "$work"
exit "$rc"
