# rap_python.sh — sourced by integrations/numba/run_tests.sh and integrations/cuda_core/run_tests.sh:
# the Python package rap of a build made by `make device-build` on PYTHONPATH, and $out, $py, $root.
#
# The build is ${RAP_BUILD:-${RAP_BUILD_DIR:-device-build}} (relative to the repository root, or
# absolute). Its assembled package (<build>/python/rap) is used when it has the modules these tests
# need ($need), else the source tree's python/rap with RAP_LIB=<build>/librap.so, so that a build
# made before those modules existed still serves. Exits 1 when the build has no librap.so.
# Environment: OUT (default <repo>/out), PYTHON (default python3).
# shellcheck shell=bash
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${RAP_BUILD:-${RAP_BUILD_DIR:-device-build}}
[[ $build = /* ]] || build=$root/$build
py=${PYTHON:-python3}
out=${OUT:-$root/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -f "$build/python/rap/${need:-__init__}.py" ] && [ -f "$build/python/rap/librap.so" ]; then
  export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
  unset RAP_LIB
elif [ -f "$build/librap.so" ]; then
  export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
  export RAP_LIB=$build/librap.so
else
  echo "rap_python.sh: no librap.so in $build: run make device-build first (or set RAP_BUILD)" >&2
  exit 1
fi
echo "rap_python.sh: rap from $("$py" -c 'import rap, os; print(os.path.dirname(rap.__file__), rap.library_path())' 2>&1)"
