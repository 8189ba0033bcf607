#!/usr/bin/env bash
# install-deps.sh — installs what building and testing rap needs on Debian, skipping what is there.
# Needs root (or sudo) only when something is missing. The CUDA toolkit is optional and never
# installed here: it is found at /usr/local/cuda when present. RAP_DEPS_HIP=1 (make hip-check) adds
# Debian's HIP 5.2: hipcc and libamdhip64-dev (about 66 MB to download, 350 MB installed).
set -euo pipefail

# python3 and python3-venv (with pip inside it): the Python package's wheel test (scripts/wheel-check.sh).
packages=(cmake ninja-build gcc g++ make pkg-config libgtest-dev uthash-dev python3 python3-venv)
[ "${RAP_DEPS_CLANG:-0}" = 1 ] && packages+=(clang libclang-rt-14-dev)
[ "${RAP_DEPS_HIP:-0}" = 1 ] && packages+=(hipcc libamdhip64-dev)
# Wanted, not needed: rap-bench's mimalloc and tcmalloc peers (loaded at run time where mimalloc is
# not built from source; make device-build carries the libraries to the GPU machine), and numpy
# for the Python tests' numpy.from_dlpack check (tests/python/test_api.py; skipped without it).
# Where they cannot be installed the build goes on without them.
optional=(libmimalloc-dev libgoogle-perftools-dev python3-numpy)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=() missing_opt=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${optional[@]}"; do installed "$p" || missing_opt+=("$p"); done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_opt[@]} -eq 0 ] && exit 0

# Only optional packages missing: a note, never a failure.
skip_opt() {
  echo "install-deps: not installing ${missing_opt[*]} ($1); rap-bench skips the peers and the Python tests the numpy check they are for" >&2
  exit 0
}
if ! command -v apt-get >/dev/null 2>&1; then
  [ ${#missing[@]} -eq 0 ] && skip_opt "no apt-get here"
  echo "install-deps: missing ${missing[*]} and no apt-get here; install them by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    [ ${#missing[@]} -eq 0 ] && skip_opt "not root, and no sudo"
    echo "install-deps: need root to install ${missing[*]}" >&2
    exit 1
  fi
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}${missing[*]:+ }${missing_opt[*]}"
export DEBIAN_FRONTEND=noninteractive
aptget() { $sudo apt-get -o DPkg::Lock::Timeout=600 "$@"; }
if ! aptget update -qq; then
  [ ${#missing[@]} -eq 0 ] && skip_opt "apt-get update failed"
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  aptget install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#missing_opt[@]} -gt 0 ]; then
  aptget install -y -qq --no-install-recommends "${missing_opt[@]}" >/dev/null || skip_opt "apt-get install failed"
fi
