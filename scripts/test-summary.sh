#!/usr/bin/env bash
# test-summary.sh — after `make test`'s ctest run: one line on what ran, and, where the GPU tests
# skipped, one line saying why (the first skip message the CUDA tests printed).
#   bash scripts/test-summary.sh [build-dir]    (default: build)
set -uo pipefail
log=${1:-build}/Testing/Temporary/LastTest.log
[ -f "$log" ] || exit 0
ok=$(grep -cE '^\[       OK \] [A-Za-z0-9_/.]+ \(' "$log")
skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z0-9_/.]+ \(' "$log")
gpu=$(grep -cE '^\[       OK \] Cuda[A-Za-z0-9_]*\.' "$log")
why=$(grep -m1 -E '^no CUDA device: ' "$log" | sed 's/^no CUDA device: //')
if [ -n "$why" ]; then
  echo "make test: $ok GoogleTest cases passed, on the CPU; $skipped GPU cases skipped: $why"
else
  echo "make test: $ok GoogleTest cases passed, $gpu of them on the GPU$( [ "$skipped" -gt 0 ] && echo "; $skipped skipped")"
fi
