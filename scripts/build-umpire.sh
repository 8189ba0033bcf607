#!/usr/bin/env bash
# build-umpire.sh — builds LLNL Umpire for rap-bench's Umpire peers, from the source that
# scripts/fetch-peers.sh placed in third_party/src/umpire (with its BLT, camp and fmt at the commits
# Umpire pins, and scripts/patches/umpire-cuda13.patch), with Umpire's own CMake: CUDA on (sm_90),
# static libraries, no tests, examples, tools, docs or C and Fortran interfaces. Installed into
# third_party/umpire-install, where bench/CMakeLists.txt finds it (find_package(umpire)).
# make device-build calls it; without the source it says so and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
src=third_party/src/umpire
build=third_party/umpire-build
inst=$PWD/third_party/umpire-install
if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "build-umpire: no $src (bash scripts/fetch-peers.sh umpire): rap-bench leaves Umpire's peers out"
  exit 0
fi
if [ -f "$inst/.built-from" ] && [ "$(cat "$inst/.built-from")" = "$(cat "$src/.source")" ]; then
  echo "build-umpire: $inst is up to date"
  exit 0
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
cmake -G Ninja -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$inst" \
  -DENABLE_CUDA=ON -DUMPIRE_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DENABLE_TESTS=OFF -DUMPIRE_ENABLE_TESTS=OFF -DENABLE_EXAMPLES=OFF -DUMPIRE_ENABLE_EXAMPLES=OFF \
  -DUMPIRE_ENABLE_TOOLS=OFF -DENABLE_DOCS=OFF -DENABLE_BENCHMARKS=OFF -DENABLE_GTEST=OFF \
  -DENABLE_GMOCK=OFF -DUMPIRE_ENABLE_C=OFF -DENABLE_FORTRAN=OFF > "$build.log" 2>&1 ||
  { echo "build-umpire: configure failed:"; tail -20 "$build.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-2}" --target install >> "$build.log" 2>&1 ||
  { echo "build-umpire: build failed:"; grep -m 20 -E "error" "$build.log" || tail -20 "$build.log"; exit 1; }
cp "$src/.source" "$inst/.built-from"
echo "build-umpire: Umpire installed in $inst"
