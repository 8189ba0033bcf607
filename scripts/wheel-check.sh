#!/usr/bin/env bash
# wheel-check.sh — the wheel as a user gets it: built from an assembled package
# (<build>/python/rap) by python/build_wheel.py, installed with pip into a fresh virtual
# environment offline (--no-index), then imported from there: rap.version(), rap.check_spec on a
# good and a bad spec, rap.library_path() inside the environment, and rap.torch, rap.cupy,
# rap.numba and rap.cuda_core present (not imported: no framework need be here); and the console script rap-trace the wheel
# installs answers --help and --version from the environment's bin/, and reads a trace there.
# ctest runs it (Python.WheelInstallsAndImports).
#   bash scripts/wheel-check.sh <build>/python/rap [PYTHON]
set -euo pipefail
pkg=${1:?usage: wheel-check.sh <build>/python/rap [python]}
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

whl=$("$py" "$root/python/build_wheel.py" "$pkg" "$work/dist")
if ! "$py" -m venv "$work/venv" >"$work/venv.log" 2>&1; then
  cat "$work/venv.log"
  echo "wheel-check: '$py -m venv' failed: install python3-venv (scripts/install-deps.sh does)"
  exit 1
fi
"$work/venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check -q "$whl"
cd "$work"   # nothing of the source tree on the path
env -u PYTHONPATH -u RAP_LIB "$work/venv/bin/python" - "$work/venv" <<'PY'
import os, sys
import rap
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(rap.__file__)
assert where.startswith(venv + os.sep), "rap imported from %s, not the venv" % where
assert os.path.realpath(rap.library_path()).startswith(venv + os.sep), rap.library_path()
v = rap.version()
assert v == rap.__version__ and v.count(".") == 2, v
assert rap.check_spec("ThreadSafe(ResourceAwarePool(SizeLimiter(DEVICE, limit=50%), initial_size=1GiB))")
try:
    rap.check_spec("QuickPool(HOST")
    raise AssertionError("a bad spec passed")
except ValueError as e:
    assert "column 15" in str(e), e
pkg = os.path.dirname(where)
for m in ("torch.py", "cupy.py", "rap_loader.py", "rap_memviz.py", "numba.py", "cuda_core.py",
          "errors.py", "_allocator.py", "_buffer.py", "_dlpack.py", "_driver.py", "_process.py"):
    assert os.path.exists(os.path.join(pkg, m)), m
libs = sorted(f for f in os.listdir(pkg) if f.endswith(".so"))
print("wheel-check: rap %s from %s (%s) imports and checks specs" % (v, pkg, ", ".join(libs)))
PY
# rap-trace: a console script in the venv's bin/, running the program the package carries.
tool=$work/venv/bin/rap-trace
[ -x "$tool" ] || { echo "wheel-check: the wheel installed no console script rap-trace"; exit 1; }
v=$(env -u PYTHONPATH -u RAP_LIB "$work/venv/bin/python" -c 'import rap; print(rap.version())')
out=$(env -u PYTHONPATH -u RAP_LIB PATH="$work/venv/bin:$PATH" rap-trace --version)
[ "$out" = "rap-trace $v" ] || { echo "wheel-check: rap-trace --version said '$out', not 'rap-trace $v'"; exit 1; }
out=$(env -u PYTHONPATH -u RAP_LIB "$tool" --help)
case $out in *"usage: rap-trace summary TRACE"*"rap-trace --help | --version"*) ;;
  *) echo "wheel-check: rap-trace --help said: $out"; exit 1 ;; esac
if env -u PYTHONPATH -u RAP_LIB "$tool" nonsense x >"$work/bad.out" 2>&1; then
  echo "wheel-check: rap-trace answered 0 to an unknown command"; exit 1
fi
grep -q "unknown command 'nonsense'" "$work/bad.out" || { cat "$work/bad.out"; exit 1; }
# A trace written from the installed package's library, summarized by the installed tool.
env -u PYTHONPATH -u RAP_LIB RAP_TRACE="$work/t.jsonl" "$work/venv/bin/python" -c '
import rap
a = rap.Allocator("QuickPool(HOST)")
a.free(a.allocate(4096))
a.close()'
out=$(env -u PYTHONPATH -u RAP_LIB "$tool" summary "$work/t.jsonl")
case $out in *"peak"*) ;; *) echo "wheel-check: rap-trace summary said: $out"; exit 1 ;; esac
echo "wheel-check: the console script rap-trace ($v) answers --help, --version and summary"
echo "wheel-check: $(basename "$whl") installed offline into a fresh venv"
