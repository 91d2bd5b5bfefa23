# `make run` and `make test` are the two commands a newcomer needs (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
WORKERS ?= 1

.PHONY: install lock run test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The exact versions CI tested, with their hashes (requirements/dev.txt), then the project itself, editable;
# re-installed when pyproject.toml or the lock changes. `pip check` fails when the lock no longer covers
# pyproject.toml: run `make lock`.
$(VENV)/.installed: pyproject.toml requirements/dev.txt | $(BIN)/python
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements/dev.txt
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/pip check
	@touch $@

install: $(VENV)/.installed

# The locks, from PyPI (uv ignores this machine's pip configuration: its mirrors and constraints), for every
# platform (hashes of every wheel of each version): requirements/runtime.txt for the image (no extras),
# requirements/dev.txt for CI and `make install`. Run it after changing the dependencies in pyproject.toml;
# `make lock UPGRADE=1` moves every package to its newest allowed version.
LOCK := $(BIN)/python -m uv pip compile pyproject.toml --quiet --universal --python-version 3.11 --generate-hashes \
	--index-url https://pypi.org/simple --custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade)
# The runtime lock is held to the versions of the dev lock: the image runs exactly what CI tested.
lock: | $(BIN)/python
	$(BIN)/python -m uv --version >/dev/null 2>&1 || $(BIN)/pip install -q uv
	$(LOCK) --extra dev -o requirements/dev.txt
	$(LOCK) --constraint requirements/dev.txt -o requirements/runtime.txt

# Ports: make run CHAT_PORT=9000 AGENT_PORT=9001 (run_local.py reads them from the environment).
# Worker processes per service: make run WORKERS=2 (N > 1 needs Redis: REDIS_URL=redis://127.0.0.1:6379/0).
run: install
	$(BIN)/python deploy/run_local.py --host $(HOST) --workers $(WORKERS)

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -q -m "not browser" -x $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python loadtests/bench_agent.py

clean:
	rm -rf $(VENV) var .pytest_cache
