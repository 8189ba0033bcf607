# Makefile — thin wrapper over CMake presets. `make test` and `make demo` work on a fresh Debian 12.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST = ctest --output-on-failure -j $(JOBS)

.PHONY: all deps build install test debug-checks demo asan tsan host-only install-check bench device-build clean fuzz fuzz-ci fuzz-build fuzz-merge hip-check device-build-hip wheel

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake --preset default
	cmake --build --preset default -j $(JOBS)

test: build
	cd build && $(CTEST)
	@bash scripts/layers.sh build > build/layers.txt || { cat build/layers.txt; exit 1; }
	@echo "layers: every edge allowed, no circle (the graph: build/layers.txt)"
	@bash scripts/sizes.sh
	@bash scripts/test-summary.sh build

# The host suite again with RAP_DEBUG=2 (stated preconditions checked, the invariant walker after
# every public call). ThreadSafe.ForwardsEveryMethodOnce counts calls into a strategy, and the
# walker's calls are extra ones: it is left out.
debug-checks: build
	ctest --preset debug-checks

# The demo alone: build/ configured once (as make build does) and the demo's target built, not the
# tests, fuzzers and benchmarks that make build makes.
demo: deps
	@[ -f build/CMakeCache.txt ] || cmake --preset default
	cmake --build --preset default --target demo -j $(JOBS)
	./build/examples/demo

asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

tsan: deps
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 $(CTEST)

host-only: deps
	cmake --preset host-only
	cmake --build --preset host-only -j $(JOBS)
	cd build-host && $(CTEST)

# Installs the library, headers, CMake and pkg-config packages, rap-trace and the Python package
# under PREFIX (default /usr/local): make install PREFIX=$$HOME/opt/rap
PREFIX ?= /usr/local
install: build
	cmake --install build --prefix $(PREFIX)

install-check: build
	bash scripts/install-check.sh

# The HIP build (build-hip/): installs Debian's HIP 5.2 (hipcc, libamdhip64-dev), builds library,
# tests and examples for AMD, runs the suite (HIP cases skip, saying why, without an AMD GPU) and a
# HIP consumer of the installed package. CI runs it.
hip-check:
	JOBS=$(JOBS) bash scripts/hip-check.sh

# The HIP backend over the CUDA runtime (HIP 5.2's NVIDIA headers with CUDA 13; the configure writes a
# copy of one HIP header without the wrappers CUDA 13 cannot compile), made here to carry to the GPU
# machine, where `bash tests/hip/device-run.sh` runs its tests, also under compute-sanitizer.
device-build-hip:
	@RAP_DEPS_HIP=1 bash scripts/install-deps.sh
	cmake --preset device-hip
	cmake --build --preset device-hip -j $(JOBS)

# Benchmarks against the peers (bench/, docs/benchmarks.md): the table on stdout, the figures in
# build/bench/results.{json,csv} and the plot in build/bench/results.svg. BENCH_ARGS adds options
# (rap-bench --help); without a GPU only the host workloads run.
bench: build
	@if [ ! -x build/bench/rap-bench ]; then echo "no benchmarks built"; exit 1; fi
	./build/bench/rap-bench --out build/bench/results $(BENCH_ARGS)
	python3 bench/plot.py build/bench/results.json build/bench/results.svg

# A build for the GPU machine: made here, where the toolkit is, and carried there. rap-bench's
# optional peers come from sources that `bash scripts/fetch-peers.sh` placed under third_party/src
# (RMM 26.06 with its CCCL, rapids-logger and spdlog; mimalloc 2.4.1; Umpire, built first by
# scripts/build-umpire.sh into third_party/umpire-install), compiled into rap-bench here: nothing of
# them needs carrying. That machine has no package manager, so this one's
# libmimalloc.so.2 (libmimalloc-dev; used only where mimalloc was not built from source) and
# libtcmalloc_minimal.so.4 (libgoogle-perftools-dev) are copied beside rap-bench, where it looks first.
MIMALLOC_SO = $(shell $(CC) -print-file-name=libmimalloc.so.2 2>/dev/null)
TCMALLOC_SO = $(shell $(CC) -print-file-name=libtcmalloc_minimal.so.4 2>/dev/null)

