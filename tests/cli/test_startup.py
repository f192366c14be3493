"""Commands that touch no vectors start fast: they import no library they do not use.

How fast is the benchmark's to say (tests/bench/startup.py); this checks what it rests
on, in a real process's `python -X importtime`: `hilo --version`, `hilo --help` and `hilo
queue status` load neither numpy, torch, faiss, the model client (httpx) nor rich, and
with the SQLite queue not the Redis client either; `--version` and `--help` not even the
queue or the logging, `queue status` not structlog (it logs nothing) nor asyncio, and
`--version` no command's module. `hilo memory search` without an embedder searches by
keywords: no numpy, no model client.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from app.cli import COMMANDS
from tests.bench.startup import imported_modules

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "torch", "faiss", "httpx", "rich", "redis")
# What a command that logs nothing does not load (structlog imports asyncio).
LOGGING = ("structlog", "asyncio")


def imports_of(*argv: str, **settings: str) -> set[str]:
    """The modules `hilo ARGV` imports, run as a process on this tree's code and config
    (and these HILO_* settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env.update(PYTHONPATH=str(REPO_ROOT), HILO_CONFIG=str(REPO_ROOT / "config.toml"),
               **settings)
    return imported_modules([sys.executable, "-m", "app.cli", *argv], REPO_ROOT, env)


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_load_no_heavy_library_nor_the_queue(argv):
    loaded = imports_of(*argv)
    assert "app.cli" in loaded  # the probe saw the command's own imports
    assert [name for name in (*HEAVY, "huey", *LOGGING) if name in loaded] == []


def test_version_loads_no_command():
    loaded = imports_of("--version")
    assert "app.cli" in loaded
    modules = {where.split(":")[0] for where in COMMANDS.values()}
    assert sorted(modules & loaded) == []


def test_queue_status_loads_no_heavy_library_nor_the_logging(data_dir):
    loaded = imports_of("queue", "status", "--data-dir", str(data_dir))
    assert "workers.inspection" in loaded  # it did read the queue
    assert [name for name in (*HEAVY, *LOGGING) if name in loaded] == []


def test_queue_status_of_a_queue_a_worker_polls_loads_no_heavy_library(config, data_dir):
    from workers.hooks import HEARTBEAT_KEY
    from workers.queue import huey, make_storage

    storage = make_storage(config)  # the queue file, as a worker leaves it: its heartbeat
    storage.put_data(HEARTBEAT_KEY, huey.serializer.serialize(
        {"at": time.time(), "pid": os.getpid(), "host": "here"}))
    storage.close()
    loaded = imports_of("queue", "status", "--data-dir", str(data_dir))
    assert "huey" in loaded
    assert [name for name in (*HEAVY, *LOGGING) if name in loaded] == []


def test_queue_status_of_a_queue_holding_jobs_loads_no_heavy_library(config, data_dir):
    from workers.handoff import queue_handoff

    handoff = queue_handoff(config)  # what a front-end leaves for a stopped worker
    handoff.after_reply("ana", "s1", [1, 2])
    handoff.session_ended("ana", "s1")
    loaded = imports_of("queue", "status", "--data-dir", str(data_dir))
    assert "workers.inspection" in loaded
    assert [name for name in (*HEAVY, *LOGGING) if name in loaded] == []


def test_memory_search_without_an_embedder_loads_no_heavy_library(data_dir):
    loaded = imports_of("memory", "search", "dog", "--data-dir", str(data_dir),
                        HILO_EMBEDDER_KIND="none")
    assert "app.recall.fusion" in loaded  # it did search
    assert [name for name in HEAVY if name in loaded] == []
