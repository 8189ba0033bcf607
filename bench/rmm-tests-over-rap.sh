#!/usr/bin/env bash
# rmm-tests-over-rap.sh — on the GPU machine: RMM 26.06's own tests of device_buffer, device_uvector
# and device_scalar, as RMM ships them (rmm_tests_native) and over rap (rmm_tests_rap: a
# rap::memory_resource as the current device resource, and as a third DeviceBufferTest type);
# bench/rmm_tests says how they are built. Prints, for each binary, how many passed, failed and
# were skipped, and the failing tests' names; for each failure over rap, whether it fails native
# too. A test that crashes its binary is counted as failed ("crashed"), and the binary runs again
# on the tests it had not reached.
#   bash bench/rmm-tests-over-rap.sh       # the build in ${RAP_BUILD:-device-build}
#   RAP_RMM_TESTS_FILTER='DeviceBuffer*'   # a GoogleTest filter for both (default: all)
#   RAP_RMM_TESTS_LOGS=dir                 # where the logs go (default: the build's bench/)
#   RAP_RMM_TESTS_SPEC='...'               # the rap pool rmm_tests_rap uses (rap_main.cpp)
# Exit status 0 when nothing fails over rap that passes native and rmm_tests_rap ends cleanly.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${RAP_BUILD:-device-build}
dir=$build/bench
logs=${RAP_RMM_TESTS_LOGS:-$dir}
filter=${RAP_RMM_TESTS_FILTER:-*}
limit=${RAP_RMM_TESTS_TIMEOUT:-600}   # seconds a run of a binary may take
if [ ! -x "$dir/rmm_tests_native" ] || [ ! -x "$dir/rmm_tests_rap" ]; then
  echo "rmm-tests-over-rap: no $dir/rmm_tests_native or rmm_tests_rap (RMM's sources were not there" \
       "at the build: bash scripts/fetch-peers.sh rmm rapids-logger spdlog cccl)"
  exit 1
fi
mkdir -p "$logs"

# run NAME: runs $dir/NAME until every test has a result, writing $logs/NAME.log (all the runs)
# and $logs/NAME.results (one "status test" line a test: passed, failed, skipped, crashed), and
# $logs/NAME.rest (what a run printed outside its tests, and an exit status they do not explain).
run() {
  local name=$1 log=$logs/$1.log res=$logs/$1.results rest=$logs/$1.rest
  : > "$log"; : > "$res"; : > "$rest"
  local done_list="" pass=1 rc running
  while :; do
    local f=$filter
    if [ -n "$done_list" ]; then
      case $filter in *-*) f="$filter:$done_list" ;; *) f="$filter-$done_list" ;; esac
    fi
    local out=$logs/$name.run$pass.log
    # (In a subshell whose stderr goes to the log: bash reports a killed child there.)
    (timeout "$limit" "$dir/$name" --gtest_filter="$f" --gtest_color=no; exit $?) > "$out" 2>&1
    rc=$?
    cat "$out" >> "$log"
    # The per-test result lines end in "(N ms)"; the summary repeats them without it.
    awk '/^\[       OK \] .* ms\)$/ {print "passed", $4}
         /^\[  FAILED  \] .* ms\)$/ {sub(/,$/, "", $4); print "failed", $4}
         /^\[  SKIPPED \] .* ms\)$/ {print "skipped", $4}' "$out" >> "$res"
    # A test that started and has no result is the one the binary died (or timed out) in.
    running=$(awk '/^\[ RUN      \] / {t=$4} / ms\)$/ && /^\[ *(OK|FAILED|SKIPPED) *\]/ {t=""}
                   END {print t}' "$out")
    if [ -z "$running" ]; then
      # What the environment printed as it went (rap_main.cpp's checks before the first test and
      # after the last), and an exit status that failed tests do not explain.
      local env_text
      env_text=$({ sed -n '/Global test environment set-up/,/^\[/p' "$out" | sed '1d;$d'
                   sed -n '/Global test environment tear-down/,/^\[==========\]/p' "$out" | sed '1d;$d'; })
      if [ -n "$env_text" ] || { [ "$rc" -ne 0 ] && ! { [ "$rc" -eq 1 ] && grep -q '^failed ' "$res"; }; }; then
        { echo "exit status $rc"; if [ -n "$env_text" ]; then echo "$env_text"; else grep -v '^\[  FAILED  \]' "$out" | tail -4; fi; } |
          head -20 >> "$rest"
      fi
      break
    fi
    echo "crashed $running" >> "$res"
    echo "rmm-tests-over-rap: $name died in $running (exit status $rc); running the tests it had not reached"
    done_list=$(awk '{print $2}' "$res" | paste -sd: -)
    pass=$((pass + 1))
    [ "$pass" -gt 50 ] && { echo "more than 50 crashes: stopped" >> "$rest"; break; }
  done
  rm -f "$logs/$name".run*.log
}

# summary NAME: counts and the failing names.
summary() {
  local res=$logs/$1.results
  local p f s c
  p=$(grep -c '^passed ' "$res"); f=$(grep -c '^failed ' "$res")
  s=$(grep -c '^skipped ' "$res"); c=$(grep -c '^crashed ' "$res")
  echo "$1: $((p + f + s + c)) tests: $p passed, $((f + c)) failed ($c of them crashed), $s skipped"
  grep -E '^(failed|crashed) ' "$res" | sed 's/^failed /  failed  /; s/^crashed /  crashed /'
  [ -s "$logs/$1.rest" ] && sed 's/^/  outside its tests: /' "$logs/$1.rest"
  return 0
}

run rmm_tests_native
run rmm_tests_rap
echo
summary rmm_tests_native
summary rmm_tests_rap
echo
# Each failure over rap against native: the same test there, or for rap's own DeviceBufferTest type
# (a name native has not), native's DeviceBufferTest/0 case of the same name (cuda_memory_resource).
status=0
new=0
while read -r what t; do
  n=$t
  if ! grep -q " $t\$" "$logs/rmm_tests_native.results" && [[ $t =~ ^(.*)/[0-9]+\.(.*)$ ]]; then
    n="${BASH_REMATCH[1]}/0.${BASH_REMATCH[2]}"
  fi
  native=$(awk -v t="$n" '$2 == t {print $1}' "$logs/rmm_tests_native.results" | head -1)
  alias=""
  [ "$n" != "$t" ] && alias=" (native: $n)"
  case $native in
    failed|crashed) echo "over rap $what, native $native too: $t$alias" ;;
    *) echo "over rap $what, native ${native:-not run}: $t$alias"; new=$((new + 1)); status=1 ;;
  esac
done < <(grep -E '^(failed|crashed) ' "$logs/rmm_tests_rap.results")
[ -s "$logs/rmm_tests_rap.rest" ] && status=1
# A run over rap that passed nothing (no device, a filter that matches nothing) proves nothing.
if ! grep -qE '^passed ' "$logs/rmm_tests_rap.results" 2>/dev/null; then
  echo "rmm-tests-over-rap: no test passed over rap"
  status=1
fi
echo "rmm-tests-over-rap: $new failure(s) over rap that native has not; logs in $logs"
exit $status
