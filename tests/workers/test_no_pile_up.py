"""No pile-up: at most one learning job (and one diary job) per session waits, the
reconcile sweep enqueues nothing for a session whose job waits or runs, and a model that
never answers leaves a bounded queue and one clear line in `hilo queue status` and `hilo
doctor`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import httpx
import pytest

from tests.api.support import HiloServer
from tests.fake_ollama import Fault
from tests.workers.support import (
    REPO_ROOT,
    add_turn,
    consumer_env,
    drain,
    handoff,
    hilo_command,
    query,
    scalar,
    scripted_model,
    scripted_queue,
    wait_until,
)
from workers import waiting
from workers.chat_activity import ChatActivity
from workers.inspection import QueueView
from workers.locks import LockOwner
from workers.queue import configure, exclusive, huey


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    # The person is always "just back": every learning job waits for them.
    return scripted_queue(config.replace(queue={"chat_idle_seconds": 3600.0}), fake_ollama,
                          bound_queue)


def model_jobs(cfg) -> dict[str, int]:
    """Jobs waiting in the queue or its schedule, by task."""
    status = QueueView(cfg).status()
    return {name: counts.pending + counts.scheduled for name, counts in status.by_task.items()
            if counts.pending + counts.scheduled}


def run_due_jobs() -> None:
    """Run what is due now, once each (the deferred ones re-enqueue themselves for later)."""
    for _ in range(huey.pending_count()):
        task = huey.dequeue()
        if task is not None:
            huey.execute(task)


def test_a_conversation_leaves_one_learning_job_waiting_for_its_session(cfg, writer):
    chat = ChatActivity(huey, cfg.llm.url)  # the front-end's requests to the model
    for n in range(12):
        chat.begin()
        ids = add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")
        chat.end()
        handoff.after_reply("ana", "s1", ids)
        run_due_jobs()  # the job sees the chat and waits (re-enqueued for later)
    handoff.after_reply("bo", "s2", add_turn(writer, cfg, "bo", "s2", "Hi"))
    assert model_jobs(cfg).get("distill") == 2  # one per session, not one per turn


def test_the_sweep_enqueues_nothing_for_a_session_whose_learning_waits_or_runs(cfg, writer,
                                                                             bound_queue):
    runner = bound_queue.runner
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha1"))
    add_turn(writer, cfg, "bo", "s2", "Remember code alpha2")  # its job was lost
    with exclusive(waiting.lock_name("learn", "cy", "s3")):  # learning it right now
        add_turn(writer, cfg, "cy", "s3", "Remember code alpha3")
        for _ in range(23):  # a sweep a minute, for 23 minutes
            runner.reconcile(0.0)
        assert model_jobs(cfg).get("distill") == 2  # ana's, already waiting, and bo's
        waiting_for = {tuple(j.args[:2]) for j in QueueView(cfg).pending() if j.name == "distill"}
        assert waiting_for == {("ana", "s1"), ("bo", "s2")}


def test_a_waiting_job_that_was_lost_is_found_and_its_work_enqueued_again(cfg, writer,
                                                                           bound_queue):
    ids = add_turn(writer, cfg, "ana", "s1", "Remember code alpha1")
    handoff.after_reply("ana", "s1", ids)
    assert huey.dequeue() is not None  # taken by a worker killed before it ran: gone
    assert "distill" not in model_jobs(cfg)
    bound_queue.runner.reconcile(0.0)  # a worker's start: no grace
    assert model_jobs(cfg).get("distill") == 1


def test_a_starting_worker_leaves_a_job_another_running_worker_just_took(cfg, writer,
                                                                        bound_queue):
    other = LockOwner(socket.gethostname(), os.getppid(), "other")  # a live process
    huey.put(other.beat_key, time.time())  # another worker runs beside this one
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha1"))
    assert huey.dequeue() is not None  # it just took the job: not queued, no lock yet
    bound_queue.runner.reconcile(0.0)  # this worker's start
    assert "distill" not in model_jobs(cfg)  # not queued again behind the other's back
    assert [w.session_id for w in waiting.waiting_jobs(huey)] == ["s1"]


def test_a_learning_job_that_starts_lets_the_next_turn_enqueue_one(cfg, writer):
    cfg = cfg.replace(queue={"chat_idle_seconds": 0.0})
    configure(cfg)
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha1"))
    drain()
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha2"))
    assert model_jobs(cfg).get("distill") == 1
    drain()
    assert sorted(v for (v,) in query(cfg, "SELECT value FROM facts")) == ["alpha1", "alpha2"]


def never_answers_learning(body: dict) -> object:
    """A model server that chats but never answers a learning call."""
    wants_json = body.get("format") or body.get("response_format")
    return Fault.hang() if wants_json else scripted_model(body)


@pytest.mark.slow
def test_a_model_that_never_answers_leaves_a_bounded_queue_and_one_clear_line(
        config, data_dir, fake_ollama, consumers, tmp_path):
    # The fake's chats report under a millisecond of engine time, so learning's share of
    # it ([learn] engine_share) would hold every session after the first cut call; this
    # is the dead model's test (the share's: test_engine_share.py), so the share is lifted.
    cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": 0.3},
                                        llm={"learning_deadline_seconds": 1.0},
                                        learn={"engine_share": 1_000_000.0}),
                         fake_ollama, configure)
    fake_ollama.responder = never_answers_learning
    consumer = consumers(cfg, tmp_path / "worker.log")
    server = HiloServer(cfg, fake_ollama).start()
    most_waiting = 0
    try:
        with httpx.Client(timeout=30) as client:
            for session in ("s1", "s2"):
                history: list[dict] = []
                for n in range(3):
                    history.append({"role": "user",
                                    "content": f"Remember that my {session} code is alpha{n}"})
                    reply = client.post(f"{server.url}/api/chat", headers={"X-Hilo-Session": session},
                                        json={"model": "gemma3:4b", "messages": history,
                                              "stream": False}).json()
                    history.append(reply["message"])

        def learned_by_rule() -> bool:
            nonlocal most_waiting
            jobs = model_jobs(cfg)
            most_waiting = max(most_waiting, jobs.get("distill", 0) + jobs.get("compact", 0))
            return scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 0

        wait_until(learned_by_rule, 60, "every turn learned, by rule")
    finally:
        server.stop()
    assert most_waiting <= 2  # a job per session at most, however long the calls hang
    calls = query(cfg, "SELECT outcome FROM learning_calls")
    assert calls and {outcome for (outcome,) in calls} == {"past_deadline"}
    facts = {v for (v,) in query(cfg, "SELECT value FROM facts")}
    assert facts == {f"my {s} code is alpha{n}" for s in ("s1", "s2") for n in range(3)}

    env = consumer_env(cfg)
    status = subprocess.run(hilo_command("queue", "status"), cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, check=True).stdout
    [line] = [line for line in status.splitlines() if line.startswith("learning:")]
    assert f"the model at {fake_ollama.url}" in line and "has answered none" in line
    assert f"({len(calls)} calls past their 1 s deadline); chats still work" in line
    as_json = json.loads(subprocess.run(hilo_command("queue", "status", "--json"), cwd=REPO_ROOT,
                                        env=env, capture_output=True, text=True,
                                        check=True).stdout)
    assert as_json["learning"]["stall"]["line"] == line
    doctor = subprocess.run(hilo_command("doctor"), cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True).stdout
    assert sum(line in row for row in doctor.splitlines()) == 1
    assert consumer.terminate() == 0
