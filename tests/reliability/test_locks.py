"""Queue locks belong to a process: a second worker leaves a live worker's locks alone,
a gone worker's locks are flushed, and a lock whose release failed (a full disk) is not
stuck until the worker restarts."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import apsw
import pytest

from app.config import Config
from tests.workers.support import (
    _props,
    add_turn,
    handoff,
    query,
    scalar,
    scripted_model,
    scripted_queue,
    wait_until,
)
from workers import jobs
from workers.locks import OWNER_SILENT_SECONDS, LockOwner, this_process
from workers.queue import (
    configure,
    exclusive,
    flush_stale_locks,
    held_locks,
    huey,
    lock_key,
    release_lock,
    try_lock,
)

DEADLINE = 60.0


def dead_pid() -> int:
    """The pid of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=30)
    return process.pid


def plant_lock(name: str, owner: LockOwner, taken_at: float = 0.0) -> None:
    huey.put(lock_key(name), owner.to_value(taken_at))


@pytest.fixture
def queue(config, data_dir) -> Config:
    configure(config)
    return config


def test_only_the_locks_of_gone_owners_are_flushed(queue):
    here = socket.gethostname()
    assert try_lock("compact:ana:live")  # this process: alive
    plant_lock("compact:ana:dead", LockOwner(here, dead_pid(), "gone"))
    huey.put(lock_key("compact:ana:legacy"), "1")  # from before owners were recorded
    elsewhere_fresh = LockOwner("other-host", 4242, "fresh")
    elsewhere_silent = LockOwner("other-host", 4343, "silent")
    plant_lock("embed:bo", elsewhere_fresh)
    plant_lock("embed:cy", elsewhere_silent)
    huey.put(elsewhere_fresh.beat_key, time.time())
    huey.put(elsewhere_silent.beat_key, time.time() - OWNER_SILENT_SECONDS - 1)

    assert flush_stale_locks() == ["compact:ana:dead", "compact:ana:legacy", "embed:cy"]
    assert [lock.name for lock in held_locks()] == ["compact:ana:live", "embed:bo"]
    assert all(lock.owner_alive for lock in held_locks())
    assert not huey.storage.has_data_for_key(elsewhere_silent.beat_key)
    release_lock("compact:ana:live")


def test_a_gone_owners_lock_is_taken_over_but_a_live_ones_is_not(queue):
    plant_lock("compact:ana:s1", LockOwner(socket.gethostname(), dead_pid(), "gone"))
    with exclusive("compact:ana:s1") as mine:
        assert mine
        assert held_locks()[0].owner == this_process().key
        with exclusive("compact:ana:s1") as again:  # another thread of this process
            assert not again
    assert held_locks() == []


def test_a_failed_release_does_not_keep_the_lock_until_restart(queue, monkeypatch):
    real_delete = huey.storage.delete_data

    def disk_full(key):
        raise apsw.FullError("database or disk is full")

    with pytest.raises(RuntimeError):
        with exclusive("compact:ana:s1") as mine:
            assert mine
            monkeypatch.setattr(huey.storage, "delete_data", disk_full)
            raise RuntimeError("the commit failed")
    assert [lock.name for lock in held_locks()] == ["compact:ana:s1"]  # could not delete

    monkeypatch.setattr(huey.storage, "delete_data", real_delete)  # space freed
    assert try_lock("embed:ana")  # any later lock call retries the release
    assert [lock.name for lock in held_locks()] == ["embed:ana"]
    release_lock("embed:ana")
    # And the session's lock can be taken again at once, without a restart.
    assert try_lock("compact:ana:s1")
    release_lock("compact:ana:s1")


def test_the_process_can_take_back_its_own_lock_whose_release_failed(queue, monkeypatch):
    assert try_lock("compact:ana:s2")
    monkeypatch.setattr(huey.storage, "delete_data",
                        lambda key: (_ for _ in ()).throw(apsw.FullError("disk is full")))
    release_lock("compact:ana:s2")
    assert try_lock("compact:ana:s2")  # ours, and no thread holds it
    monkeypatch.undo()
    release_lock("compact:ana:s2")
    assert held_locks() == []


# -- two real workers ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_worker_leaves_the_first_ones_live_locks_alone(
        config, data_dir, fake_ollama, writer, consumers, tmp_path):
    cfg = scripted_queue(config, fake_ollama, configure, workers=2)
    compacting = threading.Event()
    go_on = threading.Event()
    summaries = []
    count_lock = threading.Lock()

    def responder(body: dict):
        if "summary" in _props(body):
            with count_lock:
                summaries.append(1)
                first = len(summaries) == 1
            if first:
                compacting.set()
                # The first worker holds the session's lock until the test lets go; the
                # bound only ends a test that died (each wait below may take DEADLINE).
                go_on.wait(10 * DEADLINE)
        return scripted_model(body)

    fake_ollama.responder = responder
    for n in range(cfg.memory.compaction_threshold // 2 + 2):  # over the compaction threshold
        ids = add_turn(writer, cfg, "ana", "s1", f"Turn {n}: remember code alpha{n}")
        handoff.after_reply("ana", "s1", ids)

    first = consumers(cfg, tmp_path / "worker-1.log")
    wait_until(compacting.is_set, DEADLINE, "the first worker to compact")
    # The session's learning lock: distill and compact both learn a session under it.
    [lock] = [lock for lock in held_locks() if lock.name.startswith("learn:")]
    assert lock.owner.split(":")[1] == str(first.process.pid)

    second = consumers(cfg, tmp_path / "worker-2.log")
    try:
        wait_until(second.started, DEADLINE, "the second worker to start")
        assert "stale_locks_flushed" not in second.log()
        assert [held.owner for held in held_locks() if held.name == lock.name] == [lock.owner]
        for _ in range(3):  # the second worker takes some of these; the lock stops it
            jobs.compact("ana", "s1")
        wait_until(lambda: huey.pending_count() == 0, DEADLINE, "the compact jobs to be taken")
    finally:
        go_on.set()
    wait_until(lambda: scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 0")
               < cfg.memory.compaction_threshold, DEADLINE, "the session compacted")
    wait_until(lambda: not [h for h in held_locks() if h.name.startswith("learn:")],
               DEADLINE, "the learning lock released")
    cards = scalar(cfg, "SELECT count(*) FROM context_cards WHERE level = 0")
    assert len(summaries) == cards, "a chunk was summarised by both workers"
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 1") == scalar(
        cfg, "SELECT coalesce(sum(event_count), 0) FROM context_cards WHERE level = 0")
    assert query(cfg, "SELECT count(DISTINCT card_id) FROM events WHERE compacted = 1")[0][0] == cards
    assert second.terminate() == 0 and first.terminate() == 0
