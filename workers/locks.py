"""Who holds a queue lock, and whether that holder is still alive.

A lock (workers/queue.py) is a key in Huey's key-value store; its value names the
process that took it — host, pid and a start id drawn when the process first took a
lock — and when. A lock is stale only when that process is gone:

- on this host, its pid no longer exists (`os.kill(pid, 0)`; a pid reused since is
  taken for the owner, which errs on the safe side: the lock is kept);
- on another host (Redis shared by machines), its owner heartbeat — a key each worker
  process refreshes every OWNER_BEAT_SECONDS from its own thread, busy or idle — is
  older than OWNER_SILENT_SECONDS or missing.

A second worker starting next to a live one therefore leaves the live one's locks alone.
Locks from before owners were recorded (value "1") have no owner: stale, as before.

This module holds no Huey instance; the queue passes it the values it reads.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["OWNER_BEAT_PREFIX", "OWNER_BEAT_SECONDS", "OWNER_SILENT_SECONDS", "LockOwner",
           "this_process", "pid_exists", "owner_alive", "OwnerBeat"]

OWNER_BEAT_PREFIX = "hilo.worker.owner."
OWNER_BEAT_SECONDS = 5.0
# An owner on another host that has not beaten for this long is gone (12 missed beats).
OWNER_SILENT_SECONDS = 60.0


@dataclass(frozen=True)
class LockOwner:
    """The process that took a lock."""

    host: str
    pid: int
    start_id: str

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}:{self.start_id}"

    @property
    def beat_key(self) -> str:
        return OWNER_BEAT_PREFIX + self.key

    def to_value(self, taken_at: float) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "start": self.start_id, "at": taken_at}

    @classmethod
    def from_value(cls, value: Any) -> LockOwner | None:
        """The owner a lock's value names; None for a value without one (legacy "1")."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(str(value["host"]), int(value["pid"]), str(value["start"]))
        except (KeyError, TypeError, ValueError):
            return None


_owner_lock = threading.Lock()
_owner: LockOwner | None = None


def this_process() -> LockOwner:
    """This process as a lock owner; a forked child gets its own start id."""
    global _owner
    with _owner_lock:
        if _owner is None or _owner.pid != os.getpid():
            _owner = LockOwner(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:12])
        return _owner


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def owner_alive(owner: LockOwner | None, beat: Any, now: float | None = None) -> bool:
    """Whether `owner` (with `beat`, its owner heartbeat's value or None) still runs."""
    if owner is None:
        return False
    if owner == this_process():
        return True
    if owner.host == socket.gethostname():
        # The pid decides: an owner that never beat (a test's own process) counts while it runs.
        return pid_exists(owner.pid)
    now = time.time() if now is None else now
    return isinstance(beat, (int, float)) and now - beat < OWNER_SILENT_SECONDS


class OwnerBeat:
    """A daemon thread that refreshes this process's owner heartbeat until stopped."""

    def __init__(self, put: Callable[[str, float], Any], delete: Callable[[str], Any]) -> None:
        self._put, self._delete = put, delete
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hilo-owner-beat", daemon=True)

    def start(self) -> OwnerBeat:
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        try:
            self._put(this_process().beat_key, time.time())
        except Exception:  # noqa: BLE001, S110 — the storage failed right now (a full disk); the next beat retries
            pass

    def _run(self) -> None:
        while not self._stop.wait(OWNER_BEAT_SECONDS):
            self.beat()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return  # never started
        self._stop.set()
        self._thread.join(timeout=OWNER_BEAT_SECONDS)
        try:
            self._delete(this_process().beat_key)
        except Exception:  # noqa: BLE001, S110 — gone with the process anyway; a later flush removes it
            pass
