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

# torch first, pinned: 2.13.0's CPU wheel is on this machine's disk; any other version (or a
# bare `torch` requirement resolved first) pulls gigabytes of CUDA wheels.
$(VENV)/.installed-test: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	touch $@ $(VENV)/.installed

# The tests run a real redis-server (Debian's package); install it when it is missing.
REDIS_SERVER := $(shell command -v redis-server 2>/dev/null || echo /usr/bin/redis-server)
$(REDIS_SERVER):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server > /dev/null

## run: create .venv, install, solve the default instance (INSTANCE=... to choose another)
run: $(VENV)/.installed
	$(BIN)/lambdadnn solve $(INSTANCE)

## test: create .venv, install with test extras, lint, type-check, run pytest
test: lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

# The repository's top level is the package `lambdadnn` (setup.cfg's package_dir); mypy
# resolves that name through a link to it, so it checks these very files under their real names.
typecheck: $(VENV)/.installed-test
	mkdir -p $(VENV)/typecheck && ln -sfn "$(CURDIR)" $(VENV)/typecheck/lambdadnn
	$(BIN)/mypy -p lambdadnn.inputs -p lambdadnn.models -p lambdadnn.solver -p lambdadnn.simulator \
	  -p lambdadnn.launcher -m lambdadnn.plot -m lambdadnn.cli -m lambdadnn

## pytest: start redis-server and a moto server on 127.0.0.1, run pytest with line and branch
## coverage of models/ and solver/ in PYTEST_WORKERS processes (pytest-xdist, a test file
## per process at a time, the longest files first: tests/conftest.py; each its own Redis
## database), stop them
COVERAGE := --cov=lambdadnn.models --cov=lambdadnn.solver --cov-report=term
PYTEST_WORKERS ?= 2
pytest: $(VENV)/.installed-test $(REDIS_SERVER)
	.ci/with-services $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  $(COVERAGE)

## test-fast: the tests marked neither `real` (a process, a server, torch, Dask or moto:
## tests/conftest.py fails an unmarked test that starts one) nor `slow` (5 s or more), with 25
## hypothesis examples a property; in about a minute, with no lint, coverage or servers
.PHONY: test-fast
test-fast: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=fast $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile \
	  -m "not real and not slow"

## bench: solve() vs brute force and Algorithm 1; 10,000 simulated jobs vs the 60 s target;
## a 90-cell sweep on the local Dask cluster vs its 10-minute target
bench: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks.solve
	$(BIN)/python -m benchmarks.simulate
	$(BIN)/python -m benchmarks.sweep
	$(BIN)/python -m benchmarks.solve_many

## calibrate: profile both shipped workloads here, launch held-out plans solved from the
## profiles, print measured against predicted time (about 25 minutes), then 24 real launches
## against their deadlines, static and adaptive, from right and wrong beliefs (about 30
## minutes); needs an idle machine
.PHONY: calibrate
calibrate: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks.calibration
	$(BIN)/python -m benchmarks.deadlines_real

## mutate: plant each known bug of tests/mutation.py in a scratch copy, run the tests that
## should catch it, print `killed K/N`, fail if one survives (minutes; not part of `make test`)
.PHONY: mutate
mutate: $(VENV)/.installed-test
	$(BIN)/python -m tests.mutation

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis .coverage
