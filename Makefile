# The README's two set-up commands: `make run` (the console) and `make test` (the suite).
# Both create .venv and install on first use; afterwards they skip straight to the work.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench install

run: $(STAMP)
	$(BIN)/agent-console $(ARGS)

test: $(STAMP) lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/store.py
	$(BIN)/python bench/startup.py

install: $(STAMP)

# torch first: the CPU wheel on disk. Any other torch request pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@
