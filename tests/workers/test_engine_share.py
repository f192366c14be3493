"""Learning keeps to its share of the engine: on the chat's own model server, learning's
engine seconds stay within `[learn] engine_share` of the chat's. A learning call that
would pass it is not made; the session's turns wait for credit (the chat's next turns
give it) and are learned then, or by rule once they have waited `[learn]
share_wait_minutes`; nothing is lost, and the owner reads one line, not an error."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

import pytest

from app.events import append_event, mark_distilled
from app.learn.engine_time import record_call, share_check
from app.learn.reading import reading
from app.model.usage import ANSWERED, CallBudget, EngineTime, JsonCall
from app.ops.doctor import Status, check_learning
from app.timeutil import utc_now
from tests.workers.support import (
    REPO_ROOT,
    add_turn,
    consumer_env,
    handoff,
    hilo_command,
    query,
    scalar,
    scripted_queue,
    wait_until,
)
from workers.inspection import QueueView
from workers.queue import configure, huey

HOLDING = "learning is holding to its share (0.5× the chat's engine time): 2 turns wait"


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    # No person to wait for: what holds a job here is the share alone.
    return scripted_queue(config.replace(queue={"chat_idle_seconds": 0.0},
                                         learn={"engine_share": 0.5}), fake_ollama, bound_queue)


def chat_took(writer, cfg, seconds: float) -> None:
    """A chat turn, in a session learned already, whose reply took the engine `seconds`
    (its turn record)."""
    said = append_event(writer, cfg, "bo", "chat", "user", "Hello",
                        origin="typed")
    writer.submit(lambda con: mark_distilled(con, [said.id]))
    writer.submit(lambda con: con.execute(
        "INSERT INTO turn_records (user_id, session_id, event_id, created_at, model, tokens, "
        "budget, record_json, engine_ms, engine_clock) VALUES ('bo', 'chat', ?, ?, 'gemma3:4b', "
        "0, 0, '{}', ?, 'engine')", (said.id, utc_now(), seconds * 1000)))


def learning_took(writer, seconds: float, job: str = "learn") -> None:
    """A learning call that took the engine `seconds`."""
    record_call(writer, JsonCall(job, "http://127.0.0.1:1", "gemma3:4b", time.time(),
                                 seconds * 1000, ANSWERED, CallBudget(500, 120.0),
                                 engine=EngineTime(None, None, seconds * 1000)))
    writer.submit(lambda con: None)  # the row is queued: committed once this one is


def learning_requests(fake) -> int:
    """Requests for JSON the model server received: learning calls."""
    return sum(1 for path in ("/api/chat", "/api/generate") for body in fake.bodies(path)
               if isinstance(body, dict) and body.get("format"))


def converse(writer, cfg) -> None:
    """Two turns of Ana's, each handed to the queue as a front-end does."""
    for said in ("My name is Dana", "Remember that my locker code is 4512"):
        handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", said))


def run_due_jobs() -> None:
    """What is due now runs once (a job held for later is put back on the schedule)."""
    for _ in range(huey.pending_count()):
        task = huey.dequeue()
        if task is not None:
            huey.execute(task)


def run_later_jobs() -> None:
    """The scheduled jobs run as if their time had come."""
    later = huey._get_timestamp() + timedelta(hours=1)
    run_due_jobs()  # a job put back for later goes to the schedule
    for task in huey.read_schedule(later):
        huey.execute(task, later)


def undistilled(cfg) -> int:
    return scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL")


def test_the_next_call_is_counted_at_its_jobs_typical_cost(cfg, writer):
    chat_took(writer, cfg, 10)
    learning_took(writer, 2, job="distill")
    with reading(writer) as con:  # 2 s spent, a distill costs 2 s: 4 of the 5 s allowed
        assert share_check(con, 0.5, "distill").allows
    learning_took(writer, 2, job="distill")
    with reading(writer) as con:  # 4 s spent: the next 2 s would pass 5
        check = share_check(con, 0.5, "distill")
    assert (check.learning_engine_s, check.next_call_s, check.allows) == (4.0, 2.0, False)


