# rlvr: `make demo` runs the main job, `make test` the whole suite but the pipeline smoke runs (`make test-long`,
# marker long), `make test-fast` the tests that start no vLLM server or training run (-m "not slow"). All set up first.
# Both run in pytest-xdist workers (TEST_WORKERS / FAST_WORKERS; 0 runs in one process), taking units of work
# longest first by tests/module_seconds.json (`make test-durations` refreshes it from the last run); workers past
# SERVER_WORKERS take only units that start no server (tests/schedule.py: for machines with cores to spare; on 2
# cores a third worker did not pay). Both end with the time per test directory against its share, the workers'
# finishing times and the machine's load (docs/testing.md).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYPROJECTS := pyproject.toml $(wildcard environments/*/pyproject.toml)
STAMP := $(VENV)/.setup-$(shell cat $(PYPROJECTS) scripts/setup.sh scripts/setup_v1.sh requirements/v1.txt $(wildcard environments_v1/*/pyproject.toml) 2>/dev/null | sha256sum | cut -c1-16)
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
TEST_WORKERS ?= 2
SERVER_WORKERS ?= 2
FAST_WORKERS ?= 2
LOCK_ARGS := pyproject.toml --no-sources --extra gpu --extra train --extra retrieval --generate-hashes \
	--python-version 3.11 --python-platform x86_64-unknown-linux-gnu --custom-compile-command "make lock" --quiet

.PHONY: setup test test-fast test-durations test-long gpu-check gpu-bundle fuzz demo bench lint lock lock-check clean

setup: $(STAMP)

$(STAMP):
	bash scripts/setup.sh
	rm -f $(VENV)/.setup-* && touch $@

test: setup lock-check
	$(OFFLINE) RLVR_SERVER_WORKERS=$(SERVER_WORKERS) $(BIN)/python -m pytest -m "not long" -n $(TEST_WORKERS) --dist loadgroup \
		--durations=30 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# The order's input: each module's seconds in the last run (pytest's cache, written by conftest.py) into the committed
# tests/module_seconds.json. After a full `make test` on an idle machine, when slow modules were added or changed.
test-durations:
	$(BIN)/python -c "import json, pathlib; pathlib.Path('tests/module_seconds.json').write_text(json.dumps(json.loads(pathlib.Path('.pytest_cache/v/rlvr/module_seconds').read_text()), indent=1) + '\\n')"

# Whole benchmark pipelines end to end at the smallest scale (marker `long`, 20+ min each: `rlvr pipeline`'s smoke)
# and the extra seeds of learning checks whose first seed runs in `make test`.
test-long: setup
	$(OFFLINE) $(BIN)/python -m pytest -m long $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test-fast: setup
	$(OFFLINE) $(BIN)/python -m pytest -m "not slow" -n $(FAST_WORKERS) --dist loadgroup $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# The GPU checks (tests/gpu, marker gpu: bf16, chunked logprobs and the loss against CPU, master weights, DeepSpeed)
# on a GPU machine's own Python, torch, transformers, peft and accelerate: no .venv, no uv, no registry, no vLLM.
# rlvr goes in editable without dependencies (--ignore-requires-python: such images have 3.12). What an image lacks
# (DeepSpeed and its needs, the build backend, the prepared tiny-random) comes from $(GPU_BUNDLE), which
# `make gpu-bundle` gathers where a registry is reachable: carry it to the GPU machine.
GPU_PYTHON ?= python3
GPU_BUNDLE ?= build/gpu-check
GPU_SITE := $(abspath $(GPU_BUNDLE))/site
GPU_ENV := PYTHONPATH=$(GPU_SITE) $(if $(wildcard $(GPU_BUNDLE)/rlvr-home),RLVR_HOME=$(abspath $(GPU_BUNDLE))/rlvr-home)

gpu-bundle: setup
	GPU_BUNDLE=$(GPU_BUNDLE) bash tests/gpu/bundle.sh

gpu-check:
	if [ -d $(GPU_BUNDLE)/wheels ]; then $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --upgrade \
		--target $(GPU_SITE) $(GPU_BUNDLE)/wheels/*.whl; fi
	$(GPU_ENV) $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-build-isolation --ignore-requires-python -e .
	$(GPU_ENV) $(OFFLINE) $(GPU_PYTHON) -m pytest -m gpu tests/gpu -v -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# The long fuzz profile: thousands of adversarial rollouts through every environment (rlvr.testing), summarised.
fuzz: setup
	mkdir -p runs && rm -f runs/fuzz_long.jsonl
	RLVR_FUZZ=long RLVR_FUZZ_REPORT=runs/fuzz_long.jsonl $(OFFLINE) $(BIN)/python -m pytest -q environments -k fuzz
	$(BIN)/python -m rlvr.testing runs/fuzz_long.jsonl benchmarks/results/fuzz_long.json

demo: setup
	$(OFFLINE) $(BIN)/rlvr demo

bench: setup
	$(OFFLINE) $(BIN)/python benchmarks/run_all.py

lint: setup
	$(BIN)/ruff check src tests environments benchmarks scripts

# The GPU production lock: hash-pinned, no registry host in it (uv.lock names one on every line).
lock: setup
	$(BIN)/uv pip compile $(LOCK_ARGS) -o requirements/gpu.lock

# Re-resolve starting from the committed pins: only a pyproject change can alter the output.
lock-check: setup
	@tmp=$$(mktemp -d) && cp requirements/gpu.lock $$tmp/gpu.lock && \
	$(BIN)/uv pip compile $(LOCK_ARGS) -o $$tmp/gpu.lock && \
	if diff -q requirements/gpu.lock $$tmp/gpu.lock >/dev/null; then echo "gpu.lock is up to date"; \
	else diff requirements/gpu.lock $$tmp/gpu.lock | head -20; echo "requirements/gpu.lock drifted from pyproject.toml: run 'make lock'" >&2; exit 1; fi; \
	if grep -qE 'https?://' requirements/gpu.lock; then echo "gpu.lock names a URL" >&2; exit 1; fi

clean:
	rm -rf $(VENV) dist build .pytest_cache .ruff_cache
