# make run   - create .venv, install Foundry, run the pipeline on the default corpus
# make test  - create/update the same .venv with the dev extras, run the test suite (what CI runs)
# make test-fast - the same .venv, lint, then tests/fast/: no server, no training beyond a few steps
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# pip on these machines warns once per package about local index folders that do not exist.
QUIET_PIP := { grep -v 'is ignored: it is neither a file nor a directory' || true; }

.PHONY: run test test-fast lint install install-dev browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e . 2>&1 | $(QUIET_PIP)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]' 2>&1 | $(QUIET_PIP)
	touch $@ $(VENV)/.installed-run

# The slow lane's llama.cpp check of the GGUF export: a compiled package. `make test-fast` installs it too, since
# tests/fast/test_architecture.py checks that every module the tests import is installed and declared.
$(VENV)/.installed-llama: $(VENV)/.installed-dev
	$(BIN)/python -m pip install -q -e '.[dev,llama]' 2>&1 | $(QUIET_PIP)
	touch $@

# The served model's own requirements as wheels: tests/slow/serving/test_serving.py installs them in a fresh
# virtualenv with no package index, as a machine without Foundry would.
$(VENV)/wheelhouse/.complete: foundry/serving/requirements.txt | $(BIN)/python
	rm -rf $(VENV)/wheelhouse
	$(BIN)/python -m pip download -q -d $(VENV)/wheelhouse -r foundry/serving/requirements.txt 2>&1 | $(QUIET_PIP)
	touch $@

# tests/slow/pipeline/test_browser.py drives Debian's Chromium through Playwright (Playwright's own browser download needs
# the internet, Debian's package does not), so the test setup installs it when it is missing.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium; \
	fi

install: $(VENV)/.installed-run
install-dev: $(VENV)/.installed-llama $(VENV)/wheelhouse/.complete browser

run: install
	$(BIN)/foundry run $(ARGS)

# Both lanes on two pytest-xdist workers, each worker on a core of its own (tests/conftest.py), each its own
# throwaway home. A module's tests go to one worker (`--dist loadscope`), so its module fixtures (a versioned
# home...) are built once, not once per worker; in the slow lane the modules that use the Prefect server stack
# (and so the one registered base model) go to one worker together (tests/conftest.py).
test: install-dev lint
	$(BIN)/python -m pytest tests/fast -n 2 --dist loadscope $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests/slow -n 2 --dist loadscope $(PYTEST_ARGS)

# No browser and no wheelhouse: only tests/slow/ uses them.
test-fast: $(VENV)/.installed-llama lint
	$(BIN)/python -m pytest tests/fast -n 2 --dist loadscope $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf .foundry
