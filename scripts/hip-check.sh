#!/usr/bin/env bash
# hip-check.sh — the HIP build, proven where there is no AMD GPU (make hip-check; CI runs it).
# Installs Debian's HIP 5.2 (hipcc, libamdhip64-dev), builds the library, the tests (their kernels by
# hipcc for AMD targets) and the examples with RAP_WITH_HIP=ON on the AMD platform against the real
# ROCm runtime, runs the whole suite there (the HIP tests skip, saying why, where no AMD GPU is
# usable), and builds consumers of the installed package that include rap/hip.h.
#   bash scripts/hip-check.sh        (JOBS=N to bound the build)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
build=build-hip

RAP_DEPS_HIP=1 bash scripts/install-deps.sh
cmake --preset hip >/dev/null
cmake --build --preset hip -j "$jobs"
(cd "$build" && ctest --output-on-failure -j "$jobs")
bash scripts/install-check.sh "$build"

log=$build/Testing/Temporary/LastTest.log
ok=$(grep -cE '^\[       OK \] [A-Za-z0-9_/.]+ \(' "$log" || true)
gpu=$(grep -cE '^\[       OK \] Hip[A-Za-z0-9_]*\.[A-Za-z0-9_/]+ \(' "$log" || true)
skipped=$(grep -cE '^\[  SKIPPED \] Hip[A-Za-z0-9_]*\.[A-Za-z0-9_/]+ \(' "$log" || true)
why=$(grep -m1 -E '^no HIP device: ' "$log" | sed 's/^no HIP device: //' || true)
version=$(dpkg-query -W -f='${Version}' libamdhip64-dev 2>/dev/null || echo "?")
echo "hip-check: HIP $version on the AMD platform; $ok GoogleTest cases passed, $gpu of them HIP" \
  "cases${why:+; $skipped HIP cases skipped: $why}"
