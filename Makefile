# The two commands of the README: `make run` and `make test`. Each creates or reuses
# the virtual environment .venv and installs what it needs (again when pyproject.toml
# changes).

VENV   := .venv
PYTHON := $(VENV)/bin/python
HILO   := $(VENV)/bin/hilo
PIP    := $(PYTHON) -m pip install --quiet --disable-pip-version-check

.PHONY: run test bench

$(PYTHON):
	python3 -m venv $(VENV)

# Running needs the base install only.
$(VENV)/.run-installed: pyproject.toml | $(PYTHON)
	$(PIP) -e .
	touch $@

# The tests also use the local embedder (all-MiniLM-L6-v2 on CPU torch), a Redis client,
# and the real ollama and openai client packages.
$(VENV)/.test-installed: pyproject.toml | $(PYTHON)
	$(PIP) -e '.[dev,redis,local]'
	touch $@

# The embedded default: SQLite memory, SQLite queue; the API and the worker under honcho.
# Ctrl-C or SIGTERM is how `make run` ends: honcho then stops both processes and exits
# 130 or 143, which is a clean stop, not an error for make to report. The trap keeps the
# recipe's shell alive through Ctrl-C until honcho has finished.
run: $(VENV)/.run-installed
	$(HILO) init
	trap : INT; PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/honcho start; \
	status=$$?; [ $$status -eq 130 ] || [ $$status -eq 143 ] || exit $$status

test: $(VENV)/.test-installed
	$(PYTHON) -m pytest

bench: $(VENV)/.test-installed
	for b in writer context workers locomo soak macros localmodel injection; do $(PYTHON) -m tests.bench.$$b || exit 1; done
