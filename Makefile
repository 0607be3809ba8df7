# make run   - create .venv, install Foundry, run the pipeline on the default corpus
# make test  - create/update the same .venv with the dev extras, run the test suite
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# pip on these machines warns once per package about local index folders that do not exist.
QUIET_PIP := { grep -v 'is ignored: it is neither a file nor a directory' || true; }

.PHONY: run test install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e . 2>&1 | $(QUIET_PIP)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]' 2>&1 | $(QUIET_PIP)
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/foundry run $(ARGS)

test: install-dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf .foundry
