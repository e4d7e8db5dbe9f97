# Thin wrapper over CMake. `make demo` runs the main job, `make test` every test.
BUILD ?= build
TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build demo test deps sanitize fuzz format clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/stsa demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize:
	$(MAKE) test BUILD=build-asan TYPE=RelWithDebInfo CMAKE_FLAGS="-DSTSA_SANITIZE=ON -DSTSA_WERROR=ON"

fuzz:
	STSA_WITH_FUZZ=1 scripts/deps.sh
	fuzz/run.sh build-fuzz $${FUZZ_SECONDS:-60}

format:
	clang-format -i include/*.h src/*/*.[ch] src/*/*/*.[ch] tools/*.[ch] tests/*.[ch] \
	  bench/*.c fuzz/*.c 2>/dev/null || true

clean:
	rm -rf build build-asan build-fuzz
