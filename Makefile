# The two commands a newcomer needs: `make serve` and `make test` (see README.md).
# Both create .venv on first use and reinstall when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
PYTEST_ARGS ?=

.PHONY: serve test test-slow test-scale lint typecheck fixtures schemas clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,export,report]'
	touch $@ $(STAMP_RUN)

# The planning service on http://127.0.0.1:8000 (docs at /docs), SQLite store and models in
# ~/.local/share/arenaplan; settings from ARENAPLAN_* variables, options in SERVE_ARGS
# (e.g. make serve SERVE_ARGS="--port 9000 --workers 2").
serve: $(STAMP_RUN)
	$(BIN)/arenaplan serve $(SERVE_ARGS)

test: $(STAMP_DEV)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: no slow tests yet

test-scale: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -m scale $(PYTEST_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .

# mypy over the packages named in pyproject.toml ([tool.mypy]): every function annotated.
typecheck: $(STAMP_DEV)
	$(BIN)/mypy

fixtures: $(STAMP_DEV)
	$(BIN)/python tests/fixtures/generate.py

schemas: $(STAMP_RUN)
	$(BIN)/python -m schemas.generate

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .mypy_cache

# Headless Chromium and its WebDriver for the report's browser tests (tests/planner/report/, which
# skip without them), from Debian packages (root, or sudo). Does nothing when both are installed.
.PHONY: browser-deps
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		echo "browser-deps: chromium and chromedriver are installed"; \
	else \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends \
			chromium chromium-driver; \
	fi
