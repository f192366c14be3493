"""One model job per session waits: no pile-up behind a slow or silent model.

A session's learning (distill or compact: both learn the whole session, app/learn/
session.py) and its diary each have at most one job waiting in the queue. A key in
Huey's key-value store (`hilo.waiting.<kind>.<session>`) says one is queued or
scheduled; the hand-off after a turn, the reconcile sweep and the jobs re-enqueueing
themselves all go through `enqueue_waiting`, which enqueues nothing while the key is
there. A job keeps its key while it waits for the person (it re-enqueues itself) and
lets it go when it starts its work, which then holds the session's lock (`learn:` or
`diary:` and the session): a turn that comes during the run gets its one job, and the
reconcile sweep enqueues nothing for a session whose job waits or runs.

A key whose job is gone — a worker killed with it in flight (Huey runs a task at most
once), or a queue flushed — is found by the reconcile sweep: no job of that session in
the queue, no lock held, and older than a grace period; it is deleted and the session's
work enqueued again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from huey.api import Task

from app.log import get_logger

__all__ = ["log", "WAITING_PREFIX", "KINDS", "JOBS_OF", "STALE_AFTER_SECONDS", "waiting_key",
           "lock_name", "enqueue_waiting", "still_waiting", "started", "Waiting", "waiting_jobs",
           "queued_sessions", "stale_waiting"]

log = get_logger(__name__)

WAITING_PREFIX = "hilo.waiting."
KINDS = ("learn", "diary")
# The jobs that are each kind's (a waiting compact learns the session as a distill would).
JOBS_OF = {"learn": ("distill", "compact"), "diary": ("diary",)}
# A key with no job behind it is stale after this long: longer than a job takes from
# being dequeued to re-enqueueing itself or taking its lock.
STALE_AFTER_SECONDS = 60.0


def waiting_key(kind: str, user_id: str, session_id: str) -> str:
    digest = hashlib.sha256(f"{user_id}\x00{session_id}".encode()).hexdigest()[:24]
    return f"{WAITING_PREFIX}{kind}.{digest}"


def lock_name(kind: str, user_id: str, session_id: str) -> str:
    """The lock a running job of this kind holds on its session."""
    return f"{kind}:{user_id}:{session_id}"


def enqueue_waiting(queue: Any, kind: str, task: Task, user_id: str, session_id: str) -> bool:
    """Enqueue `task` (a job of `kind` for the session) unless one already waits; whether
    it was enqueued. An enqueue that fails leaves no key behind."""
    key = waiting_key(kind, user_id, session_id)
    if not queue.put_if_empty(key, {"user_id": user_id, "session_id": session_id,
                                    "at": time.time()}):
        return False
    try:
        queue.enqueue(task)
    except BaseException:
        queue.delete(key)
        raise
    return True


def still_waiting(queue: Any, kind: str, user_id: str, session_id: str) -> None:
    """The session's job waits on (it re-enqueued itself): its key says so, as of now."""
    queue.put(waiting_key(kind, user_id, session_id),
              {"user_id": user_id, "session_id": session_id, "at": time.time()})


def started(queue: Any, kind: str, user_id: str, session_id: str) -> None:
    """The session's job works now (or has nothing to do): a later turn may enqueue one."""
    queue.delete(waiting_key(kind, user_id, session_id))


@dataclass(frozen=True)
class Waiting:
    """A session whose job of `kind` waits, and since when its key was last written."""

    kind: str
    user_id: str
    session_id: str
    at: float


def waiting_jobs(queue: Any) -> list[Waiting]:
    """Every key that says a job waits."""
    found = []
    for key, raw in queue.all_results().items():
        if not key.startswith(WAITING_PREFIX):
            continue
        kind = key[len(WAITING_PREFIX):].split(".", 1)[0]
        try:
            value = queue.serializer.deserialize(raw)
            found.append(Waiting(kind, value["user_id"], value["session_id"], float(value["at"])))
        except Exception:  # noqa: BLE001 — a garbled key: dropped, the sweep re-enqueues its work
            queue.delete(key)
    return found


def queued_sessions(queue: Any, names: Iterable[str]) -> set[tuple[str, str]]:
    """(user, session) of every pending or scheduled job named in `names` (short names)."""
    wanted = tuple(f".{name}" for name in names)
    sessions = set()
    for raw in [*queue.storage.enqueued_items(), *queue.storage.scheduled_items()]:
        try:
            message = queue.serializer.deserialize(raw)
        except Exception:  # noqa: BLE001, S112 — unreadable: `hilo queue pending` shows it
            continue
        args = tuple(message.args or ())
        if str(message.name).endswith(wanted) and len(args) >= 2:
            sessions.add((str(args[0]), str(args[1])))
    return sessions


def stale_waiting(queue: Any, locked: set[str], now: float | None = None,
                  stale_after: float = STALE_AFTER_SECONDS) -> list[Waiting]:
    """The keys whose job is gone: not queued, not running (its lock is not in `locked`),
    and older than `stale_after` seconds."""
    now = time.time() if now is None else now
    old = [w for w in waiting_jobs(queue) if now - w.at >= stale_after
           and lock_name(w.kind, w.user_id, w.session_id) not in locked]
    if not old:
        return []
    queued = {kind: queued_sessions(queue, JOBS_OF.get(kind, ())) for kind in {w.kind for w in old}}
    return [w for w in old if (w.user_id, w.session_id) not in queued[w.kind]]
