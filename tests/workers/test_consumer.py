"""The real consumer in its own process: kill -9, SIGTERM under honcho, concurrent writers.

The fake model runs in this test process; the consumer talks to it over HTTP, exactly as
it would talk to Ollama. Every wait polls the database with a bounded timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import UTC
from pathlib import Path

import pytest

from app.config import Config
from app.events import insert_event, prepare_event
from app.writer import Writer
from tests.workers.support import (
    REPO_ROOT,
    consumer_env,
    handoff,
    hilo_command,
    query,
    scalar,
    scripted_queue,
    wait_until,
)
from workers.consumer import run_worker
from workers.queue import configure, failed_jobs

pytestmark = pytest.mark.slow

TURNS = 500
SESSIONS = 25
MODEL_LATENCY = 0.02
DEADLINE = 120.0


@pytest.fixture
def cfg(config, data_dir, fake_ollama) -> Config:
    # The jobs run in the consumer's process: this one only enqueues.
    cfg = scripted_queue(config, fake_ollama, configure, workers=4)
    fake_ollama.latency = MODEL_LATENCY
    return cfg


def queue_turns(cfg: Config, writer: Writer, turns: int = TURNS, sessions: int = SESSIONS) -> None:
    """Store `turns` turns (user + assistant) and hand each to the workers, as the API would."""
    per_session = turns // sessions
    for s in range(sessions):
        events = []
        for t in range(per_session):
            n = s * per_session + t
            events.append(prepare_event(cfg, "ana", f"s{s}", "user", f"Turn {n}: remember code alpha{n}"))
            events.append(prepare_event(cfg, "ana", f"s{s}", "assistant", f"Noted, turn {n}."))
        stored = writer.submit(lambda con: [insert_event(con, e).id for e in events])  # noqa: B023 — submit() waits for it
        for i in range(0, len(stored), 2):
            assert handoff.after_reply("ana", f"s{s}", stored[i:i + 2])


def distilled_turns(cfg: Config) -> int:
    return scalar(cfg, "SELECT count(*) FROM events WHERE role = 'user' AND distilled_at IS NOT NULL")


def all_done(cfg: Config, turns: int = TURNS) -> bool:
    if distilled_turns(cfg) < turns:
        return False
    threshold = cfg.memory.compaction_threshold
    return not query(cfg, "SELECT session_id FROM events WHERE compacted = 0 "
                          "GROUP BY session_id HAVING count(*) >= ?", (threshold,))


def assert_nothing_missing_or_doubled(cfg: Config, turns: int = TURNS) -> None:
    facts = query(cfg, "SELECT key, value, superseded_at FROM facts ORDER BY id")
    assert len(facts) == turns, "a fact is missing or was written twice"
    assert {key for key, _, _ in facts} == {f"item{n}" for n in range(turns)}
    assert all(superseded is None for _, _, superseded in facts)
    # Every compacted event belongs to exactly one card of its own chunk.
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 1 AND card_id IS NULL") == 0
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 1") == scalar(
        cfg, "SELECT coalesce(sum(event_count), 0) FROM context_cards WHERE level = 0")


def test_a_worker_killed_mid_run_loses_no_turn_and_doubles_none(cfg, writer, consumers, tmp_path):
    queue_turns(cfg, writer)
    first = consumers(cfg, tmp_path / "worker-1.log")
    wait_until(lambda: distilled_turns(cfg) >= 100, DEADLINE, "the first 100 turns")
    first.kill()  # SIGKILL: in-flight jobs and the writer's queued writes are gone
    assert distilled_turns(cfg) < TURNS, "the worker finished before the kill; queue more turns"

    second = consumers(cfg, tmp_path / "worker-2.log")
    wait_until(lambda: all_done(cfg), DEADLINE, "every turn distilled and compacted")
    assert_nothing_missing_or_doubled(cfg)
    assert second.terminate() == 0
    assert "worker.stopped" in second.log()


def test_sigterm_under_honcho_stops_gracefully_and_the_restart_finishes(cfg, writer, tmp_path):
    procfile = tmp_path / "Procfile.test"
    # `exec`: honcho then signals and waits for the worker itself, not a shell around it.
    procfile.write_text(f"worker: exec {' '.join(hilo_command('worker'))}\n")
    env = consumer_env(cfg)

    def honcho(log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "-f", str(procfile), "-d", str(REPO_ROOT)],
            cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)

    queue_turns(cfg, writer)
    first_log = tmp_path / "honcho-1.log"
    first = honcho(first_log)
    try:
        wait_until(lambda: distilled_turns(cfg) >= 100, DEADLINE, "the first 100 turns")
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    output = first_log.read_text()
    assert "worker.1 stopped (rc=0)" in output, output[-2000:]
    assert "SIGKILL" not in output
    assert "worker.stopped" in output

    second_log = tmp_path / "honcho-2.log"
    second = honcho(second_log)
    try:
        wait_until(lambda: all_done(cfg), DEADLINE, "every turn distilled and compacted")
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    finally:
        if second.poll() is None:
            second.kill()
    assert_nothing_missing_or_doubled(cfg)


def test_front_end_writes_while_the_worker_compacts_two_sessions(cfg, writer, consumers, tmp_path):
    turns_per_session = 100
    consumer = consumers(cfg, tmp_path / "worker.log")
    errors: list[BaseException] = []

    def chat(session: str, offset: int) -> None:
        try:
            for t in range(turns_per_session):
                n = offset + t
                ids = [writer.submit(lambda con, e=e: insert_event(con, e).id) for e in (
                    prepare_event(cfg, "ana", session, "user", f"Turn {n}: remember code alpha{n}"),
                    prepare_event(cfg, "ana", session, "assistant", f"Noted, turn {n}."))]
                handoff.after_reply("ana", session, ids)
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    front_end = [threading.Thread(target=chat, args=(f"s{i}", i * turns_per_session)) for i in range(2)]
    for thread in front_end:
        thread.start()
    for thread in front_end:
        thread.join()
    assert errors == []
    total = 2 * turns_per_session
    wait_until(lambda: all_done(cfg, total), DEADLINE, "both sessions distilled and compacted")
    assert_nothing_missing_or_doubled(cfg, total)
    assert scalar(cfg, "SELECT count(DISTINCT session_id) FROM context_cards") == 2
    log = consumer.log()
    assert "locked" not in log.lower() and "BusyError" not in log
    assert failed_jobs() == []
    assert consumer.terminate() == 0


def test_huey_consumer_runs_the_same_tasks(cfg, writer, tmp_path):
    log = tmp_path / "huey_consumer.log"
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("huey_consumer")), "workers.consumer.huey", "-k", "thread",
         "-w", "2", "-m", str(cfg.queue.poll_max_delay)],
        cwd=REPO_ROOT, env=consumer_env(cfg), stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        ids = [writer.submit(lambda con, e=e: insert_event(con, e).id) for e in (
            prepare_event(cfg, "ana", "s1", "user", "my name is Ana, remember code alpha1"),
            prepare_event(cfg, "ana", "s1", "assistant", "Hello Ana."))]
        handoff.after_reply("ana", "s1", ids)
        wait_until(lambda: query(cfg, "SELECT value FROM facts"), DEADLINE, "the fact")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert query(cfg, "SELECT value FROM profile") == [("Ana",)]


READ_THE_QUEUE = """
import os
import workers.consumer
from workers import jobs
queue = workers.consumer.huey  # as Huey's own tools load it
print(queue.pending_count(), queue.scheduled_count(), jobs.is_attached(), os.nice(0))
"""


def test_reading_the_queue_through_workers_consumer_starts_no_worker(config, tmp_path):
    (tmp_path / "fresh").mkdir()  # a data directory no worker has started on
    env = {**consumer_env(config), "HILO_DATA_DIR": str(tmp_path / "fresh"),
           "HILO_QUEUE_WORKER_NICE": "10"}
    read = subprocess.run([sys.executable, "-c", READ_THE_QUEUE], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)

    assert read.returncode == 0, read.stderr
    # No start-up sweep queued, no job runner, not niced, no memory made.
    assert read.stdout.split() == ["0", "0", "False", str(os.nice(0))]
    assert not (tmp_path / "fresh" / "memory.sqlite3").exists()


def test_a_process_pool_is_refused_with_the_reason(config, capsys):
    assert run_worker(config, worker_type="process") == 2
    assert "one per process" in capsys.readouterr().err


def test_honcho_brings_up_api_and_worker_and_a_turn_ends_with_a_fact(cfg, tmp_path):
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = consumer_env(cfg)
    env["HILO_SERVER_PORT"] = str(port)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    log = tmp_path / "honcho.log"
    honcho = subprocess.Popen(
        [sys.executable, "-m", "honcho", "start", "-f", str(REPO_ROOT / "Procfile"),
         "-d", str(REPO_ROOT)],
        cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url), DEADLINE, "the API to answer /health")
        reply = httpx.post(f"{url}/api/chat", timeout=30, json={
            "model": "gemma3:4b", "stream": False,
            "messages": [{"role": "user", "content": "Hello, my name is Ana. Remember code alpha42."}]})
        assert reply.status_code == 200, reply.text
        wait_until(lambda: query(cfg, "SELECT key, value FROM facts"), DEADLINE, "the turn's fact")
        assert query(cfg, "SELECT key, value FROM facts") == [("item42", "alpha42")]
        assert query(cfg, "SELECT value FROM profile WHERE key = 'name'") == [("Ana",)]
        honcho.send_signal(signal.SIGTERM)
        honcho.wait(timeout=30)
    finally:
        if honcho.poll() is None:
            honcho.kill()
    output = log.read_text()
    # (uvicorn re-raises the SIGTERM it handled, so api.1 reports rc=-15 after a clean stop.)
    assert "worker.1 stopped (rc=0)" in output and "SIGKILL" not in output, output[-3000:]


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_due_scheduled_task_runs_through_the_real_consumer(cfg, writer, consumers, tmp_path):
    from datetime import datetime, timedelta

    from app.tasks.store import add_task

    # Created an hour ago to run every 15 minutes: it is due, and runs once (coalesced).
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    added = add_task(writer, cfg, "every 15 minutes", "Summarise what I decided yesterday",
                     user_id="ana", now=an_hour_ago, source="cli")
    session = f"task:{added.task.id}"
    consumer = consumers(cfg, tmp_path / "worker.log")

    def replies() -> list[tuple]:
        return query(cfg, "SELECT role, content FROM events WHERE session_id = ? ORDER BY id",
                     (session,))

    def runs() -> tuple:
        return query(cfg, "SELECT next_run_at, last_run_at FROM scheduled_tasks WHERE id = ?",
                     (added.task.id,))[0]

    wait_until(lambda: len(replies()) >= 2, 30, "the task's turn in its session")
    assert replies()[0] == ("system", "Summarise what I decided yesterday")  # instructions, not the user
    assert replies()[1][0] == "assistant"
    # The turn's events are stored before the run is marked finished: wait for that too.
    wait_until(lambda: runs()[1] is not None, 30, "the run marked finished")
    next_run = runs()
    assert next_run[0] > datetime.now(UTC).strftime("%Y-%m-%dT%H:%M") and next_run[1]
    assert consumer.terminate() == 0


def test_the_worker_runs_niced_so_chat_turns_get_the_cpu_first(cfg, consumers, tmp_path):
    consumer = consumers(cfg.replace(queue={"worker_nice": 7}), tmp_path / "worker.log")
    wait_until(consumer.started, DEADLINE, "the worker started")
    expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    assert os.getpriority(os.PRIO_PROCESS, consumer.process.pid) == expected
    assert consumer.terminate() == 0


def test_a_one_shot_between_minute_ticks_runs_at_its_second(cfg, consumers, tmp_path):
    """ "in 30 seconds" runs then, not at the next whole minute (Huey's eta wakes the
    scheduler); the moment is chosen in the first half of a minute, so the next minute's
    tick is at least half a minute after it."""
    from datetime import datetime, timedelta

    from app.cli import hilo
    from app.timeutil import to_rfc3339

    consumer = consumers(cfg, tmp_path / "worker.log")
    wait_until(consumer.started, 30, "the worker's start")
    due = datetime.now(UTC) + timedelta(seconds=3)
    if due.second >= 27:
        due = due.replace(second=2) + timedelta(minutes=1)
    due = due.replace(microsecond=500_000)
    assert hilo.main(["tasks", "add", due.isoformat(), "Time to stretch", "--user", "ana"],
                     obj=cfg, standalone_mode=False) == 0
    task_id = scalar(cfg, "SELECT max(id) FROM scheduled_tasks")

    def started() -> str | None:
        done = query(cfg, "SELECT started_at FROM task_runs WHERE task_id = ? "
                          "AND status = 'done'", (task_id,))
        return done[0][0] if done else None

    wait = (due - datetime.now(UTC)).total_seconds() + 20
    ran_at = wait_until(started, wait, "the run, before the next minute's tick")
    assert ran_at >= to_rfc3339(due)  # and not before its time
    assert consumer.terminate() == 0


def test_hilo_worker_is_niced_before_it_imports_the_jobs(tmp_path):
    """honcho starts serve and worker together: the worker's imports (a second or more of
    CPU) run behind serve's start instead of beside it."""
    probe = ("import os, sys; seen = []; "
             "os.nice = lambda n: seen.append((n, 'workers.runner' in sys.modules)) or 0; "
             "from app.cli import hilo; "
             "hilo.main(['worker', '-k', 'process'], standalone_mode=False); print(seen)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True,
                         env={**os.environ, "HILO_DATA_DIR": str(tmp_path / "data")})
    assert out.stdout.strip().splitlines()[-1] == "[(10, False)]"
