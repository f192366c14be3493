"""Fixtures shared by the whole suite: a configured data directory, a writer, and the
fake Ollama server (tests/fake_ollama.py) speaking the real HTTP API on loopback."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import Durability
from app.recall.state import Recall
from app.writer import Writer
from tests.fake_ollama import FakeOllama

# Fixtures every folder may ask for, defined beside the helpers they use.
pytest_plugins = [
    "tests.api.support",  # hilo: Hilo in front of the fake model server
    "tests.cli.support",  # start_chat: `hilo chat` on a pseudo-terminal
    "tests.embedding_fixtures",  # local_embedder, text_embedder
    "tests.workers.support",  # bound_queue, consumers
]

REPO_ROOT = Path(__file__).resolve().parent.parent
# Derived files every test shares, as a person's processes do: the local embedder's ONNX
# export (app/model/minilm.py), made once per checkout instead of once per test. Set for
# the whole session: session fixtures load the model before any test's own environment.
os.environ["XDG_CACHE_HOME"] = str(REPO_ROOT / ".cache")


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    """A started FakeOllama for one test. Here, not in tests/fake_ollama.py, so that
    `python -m tests.fake_ollama` runs where pytest is not installed (`make run`'s venv)."""
    fake = FakeOllama().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's HILO_* variables, config, home directory or time zone
    (the cache is the checkout's own)."""
    for var in list(os.environ):
        if var.startswith("HILO_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("TZ", "UTC")  # [schedule] timezone defaults to the machine's


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """A command run in-process (click's runner) points the root logger at its captured
    output, closed once it returns: the next test's log lines would go there."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def recall() -> Recall:
    """What a test searches through when it has no ChatService (each service makes its
    own): a Recall of its own, empty, as in a process that just started."""
    return Recall()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """The repository's defaults with a fresh data directory, except that the workers'
    model jobs do not wait for the chat (tests of that wait set [queue] chat_idle_seconds)."""
    return load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=tmp_path / "data").replace(
        queue={"chat_idle_seconds": 0.0})


@pytest.fixture
def data_dir(config: Config) -> Path:
    DataDir.of(config).init()
    return config.data_dir


@pytest.fixture
def writer(config: Config, data_dir: Path):
    with Writer(DataDir(data_dir).memory_db, Durability.FULL) as w:
        yield w
