# Makefile — thin wrapper over CMake presets. `make test` and `make demo` work on a fresh Debian 12.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST = ctest --output-on-failure -j $(JOBS)

.PHONY: all deps build test demo asan tsan host-only install-check bench device-build clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake --preset default
	cmake --build --preset default -j $(JOBS)

test: build
	cd build && $(CTEST)

demo: build
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

install-check: build
	bash scripts/install-check.sh

bench: build
	@if [ -x build/bench/rap-bench ]; then ./build/bench/rap-bench; else echo "no benchmarks built"; fi

# A build for the GPU machine: made here, where the toolkit is, and carried there.
device-build: deps
	cmake --preset device
	cmake --build --preset device -j $(JOBS)

clean:
	rm -rf build build-asan build-tsan build-host device-build
