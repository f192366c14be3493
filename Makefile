# The two commands of the README: `make run` and `make test`. Each creates or reuses
# the virtual environment .venv and installs what it needs.

VENV   := .venv
PYTHON := $(VENV)/bin/python
HILO   := $(VENV)/bin/hilo
# Reinstall when the project's dependencies change.
STAMP  := $(VENV)/.installed

.PHONY: run test bench

$(STAMP): pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev,redis]'
	touch $(STAMP)

run: $(STAMP)
	$(HILO) init
	$(HILO) doctor || true

test: $(STAMP)
	$(PYTHON) -m pytest

bench: $(STAMP)
	$(PYTHON) -m tests.bench.writer
