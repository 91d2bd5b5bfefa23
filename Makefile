# `make run` and `make test` are the two commands a newcomer needs (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
WORKERS ?= 1

.PHONY: install run test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Re-install when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

install: $(VENV)/.installed

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
