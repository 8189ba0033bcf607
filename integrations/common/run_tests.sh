# run_tests.sh — what integrations/torch/run_tests.sh and integrations/cupy/run_tests.sh share,
# sourced by them with the integration's name (torch or cupy) as its one argument:
#
#   show_env="RAP_TORCH_OOM ..."   # variables named on each test's line in the log when set
#   source "$(dirname "${BASH_SOURCE[0]}")/../common/run_tests.sh" torch
#   run probe                      # test_torch.py probe --out <work>, in its own process
#   RAP_TORCH_OOM=null run oom     # the same with a variable set for that test only
#   finish                         # summary, merged results, exit status
#
# Over a build made by `make device-build`. Each test runs in its own process with a time limit
# (RAP_TEST_TIMEOUT seconds, default 150). Writes <name>_summary.txt, <name>_results.json (every
# test's numbers) and <name>_log.txt (every process's output) to $OUT (default <repo>/out).
# Environment: OUT, RAP_BUILD_DIR (default <repo>/device-build), PYTHON (default python3), TMPDIR,
# RAP_<NAME>_LIB (default <build>/integrations/<name>/librap_<name>.so), PYTHONPATH (the
# integration's folder goes first). Exits 1 at once when the library is missing.
# RAP_TEST_ONLY="stats handoff": run only these commands (the summary then reports the others
# missing). RAP_TEST_FROM_WHEEL=1: the tests import rap.<name> from the installed package of PYTHON's
# environment instead (scripts/device-wheel.sh); RAP_<NAME>_LIB and PYTHONPATH are unset.
# shellcheck shell=bash
set -uo pipefail
name=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../$name" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/out}
build=${RAP_BUILD_DIR:-$root/device-build}
py=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/rap-$name.XXXXXX")
lib_var=RAP_${name^^}_LIB
export PYTHONUNBUFFERED=1
log=$out/${name}_log.txt
: >"$log"
if [ "${RAP_TEST_FROM_WHEEL:-0}" = 1 ]; then
  # The tests import the installed package's rap.<name> (PYTHON is that environment's python):
  # nothing from a build or from PYTHONPATH.
  unset "$lib_var" PYTHONPATH
  if ! "$py" -c "import rap, sys; sys.exit(not rap.library_path('$name'))" >>"$log" 2>&1; then
    echo "run_tests.sh: $py has no rap package with librap_$name.so (scripts/device-wheel.sh installs it)" | tee -a "$log"
    rm -rf "$work"
    exit 1
  fi
else
  export "$lib_var=${!lib_var:-$build/integrations/$name/librap_$name.so}"
  export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
  if [ ! -f "${!lib_var}" ]; then
    echo "run_tests.sh: ${!lib_var} is missing: run make device-build first" | tee -a "$log"
    rm -rf "$work"
    exit 1
  fi
fi

# run ARGS...: one test_<name>.py process; its output goes to the log, under a line naming it and
# the variables of show_env that are set.
run() {
  local t0=$SECONDS shown="" v
  if [ -n "${RAP_TEST_ONLY:-}" ] && [[ " $RAP_TEST_ONLY " != *" $1 "* ]]; then return 0; fi
  for v in ${show_env:-}; do
    if [ -n "${!v:-}" ]; then shown="${shown:+$shown }$v=${!v}"; fi
  done
  echo "=== test_$name.py $* $shown" >>"$log"
  timeout "${RAP_TEST_TIMEOUT:-150}" "$py" "$here/test_$name.py" "$@" --out "$work" >>"$log" 2>&1
  echo "=== exit $? after $((SECONDS - t0)) s" >>"$log"
}

# finish: the summary (its exit status is the script's), every test's JSON merged into one file.
finish() {
  "$py" "$here/test_$name.py" summarize --out "$work" >"$out/${name}_summary.txt" 2>>"$log"
  local status=$?
  cat "$out/${name}_summary.txt"
  "$py" "$root/integrations/common/merge_results.py" "$work" "$out/${name}_results.json"
  rm -rf "$work"
  exit $status
}
