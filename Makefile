# Thin wrapper over CMake. `make demo` runs the main job, `make test` every test.
BUILD ?= build
TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

PYTHON ?= python3
DIFFUSERS_VENV ?= build-venv-diffusers

.PHONY: all build demo test test-c deps sanitize fuzz format format-check clean test-python \
        test-diffusers

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/stsa demo

test: test-c test-python

# The C tests only (ctest).
test-c: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize:
	$(MAKE) test-c BUILD=build-asan TYPE=RelWithDebInfo CMAKE_FLAGS="-DSTSA_SANITIZE=ON -DSTSA_WERROR=ON"

# Python package in a fresh venv: pip install ./python builds libstsa.so;
# the torch/diffusers tests skip there.
test-python: deps
	rm -rf build-venv
	$(PYTHON) -m venv build-venv
	build-venv/bin/pip install -q ./python pytest numpy
	build-venv/bin/pytest python/tests -q

# Also PyTorch + diffusers from PyPI (~3 GB, ~95 s the first time; the venv is kept).
test-diffusers: deps
	test -x $(DIFFUSERS_VENV)/bin/pip || $(PYTHON) -m venv $(DIFFUSERS_VENV)
	$(DIFFUSERS_VENV)/bin/pip install -q ./python pytest numpy ml_dtypes torch==2.15.0 diffusers==0.42.1
	$(DIFFUSERS_VENV)/bin/pytest python/tests -q -rs

fuzz:
	STSA_WITH_FUZZ=1 scripts/deps.sh
	fuzz/run.sh build-fuzz $${FUZZ_SECONDS:-60}

C_SOURCES = include/*.h src/*/*.[ch] src/*/*/*.[ch] tools/*.[ch] tests/*.[ch] fuzz/*.c

format:
	clang-format -i $(C_SOURCES)

# Fails when a C file is not formatted as .clang-format says.
format-check:
	clang-format --dry-run -Werror $(C_SOURCES)

clean:
	rm -rf build build-asan build-fuzz build-venv $(DIFFUSERS_VENV) python/build python/src/stsa/_lib
