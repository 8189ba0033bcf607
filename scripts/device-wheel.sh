#!/usr/bin/env bash
# device-wheel.sh — on the GPU machine: the integrations' tests as a user would run them, from the
# installed wheel. The wheel is made on the build machine (`make device-build && make wheel`, into
# dist/) and carried here with the tree. This script makes a fresh virtual environment that also
# sees the system's site-packages (PyTorch, CuPy, numpy, pytest: nothing is downloaded), installs
# the wheel into it with `pip install --no-index`, checks that `rap` comes from the environment,
# and runs integrations/torch/run_tests.sh and integrations/cupy/run_tests.sh with
# RAP_TEST_FROM_WHEEL=1, so that the tests import rap.torch and rap.cupy from the installed package
# (PYTHONPATH, RAP_TORCH_LIB and RAP_CUPY_LIB unset), then the CuPy tests once more under pytest.
#
#   bash scripts/device-wheel.sh [torch] [cupy] [pytest]    # default: all three
#
# Writes to $OUT/wheel (OUT default <repo>/out): install.txt, torch_* and cupy_* as the source-tree
# runs write them, cupy_pytest.txt. Environment: OUT, PYTHON (default python3), TMPDIR, WHEEL
# (default: the newest dist/rap-*.whl), RAP_TEST_TIMEOUT. Exit status 1 when the install or any
# suite fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-$root/out}/wheel
py=${PYTHON:-python3}
mkdir -p "$out"
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(torch cupy pytest)
for s in "${suites[@]}"; do
  case $s in torch|cupy|pytest) ;; *) echo "device-wheel: no suite '$s' (torch, cupy, pytest)"; exit 2 ;; esac
done
# shellcheck disable=SC2012  # the newest by time; wheel names have no odd characters
whl=${WHEEL:-$(ls -t dist/rap-*.whl 2>/dev/null | head -1)}
if [ -z "$whl" ] || [ ! -f "$whl" ]; then
  echo "device-wheel: no wheel: run 'make device-build && make wheel' on the build machine (dist/rap-*.whl)"
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-wheel.XXXXXX")
venv=$work/venv
trap 'rm -rf "$work"' EXIT
log=$out/install.txt
unset PYTHONPATH RAP_TORCH_LIB RAP_CUPY_LIB RAP_LIB
{
  echo "wheel: $whl"
  # Without ensurepip (no python3-venv) the environment borrows the system's pip, which installs
  # into the environment when run by its python.
  "$py" -m venv --system-site-packages "$venv" || "$py" -m venv --system-site-packages --without-pip "$venv"
} >"$log" 2>&1
vpy=$venv/bin/python
# --system-site-packages shows the base interpreter's packages only; where PYTHON is itself a
# virtual environment's (PyTorch and CuPy installed there), a .pth file shows its packages too.
"$py" -c 'import site; print("\n".join(site.getsitepackages()))' \
  >"$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_rap_test_parent.pth"
if ! "$vpy" -m pip install --no-index --no-deps --disable-pip-version-check "$whl" >>"$log" 2>&1; then
  cat "$log"
  echo "device-wheel: pip install --no-index $whl failed"
  exit 1
fi
(cd "$work" && "$vpy" - "$venv" "${suites[@]}") >>"$log" 2>&1 <<'PY'
import importlib, os, sys
import rap
venv = os.path.realpath(sys.argv[1])
print("rap", rap.version(), "from", rap.__file__)
for name in (None, "torch", "cupy"):
    path = os.path.realpath(rap.library_path(name))
    print("library", name or "core", path)
    assert path.startswith(venv + os.sep), path
assert os.path.realpath(rap.__file__).startswith(venv + os.sep)
for name in sorted({"torch" if s == "torch" else "cupy" for s in sys.argv[2:]}):
    m = importlib.import_module(name)
    print(name, m.__version__, "from", m.__file__)
PY
status=$?
cat "$log"
if [ $status -ne 0 ]; then
  echo "device-wheel: the installed rap package is not usable (above)"
  exit 1
fi

export RAP_TEST_FROM_WHEEL=1 PYTHON=$vpy OUT=$out
failed=()
for s in "${suites[@]}"; do
  case $s in
    torch|cupy) bash "integrations/$s/run_tests.sh" || failed+=("$s") ;;
    pytest)
      # The CuPy checks as pytest collects them (MemoryPool, pinned pool, CUPY_GPU_MEMORY_LIMIT).
      (cd "$work" && timeout "${RAP_TEST_TIMEOUT:-300}" "$vpy" -m pytest -q -p no:cacheprovider \
        "$root/integrations/cupy/test_cupy.py") >"$out/cupy_pytest.txt" 2>&1 || failed+=(pytest)
      tail -3 "$out/cupy_pytest.txt" ;;
  esac
done
echo "device-wheel: ${suites[*]} from $(basename "$whl"): ${failed[*]:+FAILED ${failed[*]}}${failed[*]:-PASS}; results in $out"
[ ${#failed[@]} -eq 0 ]
