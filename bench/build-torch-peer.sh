#!/usr/bin/env bash
# build-torch-peer.sh — builds librap_bench_torch.so, the plugin that adds PyTorch's CUDA caching
# allocator to rap-bench (rap-bench --torch-plugin PATH), from bench/peer_torch.cpp against the
# installed torch's headers and its libc10/libc10_cuda. Run it where torch is (the GPU machine);
# nothing is downloaded. It needs only bench/bench.h, not a rap build.
#   bash bench/build-torch-peer.sh [OUTPUT]        (default: device-build/bench/librap_bench_torch.so)
# Exits non-zero with a line saying why when it cannot build; rap-bench then skips the peer.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-device-build/bench/librap_bench_torch.so}
py=${PYTHON:-python3}
cxx=${CXX:-g++}
cuda=${CUDA_HOME:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tdir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
  { echo "build-torch-peer: '$py' cannot import torch"; exit 1; }
abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo 1)
tver=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
[ -f "$tdir/include/c10/cuda/CUDACachingAllocator.h" ] ||
  { echo "build-torch-peer: torch $tver at $tdir has no c10/cuda headers (not a CUDA build?)"; exit 1; }
[ -f "$tdir/lib/libc10_cuda.so" ] || { echo "build-torch-peer: $tdir/lib/libc10_cuda.so is missing"; exit 1; }

# The shared CUDA runtime that libc10_cuda loads: the plugin's own CUDA calls go to the same one.
cudart=$(ldd "$tdir/lib/libc10_cuda.so" 2>/dev/null | awk '/libcudart\.so/ && $3 ~ /^\// {print $3; exit}')
[ -n "$cudart" ] || cudart=$(ls "$cuda"/lib64/libcudart.so.* 2>/dev/null | head -1)
[ -n "$cudart" ] || { echo "build-torch-peer: no shared libcudart found"; exit 1; }

mkdir -p "$(dirname "$out")"
flags=(-shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="$abi"
       -Ibench -I"$tdir/include" -I"$cuda/include")
libs=(-L"$tdir/lib" -lc10_cuda -lc10 "$cudart" -Wl,-rpath,"$tdir/lib" -Wl,-rpath,"$(dirname "$cudart")")
for std in c++17 c++20; do
  if "$cxx" -std=$std "${flags[@]}" bench/peer_torch.cpp -o "$out" "${libs[@]}" 2> "$tmp/cc.log"; then
    echo "build-torch-peer: built $out (torch $tver, -std=$std, $(basename "$cudart"))"
    exit 0
  fi
done
echo "build-torch-peer: building bench/peer_torch.cpp against torch $tver failed:"
grep -m 20 -E "error|undefined" "$tmp/cc.log" || head -20 "$tmp/cc.log"
exit 1
