#!/usr/bin/env bash
# run_tests.sh — rap_cupy on a GPU machine, over a build made by `make device-build`: the full test
# (stream ownership, two streams with early frees, stats, stream retirement, CUDA graph capture,
# out of memory, timing against CuPy's MemoryPool) with CuPy's C current-stream function, then
# ownership and timing again with the Python fallback. Writes cupy_summary.txt, cupy_results.json
# and cupy_log.txt to $OUT (default ./out). Exit status 1 on a failure.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/out}
build=${RAP_BUILD_DIR:-$root/device-build}
py=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-cupy.XXXXXX")
export RAP_CUPY_LIB=${RAP_CUPY_LIB:-$build/integrations/cupy/librap_cupy.so}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
log=$out/cupy_log.txt
: >"$log"
if [ ! -f "$RAP_CUPY_LIB" ]; then
  echo "run_tests.sh: $RAP_CUPY_LIB is missing: run make device-build first" | tee -a "$log"
  exit 1
fi

run() {
  local t0=$SECONDS
  echo "=== test_cupy.py $* ${RAP_CUPY_STREAM_SOURCE:+(RAP_CUPY_STREAM_SOURCE=$RAP_CUPY_STREAM_SOURCE)}" >>"$log"
  timeout "${RAP_TEST_TIMEOUT:-150}" "$py" "$here/test_cupy.py" "$@" --out "$work" >>"$log" 2>&1
  echo "=== exit $? after $((SECONDS - t0)) s" >>"$log"
}

run full
RAP_CUPY_STREAM_SOURCE=python run quick

"$py" "$here/test_cupy.py" summarize --out "$work" >"$out/cupy_summary.txt" 2>>"$log"
status=$?
cat "$out/cupy_summary.txt"
"$py" - "$work" "$out/cupy_results.json" <<'PY'
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