device-build: deps
	@[ -d third_party/src/rmm ] || echo "device-build: no third_party/src/rmm: rap-bench leaves RMM's peers out (bash scripts/fetch-peers.sh places them)"
	JOBS=$(JOBS) bash scripts/build-umpire.sh
	cmake --preset device
	cmake --build --preset device -j $(JOBS)
	@for so in "$(MIMALLOC_SO)" "$(TCMALLOC_SO)"; do \
	  [ -d device-build/bench ] || break; \
	  name=$$(basename "$$so"); \
	  if [ -f "$$so" ]; then cp -L "$$so" "device-build/bench/$$name" && \
	    echo "device-build: $$(readlink -f "$$so") copied to device-build/bench/$$name"; \
	  else echo "device-build: no $$name here; rap-bench will skip that peer unless it is linked in"; fi; \
	done

# The Python package as a wheel, dist/rap-<version>-py3-none-<platform>.whl, from device-build (the
# GPU machine's build, with librap_torch.so and librap_cupy.so) when it is configured, else from
# build; WHEEL_BUILD=<dir> picks. Built by python/build_wheel.py with the standard library alone.
WHEEL_BUILD ?= $(if $(wildcard device-build/CMakeCache.txt),device-build,build)

wheel:
	@if [ ! -f $(WHEEL_BUILD)/CMakeCache.txt ]; then \
	  echo "wheel: $(WHEEL_BUILD) is not configured: run make device-build (or make build) first"; exit 1; fi
	cmake --build $(WHEEL_BUILD) --target rap_python -j $(JOBS)
	python3 python/build_wheel.py $(WHEEL_BUILD)/python/rap dist

# Model-based fuzzing (tests/fuzz): libFuzzer with clang, ASan and UBSan. `make fuzz` runs for
# FUZZ_SECONDS, keeping what it finds in build-fuzz/corpus and crashes in build-fuzz/artifacts;
# `make fuzz-merge` folds the new corpus, minimised, into tests/fuzz/corpus (replayed by make test).
FUZZ_SECONDS ?= 600
FUZZ_FLAGS = -max_len=4096 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1
FUZZ_BIN = build-fuzz/tests/fuzz/rap_fuzz

fuzz-build:
	@RAP_DEPS_CLANG=1 bash scripts/install-deps.sh
	cmake --preset fuzz
	cmake --build --preset fuzz --target rap_fuzz -j $(JOBS)

fuzz: fuzz-build
	mkdir -p build-fuzz/corpus build-fuzz/artifacts
	$(FUZZ_BIN) build-fuzz/corpus tests/fuzz/corpus -max_total_time=$(FUZZ_SECONDS) $(FUZZ_FLAGS) \
	  -artifact_prefix=build-fuzz/artifacts/

# CI: a bounded run (the corpus replay itself runs in make test), then one with RAP_FUZZ_VMM=1:
# the growable platform's host analogue (HostVmm) in HOST's place (tests/fuzz/fuzz_driver.c).
# Seeded (FUZZ_SEED, default 1), so that runs of a commit start alike; they still drift apart, as
# addresses and the queues' threads feed libFuzzer's comparisons; `make fuzz` alone draws a seed.
fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=$${FUZZ_CI_SECONDS:-210} FUZZ_FLAGS="$(FUZZ_FLAGS) -seed=$${FUZZ_SEED:-1}"
	RAP_FUZZ_VMM=1 $(MAKE) fuzz FUZZ_SECONDS=$${FUZZ_CI_VMM_SECONDS:-60} FUZZ_FLAGS="$(FUZZ_FLAGS) -seed=$${FUZZ_SEED:-1}"

fuzz-merge: fuzz-build
	$(FUZZ_BIN) -merge=1 tests/fuzz/corpus build-fuzz/corpus $(FUZZ_FLAGS)

clean:
	rm -rf build build-asan build-tsan build-host build-fuzz device-build dist
