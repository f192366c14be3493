"""A damaged memory or queue file is refused, never silently replaced: `hilo serve`, `hilo
worker`, `hilo chat` and the commands that open the memory exit non-zero with one line
that says what to do, and the file is left exactly as it was. A running server's /health
reports pages garbled under it, and its routes answer 503 instead of a bare 500.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from app.cli import hilo as hilo_command
from app.config import Config
from app.datadir import DataDir
from app.db import CorruptDatabase, Durability, connect
from app.ops.doctor import Status, check_database
from app.serve import create_app
from app.turn.chat import ChatService
from tests.conftest import REPO_ROOT
from workers.consumer import start_jobs
from workers.queue import CorruptQueue, configure, huey

PAGE = 4096
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8


def truncate_to_zero(path: Path) -> None:
    path.write_bytes(b"")


def truncate_to_half(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2 // PAGE * PAGE)


def garble_pages(path: Path) -> None:
    """Random bytes over every page but the first: still a SQLite file, by its header."""
    noise = random.Random(13)
    data = bytearray(path.read_bytes())
    for start in range(PAGE, len(data), PAGE):
        data[start:start + PAGE] = noise.randbytes(PAGE)
    path.write_bytes(bytes(data))


def wrong_file(path: Path) -> None:
    path.write_bytes(PNG)  # a picture renamed memory.sqlite3


MEMORY_DAMAGE = {"truncated to 0 bytes": truncate_to_zero, "truncated to half": truncate_to_half,
                 "garbled pages": garble_pages, "a PNG renamed": wrong_file}
# A 0-byte queue file is an empty queue (Huey makes its tables; reconcile redoes the work).
QUEUE_DAMAGE = {"truncated to half": truncate_to_half, "garbled pages": garble_pages,
                "a PNG renamed": wrong_file}


def filled_memory(config: Config) -> Path:
    """A memory database with some events, all of them in the file (no WAL)."""
    DataDir.of(config).init()
    with ChatService(config) as service:
        for n in range(200):
            service.append("u1", "s1", "user", f"message {n} " + "words " * 40)
    path = DataDir.of(config).memory_db
    con = connect(path, Durability.FULL)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


def filled_queue(config: Config) -> Path:
    DataDir.of(config).init()
    queue = configure(config)
    for n in range(200):
        queue.put(f"hint-{n}", "x" * 200)
    queue.storage.close()
    path = DataDir.of(config).queue_db
    con = connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


def run_hilo(config: Config, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env["HILO_LLM_URL"] = "http://127.0.0.1:9"  # never reached: the start is refused first
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args, "--data-dir", str(config.data_dir)],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60)


def assert_refused_in_one_line(result: subprocess.CompletedProcess, command: str, said: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode not in (0, None), result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith(f"hilo {command}: "), lines[0]
    assert said in lines[0] and "aside" in lines[0], lines[0]


def damaged(path: Path, damage: Callable[[Path], None]) -> bytes:
    damage(path)
    for leftover in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    return path.read_bytes()


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_emptied_memory_database_stops_serve_and_worker_in_one_line(config, command):
    path = filled_memory(config)
    before = damaged(path, truncate_to_zero)

    result = run_hilo(config, command)

    assert_refused_in_one_line(result, command, "hilo restore")
    assert path.read_bytes() == before


@pytest.mark.parametrize("damage", MEMORY_DAMAGE.values(), ids=MEMORY_DAMAGE.keys())
@pytest.mark.parametrize("start", [create_app, start_jobs], ids=["serve", "worker"])
def test_every_kind_of_memory_damage_is_refused_at_start(config, damage, start):
    path = filled_memory(config)
    before = damaged(path, damage)

    with pytest.raises(CorruptDatabase, match="hilo restore"):
        start(config)
    assert path.read_bytes() == before


def test_hilo_chat_refuses_an_empty_memory_database(config):
    path = filled_memory(config)
    before = damaged(path, truncate_to_zero)

    result = run_hilo(config, "chat")

    assert result.returncode == 1
    assert "is empty (0 bytes)" in result.stderr and "hilo restore" in result.stderr
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize("damage", MEMORY_DAMAGE.values(), ids=MEMORY_DAMAGE.keys())
@pytest.mark.parametrize("args", [["init"], ["memory", "search", "words"], ["memory", "facts"],
                                  ["memory", "add", "preference", "drink", "tea"]], ids=" ".join)
def test_commands_that_open_the_memory_refuse_a_damaged_one(config, damage, args):
    path = filled_memory(config)
    before = damaged(path, damage)

    result = CliRunner().invoke(hilo_command, [*args, "--data-dir", str(config.data_dir)])

    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "hilo restore" in result.output and "Traceback" not in result.output
    assert path.read_bytes() == before


@pytest.mark.parametrize("damage", MEMORY_DAMAGE.values(), ids=MEMORY_DAMAGE.keys())
def test_doctor_says_the_memory_database_is_damaged_and_how_to_restore(config, damage):
    path = filled_memory(config)
    damaged(path, damage)

    checks = check_database(config)

    assert checks[0].status is Status.FAIL
    assert "hilo restore" in checks[0].fix


def test_a_missing_memory_database_is_still_created_by_init(config):
    report = DataDir.of(config).init()
    assert report.migrations_applied
    assert not list(config.data_dir.glob(".memory.sqlite3.*"))  # the building file is gone
    assert DataDir.of(config).init().migrations_applied == []


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_garbled_queue_file_stops_serve_and_worker_saying_to_move_it_aside(config, command):
    path = filled_queue(config)
    memory_before = DataDir.of(config).memory_db.read_bytes()
    before = damaged(path, garble_pages)

    result = run_hilo(config, command)

    assert_refused_in_one_line(result, command, "queue.sqlite3 aside")
    assert path.read_bytes() == before
    assert DataDir.of(config).memory_db.read_bytes() == memory_before


@pytest.mark.parametrize("damage", QUEUE_DAMAGE.values(), ids=QUEUE_DAMAGE.keys())
@pytest.mark.parametrize("start", [create_app, start_jobs], ids=["serve", "worker"])
def test_every_kind_of_queue_damage_is_refused_at_start(config, damage, start):
    path = filled_queue(config)
    before = damaged(path, damage)

    with pytest.raises(CorruptQueue, match="queue.sqlite3 aside"):
        start(config)
    assert path.read_bytes() == before


def test_an_empty_queue_file_is_an_empty_queue(config):
    path = filled_queue(config)
    damaged(path, truncate_to_zero)
    configure(config)
    huey.storage.close()
    assert huey.pending_count() == 0


def test_health_reports_pages_garbled_under_a_running_server(config, fake_ollama):
    path = filled_memory(config)
    config = config.replace(llm={"url": fake_ollama.url})
    with TestClient(create_app(config)) as client:
        garble_pages(path)

        health = client.get("/health")
        assert health.status_code == 503
        assert "is damaged" in health.json()["error"]
        assert "hilo restore" in health.json()["error"]

        listed = client.get("/memory/sessions/s1/events")
        assert listed.status_code == 503, listed.text
        assert "hilo restore" in listed.json()["error"]
