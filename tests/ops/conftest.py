"""Fixtures of the ops tests: a populated memory, an empty second data directory, and a
kinder-agent database to import."""

from __future__ import annotations

import pytest

from app.config import load_config
from app.datadir import DataDir
from tests.conftest import REPO_ROOT
from tests.fixtures.kinder_agent import build_kinder_agent_db
from tests.fixtures.memory import populate_memory


@pytest.fixture
def populated(config, writer):
    memory = populate_memory(writer, config)
    writer.close()  # exports read the file as the CLI would, with nothing else open
    return memory


@pytest.fixture
def empty(tmp_path):
    """A second, freshly initialised data directory."""
    other = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=tmp_path / "other")
    DataDir.of(other).init()
    return other


@pytest.fixture
def kinder(tmp_path):
    return build_kinder_agent_db(tmp_path / "kinder-agent.db")
