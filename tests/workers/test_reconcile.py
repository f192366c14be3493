"""The reconcile sweep: the database says what is undone; a lost task is redone, not lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.memory import end_session
from tests.workers.support import (
    add_turn,
    drain,
    query,
    read_only,
    scalar,
    scripted_queue,
    snapshot,
)
from workers import jobs
from workers.queue import huey
from workers.reconcile import default_grace_seconds, find_undone_work


def later() -> datetime:
    """Past the grace period of what a test stores now (not of when the module loaded: the
    suite may take longer than the grace)."""
    return datetime.now(UTC) + timedelta(minutes=5)


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    cfg = scripted_queue(config, fake_ollama, bound_queue)
    return cfg


def test_events_never_distilled_are_found_after_the_grace_period(cfg, writer):
    ids = add_turn(writer, cfg, "ana", "s1", "Remember code alpha1")
    assert find_undone_work(writer, cfg).distill == []  # still within grace: its task may be queued
    assert find_undone_work(writer, cfg, now=later()).distill == [("ana", "s1", ids)]


def test_undistilled_events_are_batched_per_session(cfg, writer):
    for n in range(15):
        add_turn(writer, cfg, "ana", "s1", f"turn {n}")
    add_turn(writer, cfg, "bo", "s9", "hello")
    work = find_undone_work(writer, cfg, grace_seconds=0, now=later())
    assert [(u, s, len(ids)) for u, s, ids in work.distill] == [
        ("ana", "s1", 20), ("ana", "s1", 10), ("bo", "s9", 2)]


def test_lost_distill_tasks_are_redone_from_the_database(cfg, writer):
    for n in range(3):
        add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")  # no task ever queued
    jobs.reconcile(0.0)
    drain()
    assert sorted(v for (v,) in query(cfg, "SELECT value FROM facts")) == ["alpha0", "alpha1", "alpha2"]


def test_sessions_over_the_threshold_are_found(cfg, writer):
    for n in range(cfg.memory.compaction_threshold // 2):
        add_turn(writer, cfg, "ana", "s1", f"turn {n}")
    add_turn(writer, cfg, "ana", "s2", "short")
    assert find_undone_work(writer, cfg, now=later()).compact == [("ana", "s1")]


def test_ended_sessions_without_a_diary_are_found(cfg, writer):
    add_turn(writer, cfg, "ana", "s1", "hello")
    add_turn(writer, cfg, "ana", "s2", "hello")
    writer.submit(lambda con: end_session(con, "ana", "s1"))
    assert find_undone_work(writer, cfg, now=later()).diary == [("ana", "s1")]
    jobs.diary("ana", "s1")
    drain()
    assert find_undone_work(writer, cfg, now=later()).diary == []


def test_idle_sessions_are_closed_and_get_their_diary(cfg, writer):
    add_turn(writer, cfg, "ana", "s1", "hello")
    much_later = datetime.now(UTC) + timedelta(minutes=cfg.memory.session_idle_minutes + 1)
    work = find_undone_work(writer, cfg, now=much_later)
    assert work.closed == [("ana", "s1")] and ("ana", "s1") in work.diary
    assert scalar(cfg, "SELECT ended_at IS NOT NULL FROM sessions") == 1
    assert find_undone_work(writer, cfg, now=much_later).closed == []


def test_a_clean_database_has_nothing_to_redo_and_reconciling_twice_changes_nothing(cfg, writer):
    for n in range(6):
        ids = add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")
        jobs.distill("ana", "s1", ids)
    jobs.diary("ana", "s1")
    drain()
    assert not find_undone_work(writer, cfg, now=later())
    before = snapshot(cfg)
    find_undone_work(writer, cfg, now=later())
    assert snapshot(cfg) == before


def test_the_default_grace_covers_the_longest_backoff(config):
    assert default_grace_seconds(config) == 30 + 2 + 4 + 8 + 16


def test_the_sweep_queries_use_indexes(cfg, writer):
    add_turn(writer, cfg, "ana", "s1", "hello")
    con = read_only(cfg)
    try:
        plan = " ".join(row[-1] for row in con.execute(
            "EXPLAIN QUERY PLAN SELECT user_id, session_id, id FROM events INDEXED BY "
            "events_undistilled WHERE distilled_at IS NULL AND created_at <= ? ORDER BY user_id, id",
            ("z",)))
        assert "events_undistilled" in plan and "TEMP B-TREE" not in plan
        plan = " ".join(row[-1] for row in con.execute(
            "EXPLAIN QUERY PLAN SELECT 1 FROM events e WHERE e.user_id = ? AND e.session_id = ? "
            "AND e.compacted = 0 LIMIT 8", ("ana", "s1")))
        assert "events_by_session" in plan
    finally:
        con.close()


def test_worker_start_flushes_stale_locks_and_reconciles_without_grace(cfg, writer, bound_queue):
    import socket
    import subprocess
    import sys

    from workers.locks import LockOwner
    from workers.queue import lock_key

    ids = add_turn(writer, cfg, "ana", "s1", "Remember code alpha5")
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait(timeout=30)
    # Left by a killed worker: its owner's process is gone.
    huey.put(lock_key("compact:ana:s1"), LockOwner(socket.gethostname(), killed.pid, "gone").to_value(0))
    bound_queue.runner.prepare()
    assert not huey.storage.has_data_for_key(lock_key("compact:ana:s1"))
    assert bound_queue.runner.config == cfg
    drain()
    assert query(cfg, "SELECT value, source_event_id FROM facts") == [("alpha5", ids[0])]
