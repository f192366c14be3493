"""A full disk (SQLite's own size limit on the server's write connection): every request
gets a JSON error with what to do, the connection stays usable, nothing half-stored, and
once there is room again the server works without a restart."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from app.ops import doctor
from app.ops.doctor import LOCK_STUCK_MODEL_CALLS, Status, check_queue_locks
from tests.api.support import HiloServer
from workers.inspection import QueueUnavailable, QueueView
from workers.locks import LockOwner, this_process
from workers.queue import configure, huey, lock_key, release_lock, try_lock

MODEL = "gemma3:4b"
ROOM = 1 << 30  # pages: SQLite's default limit


def chat(server: HiloServer, text: str, path: str = "/api/chat"):
    body = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": text}]}
    return server.client().post(path, json=body, headers={"X-Hilo-Session": "s1"})


def limit_pages(server: HiloServer, pages: int | None) -> None:
    """Cap the database at its current size (None: lift the cap), as a full disk would.
    The writer's thread sets it: its connection is used by one thread at a time."""
    def limit(con) -> None:
        cap = pages if pages is not None else con.execute("PRAGMA page_count").fetchone()[0]
        con.execute(f"PRAGMA max_page_count = {cap}")

    server.app.state.service.writer.submit(limit)


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
def test_a_full_disk_answers_507_in_json_and_recovers_without_restart(hilo, path):
    assert chat(hilo, "remember code alpha1", path).status_code == 200
    before = hilo.events("s1")
    limit_pages(hilo, None)

    response = chat(hilo, "x" * 200_000, path)
    assert response.status_code == 507, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers.get("connection") != "close"
    assert response.headers["retry-after"]
    message = (response.json()["error"]["message"] if path.startswith("/v1/")
               else response.json()["error"])
    assert "disk is full" in message and "free space" in message
    assert "Traceback" not in response.text
    # The same keep-alive connection still answers (health: with what the server cannot do).
    assert hilo.client().get("/health").status_code == 503
    assert hilo.events("s1") == before  # nothing half-stored

    limit_pages(hilo, ROOM)  # space freed
    assert chat(hilo, "remember code alpha2", path).status_code == 200
    assert len(hilo.events("s1")) == len(before) + 2


def test_health_says_the_disk_is_full_with_a_503_until_there_is_room_again(hilo):
    assert hilo.client().get("/health").json()["status"] == "ok"
    limit_pages(hilo, None)

    health = hilo.client().get("/health")
    assert health.status_code == 503  # a load balancer sends no more chats here
    assert health.json()["status"] == "error"
    assert "disk" in health.json()["error"] and "full" in health.json()["error"]
    assert "free space" in health.json()["error"]
    assert chat(hilo, "x" * 200_000).status_code == 507  # as health said

    limit_pages(hilo, ROOM)  # space freed: no write needed to notice
    health = hilo.client().get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_health_says_the_database_cannot_be_written_with_a_503(hilo):
    writer = hilo.app.state.service.writer
    writer.submit(lambda con: con.execute("PRAGMA query_only = ON"))  # as a read-only mount

    health = hilo.client().get("/health")
    assert health.status_code == 503
    assert "cannot be written" in health.json()["error"]
    assert chat(hilo, "hello").status_code == 503  # as health said


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
def test_a_streamed_reply_the_full_disk_cannot_store_ends_with_an_error_line(hilo, path):
    def fill_the_disk(body):  # once the user's message is stored: the model is asked
        limit_pages(hilo, None)
        return "x" * 200_000  # a reply that needs new pages

    hilo.fake.responder = fill_the_disk
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with hilo.client().stream("POST", path, json=body,
                              headers={"X-Hilo-Session": "s1"}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]

    last = json.loads(lines[-1].removeprefix("data: "))
    message = last["error"]["message"] if path.startswith("/v1/") else last["error"]
    assert "disk is full" in message and "free space" in message
    assert hilo.events("s1") == [("user", "hi")]  # the message was kept


# -- doctor ---------------------------------------------------------------------------------


def test_doctor_flags_locks_of_gone_workers_and_locks_held_too_long(config, data_dir):
    configure(config)
    assert try_lock("embed:ana")
    assert [c.status for c in check_queue_locks(config)] == [Status.OK]

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    huey.put(lock_key("compact:ana:s1"),
             LockOwner(socket.gethostname(), gone.pid, "gone").to_value(time.time()))
    old = time.time() - LOCK_STUCK_MODEL_CALLS * config.llm.timeout_seconds - 1
    huey.put(lock_key("compact:ana:s2"), this_process().to_value(old))
    checks = {c.status: c for c in check_queue_locks(config)}
    assert "compact:ana:s1" in checks[Status.WARN].detail
    assert "compact:ana:s2" in checks[Status.FAIL].detail
    release_lock("embed:ana")


def test_doctor_says_to_free_space_when_the_queue_cannot_write_on_a_full_disk(config, data_dir,
                                                                              monkeypatch):
    def full(self, now=None):
        raise QueueUnavailable("cannot read queue.sqlite3: database or disk is full")

    monkeypatch.setattr(QueueView, "status", full)
    [check] = doctor.check_queue(config)
    assert "free disk space" in check.fix and "aside" not in check.fix
