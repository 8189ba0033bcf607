#!/usr/bin/env bash
# run_tests.sh — rap_torch on a GPU machine, over a build made by `make device-build`.
# Each test runs in its own process (PyTorch's allocator cannot be swapped after its first use):
# probe, training with the native allocator, the same training on rap, two streams with
# record_stream and early frees (+ threads), CUDA graph capture and replay (graph pools through
# PyTorch's hooks, then through capture detection), out of memory (default and RAP_TORCH_OOM=null),
# and the training on a QuickPool as a diagnostic. Writes to $OUT (default ./out): torch_summary.txt, torch_results.json
# (every test's numbers) and torch_log.txt (every process's output). Exit status 1 on a failure.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/out}
build=${RAP_BUILD_DIR:-$root/device-build}
py=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-torch.XXXXXX")
export RAP_TORCH_LIB=${RAP_TORCH_LIB:-$build/integrations/torch/librap_torch.so}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
log=$out/torch_log.txt
: >"$log"
if [ ! -f "$RAP_TORCH_LIB" ]; then
  echo "run_tests.sh: $RAP_TORCH_LIB is missing: run make device-build first" | tee -a "$log"
  exit 1
fi

run() {
  local t0=$SECONDS
  echo "=== test_torch.py $* ${RAP_TORCH_OOM:+RAP_TORCH_OOM=$RAP_TORCH_OOM }${RAP_TORCH_POOL_HOOKS:+RAP_TORCH_POOL_HOOKS=$RAP_TORCH_POOL_HOOKS }${RAP_TORCH_SPEC:+RAP_TORCH_SPEC=$RAP_TORCH_SPEC}" >>"$log"
  timeout "${RAP_TEST_TIMEOUT:-150}" "$py" "$here/test_torch.py" "$@" --out "$work" >>"$log" 2>&1
  echo "=== exit $? after $((SECONDS - t0)) s" >>"$log"
}

run probe
run train --allocator native
run train --allocator rap
run streams
run graph --tag hooks
RAP_TORCH_POOL_HOOKS=0 run graph --tag detect
run oom
RAP_TORCH_OOM=null run oom
# Diagnostic: the same training on a QuickPool (no pending state), to see what pending costs.
RAP_TORCH_SPEC="QuickPool(DEVICE::{device}, initial_size=64MiB, next_size=32MiB, heuristic=never)" \
  run train --allocator rap --tag quickpool

"$py" "$here/test_torch.py" summarize --out "$work" >"$out/torch_summary.txt" 2>>"$log"
status=$?
cat "$out/torch_summary.txt"
"$py" - "$work" "$out/torch_results.json" <<'PY'
import glob, json, os, sys
merged = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    with open(p) as f:
        merged[os.path.basename(p)[:-5]] = json.load(f)
with open(sys.argv[2], "w") as f:
    json.dump(merged, f, indent=1)
PY
rm -rf "$work"
exit $status
