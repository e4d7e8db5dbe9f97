# `make bench-peers`: stsa against PyTorch SDPA and FlexAttention on the CPU
# (bench/peers/peers.py), interleaved in one process: JSON lines in
# $(PEERS_OUT), progress on stderr, then the tables (peers_table.py). Not
# part of `make test`. Included by the top Makefile, which defines BUILD,
# PYTHON and DIFFUSERS_VENV.
#
# The venv gets torch plus numpy, cffi and ml_dtypes; stsa itself runs from
# python/src against $(BUILD)/libstsa.so, so a rebuilt library needs no
# reinstall. torch comes from the PyTorch CPU index (2.15.0+cpu, ~200 MB, no
# CUDA libraries) where it can be reached; it is an extra index, so a machine
# that reaches only PyPI gets PyPI's 2.15.0 (CUDA libraries bundled, ~3 GB,
# the same CPU kernels), as `make test-diffusers` installs it.
# PEERS_VENV=$(DIFFUSERS_VENV) reuses the diffusers venv (its torch is
# pinned to the same version); any venv whose torch imports is kept as is.
# FlexAttention needs a C++ compiler at run time (torch.compile's CPU backend).
PEERS_VENV ?= build-venv-peers
PEERS_TORCH ?= torch==2.15.0
PEERS_TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PEERS_THREADS ?= 2
PEERS_FLAGS ?=
PEERS_OUT ?= $(BUILD)/peers.jsonl

.PHONY: bench-peers peers-venv

peers-venv:
	@test -x $(PEERS_VENV)/bin/pip || $(PYTHON) -m venv $(PEERS_VENV)
	@$(PEERS_VENV)/bin/python -c "import torch" 2>/dev/null \
	  || $(PEERS_VENV)/bin/pip install -q --disable-pip-version-check \
	       --extra-index-url $(PEERS_TORCH_INDEX) $(PEERS_TORCH)
	@$(PEERS_VENV)/bin/python -c "import numpy, cffi, ml_dtypes" 2>/dev/null \
	  || $(PEERS_VENV)/bin/pip install -q --disable-pip-version-check numpy cffi ml_dtypes

bench-peers: build peers-venv
	STSA_LIBRARY=$(abspath $(BUILD))/libstsa.so PYTHONPATH=$(abspath python/src) \
	  $(PEERS_VENV)/bin/python bench/peers/peers.py --threads $(PEERS_THREADS) $(PEERS_FLAGS) \
	  > $(PEERS_OUT)
	@$(PEERS_VENV)/bin/python bench/peers/peers_table.py $(PEERS_OUT)
