#!/usr/bin/env bash
# install-check.sh — installs rap into a scratch prefix and builds an outside program against it,
# once through find_package(rap) and once through pkg-config, then runs both (with a CUDA or HIP
# build, also one that includes rap/cuda.h or rap/hip.h); builds and runs README.md's examples with
# the README's own build lines; imports the installed Python package rap from the prefix; and
# checks that the shared library exports nothing but the public API.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S tests/consumer -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/consumer"
if [ -x "$work/cmake/cuda_consumer" ]; then LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/cuda_consumer"; fi
if [ -x "$work/cmake/hip_consumer" ]; then LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/hip_consumer"; fi
hip=$(grep -q '^RAP_WITH_HIP:BOOL=ON' "$build/CMakeCache.txt" && echo 1 || true)
if [ -n "$hip" ] && [ ! -x "$work/cmake/hip_consumer" ]; then
  echo "install-check: a HIP build, but find_package(rap) gave no HIP platform to build hip_consumer"; exit 1
fi

# rap-trace is installed and runs from the prefix.
"$work/prefix/bin/rap-trace" --help | grep -q 'rap-trace replay TRACE --spec SPEC' ||
  { echo "install-check: bin/rap-trace is missing or does not run"; exit 1; }

libdir=$(find "$work/prefix" -name rap.pc -printf '%h\n' | head -1)
PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Werror tests/consumer/main.c \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-consumer"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-consumer"
if [ -x "$work/cmake/cuda_consumer" ]; then   # a CUDA build: rap/cuda.h through pkg-config too
  PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Werror tests/consumer/cuda_consumer.c \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-cuda-consumer"
  LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-cuda-consumer"
