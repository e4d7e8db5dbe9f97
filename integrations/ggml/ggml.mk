# ggml integration (integrations/ggml/): included by the top Makefile, which
# defines BUILD, PYTHON and JOBS. ggml comes from PyPI (libggml-python: prebuilt
# libraries, headers and a CMake package) into a venv of its own; the
# integration is built against it and the libstsa of $(BUILD).
#   make test-ggml                  dense vs ggml_flash_attn_ext, SVG, bad inputs
#   make bench-ggml [BENCH_GGML_FLAGS="--wan480p --heads 12"]
GGML_VENV ?= build-venv-ggml
GGML_BUILD ?= $(BUILD)/ggml
GGML_PIN ?= libggml-python==0.20.2.post1
BENCH_GGML_FLAGS ?=

GGML_CMAKE_DIR = $(abspath $(GGML_VENV))/lib/python3*/site-packages/libggml/lib64/cmake/ggml

.PHONY: ggml-venv build-ggml test-ggml bench-ggml

# The venv is kept between runs (made again only when pip has not finished).
ggml-venv:
	@test -f $(GGML_VENV)/.ggml-installed || { rm -rf $(GGML_VENV) \
	  && $(PYTHON) -m venv $(GGML_VENV) \
	  && $(GGML_VENV)/bin/pip install -q --disable-pip-version-check $(GGML_PIN) \
	  && touch $(GGML_VENV)/.ggml-installed; }

build-ggml: build ggml-venv
	@cmake -S integrations/ggml -B $(GGML_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -Dggml_DIR=$$(echo $(GGML_CMAKE_DIR)) \
	  -DSTSA_LIBRARY=$(abspath $(BUILD))/libstsa.so $(QUIET_FLAGS) >/dev/null
	@cmake --build $(GGML_BUILD) -j$(JOBS) $(BUILD_TOOL_FLAGS)

test-ggml: build-ggml
	@$(GGML_BUILD)/test_ggml

bench-ggml: build-ggml
	@$(GGML_BUILD)/bench_ggml $(BENCH_GGML_FLAGS)
