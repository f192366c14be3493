"""The REPL driven as a user drives it: `start_chat` starts `hilo chat` on a real
pseudo-terminal (pexpect); the rest type, leave and read what it stored."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pexpect
import pytest

from app.datadir import DataDir
from tests.fake_ollama import FakeOllama

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMPT = "you>"  # prompt_toolkit draws the trailing space as a cursor move
USER = "default"  # [memory] user_id in config.toml
WAIT = 15  # seconds pexpect waits for an expected output before failing


def rows(data_dir: Path, sql: str, *params: Any) -> list[tuple]:
    con = apsw.Connection(str(DataDir(data_dir).memory_db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(con.execute(sql, params))
    finally:
        con.close()


def events(data_dir: Path) -> list[tuple[str, str, str]]:
    return [tuple(r) for r in rows(data_dir, "SELECT session_id, role, content FROM events ORDER BY id")]


def chat_env(url: str) -> dict[str, str]:
    # No cursor-position requests: pexpect is a terminal that never answers them.
    return {**os.environ, "HILO_LLM_URL": url, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}


@pytest.fixture
def start_chat(data_dir: Path, fake_ollama: FakeOllama) -> Iterator[Callable[..., pexpect.spawn]]:
    """Start `python -m app.cli.repl` on a pseudo-terminal and wait for its first prompt."""
    children: list[pexpect.spawn] = []

    def start(*args: str, url: str | None = None) -> pexpect.spawn:
        child = pexpect.spawn(
            sys.executable, ["-m", "app.cli", "chat", "--data-dir", str(data_dir), *args],
            cwd=str(REPO_ROOT), env=chat_env(url or fake_ollama.url), encoding="utf-8",
            timeout=WAIT, dimensions=(50, 220))
        children.append(child)
        child.expect(PROMPT)
        return child

    yield start
    for child in children:
        child.close(force=True)


def say(child: pexpect.spawn, line: str) -> None:
    """Type a line and press Enter."""
    child.send(line + "\r")


def leave(child: pexpect.spawn) -> None:
    say(child, "/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
