# Two commands do all set-up: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev

.PHONY: run test lint typecheck unit bench bench-peers clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changed (installing twice is a no-op).
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(PY) -m service.demo

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check service tests benchmarks examples
	$(VENV)/bin/ruff format --check service tests benchmarks examples

typecheck: $(STAMP_DEV)
	$(VENV)/bin/mypy

test: lint typecheck
	$(VENV)/bin/pytest -q

unit: $(STAMP_DEV)
	$(VENV)/bin/pytest -q tests/core tests/operators

bench: $(STAMP_DEV)
	$(PY) -m benchmarks.run

bench-peers: $(STAMP_DEV)
	$(PY) -m benchmarks.peers.run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
