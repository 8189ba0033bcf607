#!/usr/bin/env bash
# fetch-peers.sh — places the sources of rap-bench's optional peers under third_party/src/ (ignored
# by git), where bench/CMakeLists.txt looks for them; a build without them leaves those peers out
# and rap-bench says so. Nothing here is part of rap or of its tests.
#   bash scripts/fetch-peers.sh            all of them
#   bash scripts/fetch-peers.sh mimalloc   only the named ones (rmm needs rapids-logger, spdlog, cccl)
# Each source is one upstream commit, read from a local git mirror when there is one
# ($RAP_PEERS_MIRROR/<owner>+<name>/repo, a bare git directory; default /work/.mirror), else cloned
# from GitHub. What was taken is written to third_party/src/SOURCES.txt.
#
#   name          repository                  commit (tag)                               what is used
#   rmm           github.com/rapidsai/rmm          8718418 (v26.06.00)   cpp/include, cpp/src: librmm's sources; its tests
#                                                                       of device_buffer, device_uvector, device_scalar (bench/rmm_tests)
#   rapids-logger github.com/rapidsai/rapids-logger 4c72b59 (v0.2.3)     RMM 26.06's logger (as rapids-cmake 26.06 pins it)
#   spdlog        github.com/gabime/spdlog         6230201 (1.13.0+)    headers only, bundled fmt: what rapids-logger wraps
#   cccl          github.com/NVIDIA/cccl           207502e (3.4.0, v3.4.0-rc0) the headers RMM 26.06 needs (it refuses CCCL < 3.3;
#                                                                       CUDA 13.0 ships 3.0.1), as rapids-cmake 26.06 pins them
#   mimalloc      github.com/microsoft/mimalloc    30ac9d5 (v2.4.1)     the whole source, built with its own CMake
#   umpire        github.com/LLNL/Umpire           5bf5bc1 (after v2024.07.0) with its submodules at the commits it
#                 pins (LLNL/blt 9ff7734, LLNL/camp 0f07de4, fmtlib/fmt e69e5f9) and scripts/patches/umpire-cuda13.patch
#                 (cudaMemAdvise and cudaMemPrefetchAsync take a cudaMemLocation since CUDA 13); built by
#                 scripts/build-umpire.sh, which make device-build calls where the source is
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/src
mirror=${RAP_PEERS_MIRROR:-/work/.mirror}

# name (the folder under third_party/src), owner/repo, full commit, paths inside the repository
# (. for all); a submodule's folder follows the repository that holds it.
sources=(
  "rmm rapidsai/rmm 871841839b94c67a61c8ed0d31feecfd92a07156 cpp/include cpp/src cpp/tests/device_buffer_tests.cu cpp/tests/device_uvector_tests.cpp cpp/tests/device_scalar_tests.cpp LICENSE VERSION"
  "rapids-logger rapidsai/rapids-logger 4c72b598f99c8aa06af49468b3fc82f3931c6bf6 include src cmake LICENSE"
  "spdlog gabime/spdlog 62302019babd8fdf63c1c6dc4c9faa48d441a7f0 include LICENSE"
  "cccl NVIDIA/cccl 207502e57019cefacf6f21d3bb6045aeebef2a3e libcudacxx/include cub/cub thrust/thrust LICENSE"
  "mimalloc microsoft/mimalloc 30ac9d56b8b9ea57ae84bc8ef17ef39000da08fe CMakeLists.txt LICENSE cmake include src mimalloc.pc.in"
  "umpire LLNL/Umpire 5bf5bc182f1e6ee3f6be1d953b68451d3ddc35f5 ."
  "umpire/blt LLNL/blt 9ff77344f0b2a6ee345e452bddd6bfd46cbbfa35 ."
  "umpire/src/tpl/umpire/camp LLNL/camp 0f07de4240c42e0b38a8d872a20440cb4b33d9f5 ."
  "umpire/src/tpl/umpire/fmt fmtlib/fmt e69e5f977d458f2650bb346dadf2ad30c5320281 ."
)

# A name is wanted when asked for, or when it lies in a wanted folder (umpire brings its submodules).
wanted() { local n=$1; shift; for w in "$@"; do [ "$w" = "$n" ] || [ "$w" = "${n%%/*}" ] && return 0; done; return 1; }
want=("$@")
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for line in "${sources[@]}"; do
  read -r name repo commit paths <<< "$line"
  [ ${#want[@]} -eq 0 ] || wanted "$name" "${want[@]}" || continue
  git_dir="$mirror/${repo/\//+}/repo"
  if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
    git_dir="$tmp/$name.git"
    echo "fetch-peers: $name: no local mirror with $commit; cloning https://github.com/$repo"
    if ! git clone -q --bare --filter=blob:none "https://github.com/$repo" "$git_dir" 2>"$tmp/err" ||
       ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
      echo "fetch-peers: $name: cannot get $repo at $commit: $(head -1 "$tmp/err")"
      status=1
      continue
    fi
  fi
  rm -rf "${dest:?}/$name"
  mkdir -p "$dest/$name"
  # shellcheck disable=SC2086  # the paths are words
  git --git-dir="$git_dir" archive "$commit" $paths | tar -x -C "$dest/$name"
  echo "$name github.com/$repo $commit $(git --git-dir="$git_dir" describe --tags "$commit" 2>/dev/null || echo -)" > "$dest/$name/.source"
  echo "fetch-peers: $name at $commit: $(du -sh "$dest/$name" | cut -f1)"
  if [ "$name" = umpire/src/tpl/umpire/fmt ]; then   # the last of Umpire's parts
    patch -s -d "$dest/umpire" -p1 < scripts/patches/umpire-cuda13.patch && echo "fetch-peers: umpire patched (scripts/patches/umpire-cuda13.patch)"
  fi
done
find "$dest" -name .source -exec cat {} + > "$dest/SOURCES.txt" 2>/dev/null || true
exit $status
