"""Shared helpers for the worker tests (this module holds no tests of its own).

- `worker_config`: the test config pointed at the fake model, with instant retries;
- `bound_queue`: the queue bound to the test's data directory and a JobRunner attached,
  as the consumer's start does (without its start-up sweep);
- `handoff`: the chat's hand-off onto that queue, as the front-ends make it;
- `drain`: run queued jobs in this thread, as a consumer would, until nothing is due;
- `scripted_model`: fake model replies derived from the prompt (distill, card, diary);
- `Consumer`: the real consumer (`hilo worker`) in its own process;
- `wait_until`: poll a condition with a bounded timeout, never a bare sleep.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from app.config import Config
from app.datadir import DataDir
from app.db import connect_readonly
from app.events import append_event
from app.writer import Writer
from tests.fake_ollama import FakeOllama, learning_sources
from workers.handoff import QueueHandoff
from workers.queue import huey
from workers.runner import JobRunner

REPO_ROOT = Path(__file__).resolve().parents[2]

# -- configuration and the in-process queue ---------------------------------------------------


def worker_config(config: Config, fake: FakeOllama, **queue: Any) -> Config:
    settings = {"backoff_base_seconds": 0.0, "max_attempts": 3, **queue}
    return config.replace(llm={"url": fake.url, "timeout_seconds": 10.0}, queue=settings)


def scripted_queue(config: Config, fake: FakeOllama, bind: Callable[[Config], Any],
                   **queue: Any) -> Config:
    """The test's config for workers, the queue bound to it, the model scripted."""
    cfg = worker_config(config, fake, **queue)
    bind(cfg)
    fake.responder = scripted_model
    return cfg


