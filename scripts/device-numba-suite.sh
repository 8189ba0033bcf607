#!/usr/bin/env bash
# device-numba-suite.sh — numba-cuda's own tests on the GPU machine, natively and over rap.numba
# (NUMBA_CUDA_MEMORY_MANAGER=rap.numba, rap from a carried device-build/): the modules that allocate
# (cudadrv: memory, deallocations, EMM plugins, host/pinned/managed memory, arrays, events, streams,
# reset; cudapy: arrays, slicing, IPC, streams, threads, gufuncs, ...), one run after the other,
# then the check: the rap run's failures must be failures of the native run too (or one of the few
# that differ by design, integrations/numba/suite_compare.py says which and why).
#
#   RAP_NUMBA_PROBE=1 bash scripts/device-numba-suite.sh   # ~30 s: versions, where the tests live,
#                                                          # the shims, the modules, tests collected
#   bash scripts/device-numba-suite.sh                     # both runs: under 6 minutes on an H200
#
# numba-cuda's tests run under pytest, as numba-cuda's CI runs them (its numba.cuda.testing imports
# pytest, and its CUDATestCase asks for a pytest fixture), from the installed package (--pyargs,
# consider_namespace_packages), xdist workers where pytest-xdist is installed. Both runs load the
# same test-only shims (integrations/numba/numba_suite_shims.py: the fixture, a filecheck stand-in
# where filecheck is missing, and numpy.row_stack = numpy.vstack where numpy has none, without which
# numba-cuda 0.21 to 0.30.4 compiles no kernel); they differ only in NUMBA_CUDA_MEMORY_MANAGER.
#
# Writes to $OUT: numba_suite_{native,rap}.log (pytest's output), numba_suite_{native,rap}.txt (one
# "outcome test" a line), numba_suite_summary.txt. Exit status 1 when a test fails under rap only.
# Environment: RAP_BUILD (device-build), OUT, PYTHON; RAP_NUMBA_SUITE (module names under
# numba.cuda.tests, replacing the list below); RAP_NUMBA_SUITE_JOBS (xdist workers, 12);
# RAP_NUMBA_SUITE_TIMEOUT (seconds a run may take, 165); RAP_NUMBA_SUITE_SPEC (the rap run's
# RAP_NUMBA_SPEC; default an exporting DeviceVmm pool, so that the IPC tests share; "default" for
# rap.numba.DEFAULT_SPEC); RAP_NUMBA_ROW_STACK_SHIM (auto: where numpy has no row_stack; 0; 1).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
py=${PYTHON:-python3}
out=${OUT:-$root/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
export PYTHONPATH=$root/integrations/numba${PYTHONPATH:+:$PYTHONPATH}

modules=${RAP_NUMBA_SUITE:-"cudadrv.test_cuda_memory cudadrv.test_deallocations cudadrv.test_emm_plugins
  cudadrv.test_host_alloc cudadrv.test_managed_alloc cudadrv.test_pinned cudadrv.test_cuda_ndarray
  cudadrv.test_array_attr cudadrv.test_cuda_array_slicing cudadrv.test_cuda_devicerecord
  cudadrv.test_streams cudadrv.test_events cudadrv.test_reset_device
  cudapy.test_array cudapy.test_array_args cudapy.test_array_methods cudapy.test_cuda_array_interface
  cudapy.test_device_array_capture cudapy.test_ipc cudapy.test_slicing cudapy.test_transpose
  cudapy.test_stream_api cudapy.test_multithreads cudapy.test_retrieve_autoconverted_arrays
  cudapy.test_forall cudapy.test_gufunc cudapy.test_laplace cudapy.test_reduction cudapy.test_serialize
  cudapy.test_sync"}
jobs=${RAP_NUMBA_SUITE_JOBS:-12}
limit=${RAP_NUMBA_SUITE_TIMEOUT:-165}
exporting="ResourceAwarePool(DeviceVmm(device={device}, export=posix), initial_size=64MiB, next_size=2MiB, heuristic=never)"
spec=${RAP_NUMBA_SUITE_SPEC:-$exporting}
[ "$spec" = default ] && spec=

# ---- what is installed: versions, the tests' place, the modules found, the shims ----------------
"$py" - "$modules" >"$out/numba_suite_probe.txt" 2>&1 <<'EOF'
import importlib.metadata as md, importlib.util as iu, sys
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"
import numpy
print("python %s (%s)" % (sys.version.split()[0], sys.executable))
print("numpy %s; numpy.row_stack: %s" % (numpy.__version__, hasattr(numpy, "row_stack")))
print("numba %s, numba-cuda %s, pytest %s, pytest-xdist %s, pytest-timeout %s, filecheck %s"
      % tuple(version(n) for n in ("numba", "numba-cuda", "pytest", "pytest-xdist", "pytest-timeout",
                                  "filecheck")))
spec = iu.find_spec("numba.cuda.tests")
if spec is None:
    print("tests: numba.cuda.tests is not installed"); sys.exit(1)
where = list(spec.submodule_search_locations)[0]
print("tests: %s" % where)
import os
base = max((p for p in map(os.path.abspath, sys.path) if where.startswith(p + os.sep)), key=len)
print("tests under: %s" % base)
arrayobj = iu.find_spec("numba.cuda.np.arrayobj")
wants = arrayobj is not None and "overload(np.row_stack)" in open(arrayobj.origin).read()
print("numba-cuda registers an overload of np.row_stack: %s" % wants)
print("shim row_stack needed: %d" % (wants and not hasattr(numpy, "row_stack")))
for m in sys.argv[1].split():
    print(("module: numba.cuda.tests.%s" if iu.find_spec("numba.cuda.tests." + m) else
           "missing: numba.cuda.tests.%s (not in this numba-cuda; left out)") % m)
EOF
probe_rc=$?
grep -v -E '^(module|missing|shim row_stack needed|tests under):' "$out/numba_suite_probe.txt"
grep -E '^missing:' "$out/numba_suite_probe.txt"
if [ $probe_rc != 0 ]; then
  echo "device-numba-suite: no numba-cuda tests here (log: $out/numba_suite_probe.txt)"
  exit 1
fi
mapfile -t found < <(sed -n 's/^module: //p' "$out/numba_suite_probe.txt")
base=$(sed -n 's/^tests under: //p' "$out/numba_suite_probe.txt")
case ${RAP_NUMBA_ROW_STACK_SHIM:-auto} in
  auto) RAP_NUMBA_ROW_STACK_SHIM=$(sed -n 's/^shim row_stack needed: //p' "$out/numba_suite_probe.txt") ;;
esac
export RAP_NUMBA_ROW_STACK_SHIM
shims=$("$py" -c 'import numba_suite_shims as s; print("; ".join(s.applied()))')
echo "test-only shims, both runs: $shims"
echo "modules (${#found[@]}): ${found[*]#numba.cuda.tests.}"
[ ${#found[@]} -gt 0 ] || { echo "device-numba-suite: none of the modules is here"; exit 1; }

# pytest as numba-cuda's CI runs it, from an empty folder with this configuration alone; the
# rootdir is the folder the tests are installed under, so that a test's name has its file's path.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[pytest]\nconsider_namespace_packages = true\n' >"$work/pytest.ini"
runner=("$py" -m pytest -v -rfE -p no:cacheprovider -p numba_suite_shims -c "$work/pytest.ini"
        --rootdir "$base" --confcutdir "$(sed -n 's/^tests: //p' "$out/numba_suite_probe.txt")")
"$py" -c 'import xdist' 2>/dev/null && runner+=(-n "$jobs" --dist loadscope)
"$py" -c 'import pytest_timeout' 2>/dev/null && runner+=(--timeout 120)
"$py" -c 'import pytest_benchmark' 2>/dev/null && runner+=(--benchmark-disable)
runner+=(--pyargs "${found[@]}")

if [ "${RAP_NUMBA_PROBE:-0}" = 1 ]; then
  (cd "$work" && timeout 120 "${runner[@]}" --collect-only -q) >"$out/numba_suite_collect.txt" 2>&1
  echo "collected: $(grep -E '[0-9]+ tests? collected|no tests ran|error' "$out/numba_suite_collect.txt" | tail -1)"
  grep -E '^ERROR |Error' "$out/numba_suite_collect.txt" | head -8 | sed 's/^/  /'
  bash -c 'need=numba; source integrations/common/rap_python.sh' 2>&1 | tail -1
  echo "runner: ${runner[*]:0:12} ... (each run bounded at ${limit} s)"
  echo "rap run's RAP_NUMBA_SPEC: ${spec:-<rap.numba.DEFAULT_SPEC>}"
  exit 0
fi

# shellcheck source-path=SCRIPTDIR source=../integrations/common/rap_python.sh
need=numba
source integrations/common/rap_python.sh || exit 1

rc_native=0 rc_rap=0
run() {   # run NAME ENV...: one bounded pytest run; at its limit pytest is interrupted and reports
  local name=$1 start=$SECONDS rc
  shift
  (cd "$work" && env "$@" timeout -s INT -k 20 "$limit" "${runner[@]}") >"$out/numba_suite_$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s (log: $out/numba_suite_$name.log)"
  printf -v "rc_$name" %s "$rc"
}
run native -u NUMBA_CUDA_MEMORY_MANAGER -u RAP_NUMBA_SPEC
run rap NUMBA_CUDA_MEMORY_MANAGER=rap.numba RAP_NUMBA_SPEC="$spec"
echo "numba-cuda $(sed -n 's/^numba \(.*\), numba-cuda \([^,]*\),.*/\2 (numba \1)/p' "$out/numba_suite_probe.txt"); shims: $shims; rap run's spec: ${spec:-default}" |
  tee "$out/numba_suite_summary.txt"
"$py" integrations/numba/suite_compare.py "$out/numba_suite_native.log" "$rc_native" \
  "$out/numba_suite_rap.log" "$rc_rap" "$out" | tee -a "$out/numba_suite_summary.txt"
exit "${PIPESTATUS[0]}"
