# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTANCE ?= instances/mobilenet-cifar10.yaml
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	touch $@ $(VENV)/.installed

## run: create .venv, install, solve the default instance (INSTANCE=... to choose another)
run: $(VENV)/.installed
	$(BIN)/lambdadnn solve $(INSTANCE)

## test: create .venv, install with test extras, lint, type-check, run pytest
test: lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test
	$(BIN)/pytest

## bench: solve() against the brute force and λDNN's Algorithm 1 (ratios, same run)
bench: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks.solve

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis
