# semipd-operator: every target sets up what it needs (venv, binaries, apt packages) on first use.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CACHE ?= $(HOME)/.cache/semipd
export PATH := $(CACHE)/bin:$(PATH)

.PHONY: help venv crds lint unit e2e test deps binaries cluster-up cluster-down demo bench clean

help:
	@echo "make demo          the main job (see README)"
	@echo "make test          lint + unit tests + e2e tests on a real local control plane"
	@echo "make crds          regenerate crds/ from the pydantic API models"
	@echo "make lint          ruff + mypy --strict + import contracts (lint-imports)"
	@echo "make cluster-up    start (or reuse) the local control plane; prints the kubeconfig path"
	@echo "make cluster-down  stop it and every process it started"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

crds: $(STAMP)
	$(BIN)/semipd crds --output crds --reference docs/api-reference.md
	$(BIN)/python -m semipd.packaging sync

lint: $(STAMP)
	$(BIN)/ruff check operator tests e2e bench scripts
	$(BIN)/ruff format --check operator tests e2e bench scripts
	$(BIN)/mypy --strict operator/semipd
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

deps:
	bash e2e/install-deps.sh

binaries:
	bash e2e/build-binaries.sh all helm

e2e: $(STAMP) deps binaries
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

clean:
	rm -rf $(VENV) .run .pytest_cache .mypy_cache .ruff_cache