def test_no_learning_call_is_made_while_the_share_is_spent_and_the_owner_reads_one_line(
        cfg, writer, fake_ollama):
    chat_took(writer, cfg, 10)
    learning_took(writer, 6)  # 6 s of learning against a 5 s share
    converse(writer, cfg)
    run_due_jobs()

    assert learning_requests(fake_ollama) == 0
    assert undistilled(cfg) == 4  # the turns wait, none lost
    # What they state outright is kept by rule at once, the turns left for the model.
    assert query(cfg, "SELECT value FROM profile WHERE user_id = 'ana'") == [("Dana",)]
    assert scalar(cfg, "SELECT count(*) FROM facts WHERE value LIKE '%locker code is 4512%'") == 1
    status = QueueView(cfg).status()
    jobs = status.by_task["distill"]
    assert jobs.pending + jobs.scheduled == 1  # the session's one job, to come back later
    assert status.learning.hold.line() == HOLDING
    doctor = check_learning(cfg)
    assert (doctor.status, doctor.detail) == (Status.OK, HOLDING)


def test_turns_held_for_the_share_are_learned_once_the_chat_gives_credit(cfg, writer,
                                                                        fake_ollama):
    chat_took(writer, cfg, 10)
    learning_took(writer, 6)
    converse(writer, cfg)
    run_due_jobs()
    assert learning_requests(fake_ollama) == 0

    chat_took(writer, cfg, 20)  # the person chats on: 15 s allowed, 6 spent, a call costs 6
    run_later_jobs()

    assert learning_requests(fake_ollama) >= 1
    assert undistilled(cfg) == 0
    assert query(cfg, "SELECT value FROM profile WHERE user_id = 'ana'") == [("Dana",)]
    assert QueueView(cfg).status().learning.hold is None


def test_turns_that_waited_past_the_bound_are_learned_by_rule(config, data_dir, fake_ollama,
                                                              bound_queue, writer):
    cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 0.0},
                                        learn={"engine_share": 0.5, "share_wait_minutes": 0.0}),
                         fake_ollama, bound_queue)
    chat_took(writer, cfg, 10)
    learning_took(writer, 6)
    converse(writer, cfg)
    run_due_jobs()

    assert learning_requests(fake_ollama) == 0
    assert undistilled(cfg) == 0  # learned, by rule: nothing waits past the bound
    workers = {row[0] for row in query(
        cfg, "SELECT worker FROM memory_log WHERE user_id = 'ana'")}
    assert workers == {"distill-rules"}
    assert query(cfg, "SELECT value FROM profile WHERE user_id = 'ana'") == [("Dana",)]
    assert QueueView(cfg).status().learning.hold is None
    assert huey.scheduled_count() == 0  # nothing left to come back for


def test_a_session_ended_while_the_share_is_spent_gets_its_diary_entry_later(cfg, writer,
                                                                           fake_ollama):
    chat_took(writer, cfg, 10)
    learning_took(writer, 6, job="diary")
    add_turn(writer, cfg, "ana", "s1", "We fixed the staging deploy today")
    handoff.session_ended("ana", "s1")
    run_due_jobs()
    assert learning_requests(fake_ollama) == 0
    assert scalar(cfg, "SELECT count(*) FROM diary") == 0
    jobs = QueueView(cfg).status().by_task["diary"]
    assert jobs.pending + jobs.scheduled == 1

    chat_took(writer, cfg, 20)
    run_later_jobs()
    assert query(cfg, "SELECT is_extractive FROM diary WHERE user_id = 'ana'") == [(0,)]


@pytest.mark.slow
def test_the_real_consumer_holds_to_the_share_says_so_in_one_line_then_learns_by_rule(
        config, data_dir, fake_ollama, consumers, tmp_path, writer):
    cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 0.0},
                                        learn={"engine_share": 0.5, "share_wait_minutes": 0.1}),
                         fake_ollama, configure)
    chat_took(writer, cfg, 10)
    learning_took(writer, 6)
    converse(writer, cfg)
    consumer = consumers(cfg, tmp_path / "worker.log")
    env = consumer_env(cfg)

    def status_line() -> str | None:
        status = subprocess.run(hilo_command("queue", "status"), cwd=REPO_ROOT, env=env,
                                capture_output=True, text=True, check=True).stdout
        return next((line for line in status.splitlines() if "holding to its share" in line),
                    None)

    assert wait_until(status_line, 30, "the holding line") == HOLDING
    # Six seconds on, the turns have waited past the bound: learned by rule, none lost.
    wait_until(lambda: undistilled(cfg) == 0, 60, "the held turns learned by rule")
    assert learning_requests(fake_ollama) == 0
    assert query(cfg, "SELECT value FROM profile WHERE user_id = 'ana'") == [("Dana",)]
    assert status_line() is None
    assert consumer.terminate() == 0
