#!/usr/bin/env bash
# install-check.sh — installs rap into a scratch prefix and builds an outside program against it,
# once through find_package(rap) and once through pkg-config, then runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S tests/consumer -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/consumer"

libdir=$(find "$work/prefix" -name rap.pc -printf '%h\n' | head -1)
PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Werror tests/consumer/main.c \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-consumer"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-consumer"
# The static archive, with the private dependencies pkg-config lists for it.
static_libs=$(PKG_CONFIG_PATH="$libdir" pkg-config --static --libs rap | sed 's/-lrap//')
cc -std=c11 -Wall -Werror tests/consumer/main.c $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags rap) \
  "$(dirname "$libdir")/librap.a" $static_libs -o "$work/pc-consumer-static"
"$work/pc-consumer-static"
echo "install-check: find_package and pkg-config consumers built and ran"