fi
# rap.hpp: the C++17 consumer from find_package above and through pkg-config; in a CUDA build also
# with the toolkit's CCCL on the include path (its CCCL part, by the host compiler) and by nvcc (its
# Thrust part too). Each says which parts it compiled; none needs a GPU.
LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/cpp_consumer" >/dev/null
c++ -std=c++17 -Wall -Wextra -Werror tests/consumer/cpp_consumer.cpp \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-cpp-consumer"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-cpp-consumer" >/dev/null
cpp_note=", rap.hpp's C++17 consumers (host part"
if [ -x "$work/cmake/cuda_consumer" ]; then
  cflags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags rap)
  cccl=""
  for f in $cflags; do
    case $f in -I*) [ -f "${f#-I}/cccl/cuda/memory_resource" ] && cccl="${f#-I}/cccl" && break ;; esac
  done
  [ -n "$cccl" ] || { echo "install-check: a CUDA build, but no CCCL under pkg-config's include dirs ($cflags)"; exit 1; }
  c++ -std=c++17 -Wall -Wextra -Werror tests/consumer/cpp_consumer.cpp -I"$cccl" \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-cpp-cccl-consumer"
  out=$(LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-cpp-cccl-consumer")
  grep -q 'CCCL part on' <<<"$out" ||
    { echo "install-check: rap.hpp left its CCCL part out with $cccl on the include path"; exit 1; }
  cccl_version=$(grep -o 'CCCL_VERSION [0-9]*' "$cccl/cuda/std/__cccl/version.h" | cut -d' ' -f2)
  cpp_note="$cpp_note, CCCL $cccl_version part by c++"
  nvcc=$(sed -n 's/^CUDAToolkit_NVCC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  [ -x "$nvcc" ] || { echo "install-check: a CUDA build without nvcc in its cache (CUDAToolkit_NVCC_EXECUTABLE)"; exit 1; }
  "$nvcc" -std=c++17 -Werror all-warnings -x cu tests/consumer/cpp_consumer.cpp \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/nvcc-cpp-consumer"
  out=$(LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/nvcc-cpp-consumer")
  grep -q 'Thrust part on' <<<"$out" ||
    { echo "install-check: rap.hpp under nvcc left its Thrust part out"; exit 1; }
  cpp_note="$cpp_note and nvcc, Thrust part by nvcc"
fi
cpp_note="$cpp_note)"
if [ -n "$hip" ]; then   # a HIP build: rap/hip.h through pkg-config too
  PKG_CONFIG_PATH="$libdir" cc -std=c11 -Wall -Werror tests/consumer/hip_consumer.c \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs rap) -o "$work/pc-hip-consumer"
  LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/pc-hip-consumer"
fi
# README.md's examples, each block built in a folder of its own with the README's build line as
# written (cc ex.c ...): the host one always, the CUDA one in a CUDA build. Without a usable GPU
# the CUDA one must say why in rap's words and exit 1.
readme_example() {   # HEADING FOLDER: builds FOLDER/a.out
  mkdir "$2"
  bash scripts/readme-example.sh code "$1" > "$2/ex.c"
  local line; line=$(bash scripts/readme-example.sh build-line "$1")
  (cd "$2" && PKG_CONFIG_PATH="$libdir" bash -euo pipefail -c "$line") ||
    { echo "install-check: README.md's \"$line\" under \"## $1\" does not build"; exit 1; }
}
readme_example "Example on the host" "$work/readme-host"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/readme-host/a.out" >/dev/null
readme_note=", README.md's host example"
if [ -x "$work/cmake/cuda_consumer" ]; then
  readme_example "Example: a pool on a CUDA stream" "$work/readme-cuda"
  st=0; out=$(LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/readme-cuda/a.out" 2>&1) || st=$?
  if [ "$st" -ne 0 ] && ! { [ "$st" -eq 1 ] && grep -q '^RAP_ERR_UNSUPPORTED: .*no CUDA device is usable here' <<<"$out"; }; then
    echo "install-check: README.md's CUDA example exited $st without rap's sentence on the GPU:"
    echo "$out"; exit 1
  fi
  readme_note="$readme_note and CUDA example (${out%%$'\n'*})"
fi
# The static archive, with the private dependencies pkg-config lists for it.
static_libs=$(PKG_CONFIG_PATH="$libdir" pkg-config --static --libs rap | sed 's/-lrap//')
cc -std=c11 -Wall -Werror tests/consumer/main.c $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags rap) \
  "$(dirname "$libdir")/librap.a" $static_libs -o "$work/pc-consumer-static"
"$work/pc-consumer-static"
# The shared library exports the public API alone: every defined dynamic symbol is rap_*.
so=$(find "$work/prefix" -name 'librap.so.*.*.*' | head -1)
internal=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^rap_' || true)
if [ -n "$internal" ]; then
  echo "install-check: librap.so exports symbols outside the public API:"; echo "$internal"; exit 1
fi
# The Python package rap is installed (RAP_PYTHON_INSTALL_DIR) and imports from the prefix alone.
py_note=""
if grep -q '^RAP_BUILD_PYTHON:BOOL=ON' "$build/CMakeCache.txt"; then
  init=$(find "$work/prefix" -path '*/rap/__init__.py' | head -1)
  [ -n "$init" ] || { echo "install-check: the Python package rap was not installed"; exit 1; }
  pydir=$(dirname "$(dirname "$init")")
  (cd "$work" && env -u RAP_LIB PYTHONPATH="$pydir" python3 - "$work/prefix" <<'PY'
import os, sys
import rap
assert os.path.realpath(rap.__file__).startswith(os.path.realpath(sys.argv[1]) + os.sep), rap.__file__
assert rap.version() == rap.__version__
assert rap.check_spec("QuickPool(HOST, initial_size=1MiB)")
try:
    rap.check_spec("QuickPool(HOST")
    sys.exit("install-check: a bad spec passed rap.check_spec")
except ValueError:
    pass
PY
  ) || { echo "install-check: the installed Python package rap does not work"; exit 1; }
  py_note=", the Python package rap imports from ${pydir#"$work/prefix/"}"
fi
echo "install-check: find_package and pkg-config consumers built and ran$readme_note$cpp_note, rap-trace runs$py_note; librap.so exports $(nm -D --defined-only "$so" | grep -c ' rap_') rap_* symbols and nothing else"