class InProcessWorker:
    """Call with a config to run that config's jobs in this process (binding the queue
    to it); calling again replaces the runner, as restarting the worker would."""

    def __init__(self) -> None:
        self.runner: JobRunner | None = None

    def __call__(self, config: Config) -> JobRunner:
        self.close()
        self.runner = JobRunner.start(config)
        return self.runner

    def close(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            runner.close()


@pytest.fixture
def bound_queue() -> Iterator[InProcessWorker]:
    """Call with a config to bind the queue and attach a job runner; closed afterwards."""
    worker = InProcessWorker()
    yield worker
    worker.close()


# The hand-off the front-ends make, on whichever storage the queue is bound to.
handoff = QueueHandoff(huey)


def drain(timeout: float = 20.0) -> int:
    """Run every queued and scheduled job in this thread until none is left; returns the count."""
    ran = 0
    deadline = time.monotonic() + timeout
    idle = threading.Event()
    while time.monotonic() < deadline:
        for task in huey.read_schedule():
            huey.enqueue(task)
        task = huey.dequeue()
        if task is not None:
            huey.execute(task)
            ran += 1
        elif huey.scheduled_count() == 0:
            return ran
        else:
            idle.wait(0.01)  # a retry is scheduled a moment ahead
    raise AssertionError(f"the queue was still busy after {timeout} s ({ran} jobs ran)")


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll `condition` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        pause.wait(interval)


def query(config: Config, sql: str, params: tuple = ()) -> list[tuple]:
    con = connect_readonly(DataDir.of(config).memory_db)
    try:
        return list(con.execute(sql, params))
    finally:
        con.close()


def scalar(config: Config, sql: str, params: tuple = ()) -> Any:
    return query(config, sql, params)[0][0]


# -- conversation and the scripted model -------------------------------------------------------


def add_turn(writer: Writer, config: Config, user_id: str, session_id: str, user_text: str,
             assistant_text: str = "Noted.") -> list[int]:
    """A chat turn: the person's message as typed, and the model's reply to it."""
    user = append_event(writer, config, user_id, session_id, "user", user_text, origin="typed")
    reply = append_event(writer, config, user_id, session_id, "assistant", assistant_text,
                         origin="model")
    return [user.id, reply.id]


_CODE = re.compile(r"code (alpha\d+)")
_NAME = re.compile(r"my name is (\w+)", re.IGNORECASE)
_EDITOR = re.compile(r"I use (\w+) as my editor")


def _props(body: dict) -> dict:
    fmt = body.get("format")
    if isinstance(fmt, dict):
        return fmt.get("properties", {})
    response_format = body.get("response_format") or {}
    return (response_format.get("json_schema") or {}).get("schema", {}).get("properties", {})


def scripted_model(body: dict) -> Any:
    """Replies derived from the request: facts from USER lines, fixed cards and diaries,
    each field the schema asks for.

    "code alphaN" → fact (fact, itemN, alphaN); "my name is X" → profile name;
    "I use X as my editor" → preference editor.
    """
    props = _props(body)
    reply: dict[str, Any] = {}
    if "facts" in props:
        # What the question quotes, or points at in the chat it continues.
        said = "\n".join(learning_sources(body))
        facts = [{"category": "fact", "key": f"item{code[5:]}", "value": code}
                 for code in _CODE.findall(said)]
        facts += [{"category": "preference", "key": "editor", "value": f"uses {editor}"}
                  for editor in _EDITOR.findall(said)]
        names = _NAME.findall(said)
        reply.update({"profile": {"name": names[-1]} if names else {}, "facts": facts})
    if "summary" in props:  # a card; asked with the facts when a chunk is learned at once
        reply.update({"summary": "The user and the assistant went through part of the work.",
                      "keywords": ["work", "progress"]})
    if "entry" in props:
        reply["entry"] = "The user worked through a list of codes with the assistant."
    return reply or None


# -- the real consumer in its own process ------------------------------------------------------


def consumer_env(config: Config) -> dict[str, str]:
    """HILO_* variables that make a child process load this test's config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env.update({
        "HILO_CONFIG": str(REPO_ROOT / "config.toml"),
        "HILO_DATA_DIR": str(config.data_dir),
        "HILO_LLM_URL": config.llm.url,
        "HILO_LLM_TIMEOUT_SECONDS": str(config.llm.timeout_seconds),
        "HILO_LLM_LEARNING_DEADLINE_SECONDS": str(config.llm.learning_deadline_seconds),
        "HILO_LOGGING_FORMAT": "json",
        "HILO_MEMORY_COMPACTION_THRESHOLD": str(config.memory.compaction_threshold),
        "HILO_MEMORY_CHUNK_SIZE": str(config.memory.chunk_size),
        "HILO_MEMORY_SESSION_IDLE_MINUTES": str(config.memory.session_idle_minutes),
    })
    for key in ("backend", "redis_url", "workers", "poll_max_delay", "max_attempts",
                "backoff_base_seconds", "chat_idle_seconds", "max_defer_seconds",
                "worker_nice"):
        env[f"HILO_QUEUE_{key.upper()}"] = str(getattr(config.queue, key))
    for key, value in dataclasses.asdict(config.learn).items():
        env[f"HILO_LEARN_{key.upper()}"] = str(value)
    for key, value in dataclasses.asdict(config.tools).items():
        env[f"HILO_TOOLS_{key.upper()}"] = (json.dumps(list(value)) if isinstance(value, tuple)
                                            else str(value))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def hilo_command(*argv: str) -> list[str]:
    """The installed `hilo` command (it imports this tree: consumer_env sets PYTHONPATH)."""
    return [str(Path(sys.executable).with_name("hilo")), *argv]


class Consumer:
    """`hilo worker` for this config, its log in `log_path`."""

    def __init__(self, config: Config, log_path: Path, *extra: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            hilo_command("worker", *extra),
            cwd=REPO_ROOT, env=consumer_env(config), stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def started(self) -> bool:
        return "worker.started" in self.log()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def terminate(self, timeout: float = 30) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        self._log.close()


@pytest.fixture
def consumers() -> Iterator[Callable[..., Consumer]]:
    """Start consumers with `consumers(config, log_path)`; any left running are killed."""
    started: list[Consumer] = []

    def start(config: Config, log_path: Path, *extra: str) -> Consumer:
        consumer = Consumer(config, log_path, *extra)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.close()


def read_only(config: Config) -> apsw.Connection:
    return connect_readonly(DataDir.of(config).memory_db)


def snapshot(config: Config) -> dict[str, list[tuple]]:
    """Every row of every table of the memory database, for before/after comparisons."""
    con = read_only(config)
    try:
        tables = [name for (name,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name")]
        return {table: sorted(con.execute(f'SELECT * FROM "{table}"'), key=repr) for table in tables}
    finally:
        con.close()
