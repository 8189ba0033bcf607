#!/usr/bin/env bash
# test-summary.sh — after `make test`'s ctest run: one line whose parts add up to ctest's count
# (GoogleTest cases passed, GPU cases skipped and why, the other entries: Python, examples,
# tools, install checks), and the failures if any.
#   bash scripts/test-summary.sh [build-dir]    (default: build)
set -uo pipefail
log=${1:-build}/Testing/Temporary/LastTest.log
[ -f "$log" ] || exit 0
total=$(grep -cE '^[0-9]+/[0-9]+ Test: ' "$log")
passed=$(grep -cE '^Test Passed\.' "$log")
skips=$(grep -cE '^Skip regular expression found' "$log")   # ctest's own word for a skip
failed=$((total - passed - skips))
ok=$(grep -cE '^\[       OK \] [A-Za-z0-9_/.]+ \(' "$log")
skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z0-9_/.]+ \(' "$log")
gpu=$(grep -cE '^\[       OK \] (Cuda|Hip)[A-Za-z0-9_]*\.' "$log")
other=$((total - failed - ok - skipped))
why=$(grep -m1 -E '^no CUDA device: ' "$log" | sed 's/^no CUDA device: //')
line="make test: $total ctest entries = $ok GoogleTest cases passed"
[ "$gpu" -gt 0 ] && [ "$skipped" -eq 0 ] && line="$line ($gpu on the GPU)"
if [ "$skipped" -gt 0 ]; then
  line="$line + $skipped GPU cases skipped"
  [ -n "$why" ] && line="$line ($why)"
fi
line="$line + $other other checks passed (Python, examples, tools)"
[ "$failed" -gt 0 ] && line="$line + $failed failed"
echo "$line"
