"""The queue: one Huey instance, bound to its storage where a process starts.

`huey` is module-level because Huey registers tasks on an instance when they are
declared (workers/jobs.py). It has no storage until `configure(config)` binds one —
`queue.sqlite3` in the data directory (APSW, WAL, synchronous=NORMAL) or Redis when
`queue.backend = "redis"`. Each process binds it once where it starts: the consumer
(workers/consumer.py), the front-ends (through workers.handoff.queue_handoff), `hilo
queue`. Using it unbound is an error that says so; no configuration is guessed.

Binding again to another storage (another data directory, as each test does) replaces
the storage; binding again to the same one is a no-op, compared by where it stores.

Jobs are named `workers.tasks.<job>` in the storage whichever module declares them
(`HiloTaskWrapper`): the names queued jobs and failure records have always carried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huey import Huey
from huey.constants import EmptyData
from huey.exceptions import TaskException
from huey.storage import PriorityRedisStorage
from huey.utils import Error

from app.config import Config
from app.datadir import DataDir
from app.db import CorruptDatabase, file_damage
from app.errors import Misconfigured
from app.log import get_logger
from workers.chat_activity import ACTIVITY_PREFIX, activity_is_stale
from workers.hooks import (
    TASK_NAMESPACE,
    TimedTaskWrapper,
    describe_failure,
    error_sentence,
    heartbeat,
    redacted_failure,
)
from workers.locks import (
    OWNER_BEAT_PREFIX,
    OWNER_SILENT_SECONDS,
    LockOwner,
    OwnerBeat,
    owner_alive,
    this_process,
)
from workers.storage import ApswSqliteStorage

__all__ = ["QUEUE_NAME", "ENQUEUE_TIMEOUT_SECONDS", "LOCK_PREFIX", "log", "QueueNotConfigured",
           "CorruptQueue", "check_queue_file", "HiloTaskWrapper", "HiloHuey", "huey",
           "storage_address", "make_storage", "configure", "lock_key", "try_lock", "release_lock",
           "exclusive", "HeldLock", "held_locks", "flush_stale_locks", "owner_beat",
           "other_workers_alive", "record_failure", "FailedJob", "failed_jobs"]

QUEUE_NAME = "hilo"
# Seconds an enqueue may wait for a locked queue file or an unresponsive Redis (more
# than the 1 s a blocking Redis dequeue waits).
ENQUEUE_TIMEOUT_SECONDS = 2.0
LOCK_PREFIX = f"{QUEUE_NAME}.lock."

log = get_logger(__name__)


class QueueNotConfigured(Misconfigured):
    """The queue was used before this process bound it to a storage."""


class CorruptQueue(CorruptDatabase):
    """queue.sqlite3 is damaged; the worker and the front-ends refuse to use it."""


def check_queue_file(config: Config) -> None:
    """Refuse a queue.sqlite3 that is not a SQLite file or fails a quick check (CorruptQueue).

    A missing or empty file is an empty queue: Huey creates its tables on first use, and
    the worker's reconcile re-enqueues whatever work the memory database says is undone.
    """
    backend, location = storage_address(config)
    path = Path(location)
    if backend != "sqlite" or not path.exists() or path.stat().st_size == 0:
        return
    damage = file_damage(path)
    if damage is not None:
        raise CorruptQueue(
            f"the job queue {path} {damage}: Hilo has not changed it; stop the worker and the "
            f"server, move {path.name} aside and start again — the queue holds only hints, "
            "and the worker re-enqueues undone work from the memory database")


class HiloTaskWrapper(TimedTaskWrapper):
    """Task classes with UUIDv7 ids (workers/hooks.py) and a stable name on the wire."""

    def create_task(self, func: Any, context: bool = False, name: str | None = None,
                    **settings: Any) -> type:
        task_class = super().create_task(func, context, name, **settings)
        task_class.__module__ = TASK_NAMESPACE  # what Registry.task_to_string reads
        return task_class


class HiloHuey(Huey):
    """Huey whose storage is given by configure(), never created on its own."""

    def create_storage(self) -> Any:
        return None  # bound by configure() where the process starts

    @property
    def storage(self) -> Any:
        if self._storage is None:
            raise QueueNotConfigured(
                "the job queue is not configured in this process: call "
                "workers.queue.configure(config) where the process starts")
        return self._storage

    @storage.setter
    def storage(self, value: Any) -> None:
        self._storage = value

    # Three hooks that make the queue observable by `hilo queue` (workers/hooks.py).

    def get_task_wrapper_class(self) -> type:
        return HiloTaskWrapper  # task ids carry their creation time

    def dequeue(self) -> Any:
        task = super().dequeue()
        heartbeat(self)  # "a worker polled", at most every few seconds
        return task

    def build_error_result(self, task: Any, exception: BaseException) -> dict:
        # The error as a sentence; which task, its arguments, when.
        result = super().build_error_result(task, exception)
        if not isinstance(exception, TaskException):
            result["error"] = error_sentence(exception)
        return describe_failure(task, result)


huey = HiloHuey(QUEUE_NAME, results=True, store_none=False, utc=True)


def storage_address(config: Config) -> tuple[str, str]:
    """Where `config` keeps the queue: ("redis", url) or ("sqlite", path)."""
    if config.queue.backend == "redis":
        return ("redis", config.queue.redis_url)
    return ("sqlite", str(DataDir.of(config).queue_db))


def make_storage(config: Config) -> Any:
    backend, location = storage_address(config)
    if backend == "redis":
        from redis import ConnectionPool
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No client-side retries: an unreachable Redis fails an enqueue at once (the
        # front-end must not wait; reconcile redoes it) and the consumer retries itself.
        pool = ConnectionPool.from_url(
            location, socket_connect_timeout=ENQUEUE_TIMEOUT_SECONDS,
            socket_timeout=ENQUEUE_TIMEOUT_SECONDS, retry=Retry(NoBackoff(), 0))
        # The priority flavour, like SQLite: the start-up reconcile jumps the queue.
        return PriorityRedisStorage(QUEUE_NAME, connection_pool=pool)
    return ApswSqliteStorage(
        QUEUE_NAME,
        location,
        timeout=ENQUEUE_TIMEOUT_SECONDS,
        # Tables are created on the first connection, so importing this module and
        # configuring never touch the disk (the data directory may not exist yet).
        create_tables=False,
        schema_on_connect=True,
    )


# -- binding ------------------------------------------------------------------------------

_bind_lock = threading.Lock()
_bound_to: tuple[str, str] | None = None


def configure(config: Config) -> HiloHuey:
    """Bind the queue to the storage `config` names; a no-op when already bound there.
    Touches no disk: the queue file is opened on first use."""
    global _bound_to
    address = storage_address(config)
    with _bind_lock:
        if _bound_to == address:
            return huey
        old_storage = huey._storage
        huey.storage = make_storage(config)
        _bound_to = address
    if old_storage is not None:
        _close_quietly(old_storage)
    return huey


def _close_quietly(storage: Any) -> None:
    try:
        storage.close()
    except Exception:  # noqa: BLE001, S110 — a storage being replaced; nothing to do if closing fails
        pass


# -- locks and failures --------------------------------------------------------------------


def lock_key(name: str) -> str:
    """The storage key of a named lock, as Huey's own TaskLock spells it."""
    return LOCK_PREFIX + name


def try_lock(name: str) -> bool:
    """Take the named lock for this process if no live process holds it.

    A lock left by a process that is gone (workers/locks.py) is taken over; so is one of
    this process's own that no thread holds any more (its release failed, on a full disk)."""
    _retry_releases()
    key, held = lock_key(name), (_bound_to, name)
    owner = this_process()
    with _held_lock:
        if held in _held:
            return False  # another thread of this process holds it
        if huey.put_if_empty(key, owner.to_value(time.time())):
            _held.add(held)
            return True
        raw = huey.storage.peek_data(key)
        if raw is EmptyData:  # released in between; the next attempt takes it
            return False
        holder = LockOwner.from_value(_deserialize(raw))
        if holder == owner:  # ours, with no thread holding it: its release failed
            huey.put(key, owner.to_value(time.time()))
            _held.add(held)
            _unreleased.discard(held)
            return True
        if _holder_alive(holder):
            return False
        if _delete_if_unchanged(key, raw) and huey.put_if_empty(key, owner.to_value(time.time())):
            log.warning("queue.lock_taken_over", lock=name, owner=holder.key if holder else None)
            _held.add(held)
            return True
    return False


def release_lock(name: str) -> None:
    """Release the named lock; if the storage refuses (a full disk), the release is retried
    at this process's next try_lock, and the lock stays this process's to take again."""
    held = (_bound_to, name)
    with _held_lock:
        _held.discard(held)
        try:
            huey.delete(lock_key(name))
        except Exception as exc:  # noqa: BLE001 — logged; released on a later try
            _unreleased.add(held)
            log.warning("queue.lock_release_failed", lock=name, error=repr(exc))
        else:
            _unreleased.discard(held)


def _retry_releases() -> None:
    with _held_lock:
        for held in [h for h in _unreleased if h[0] == _bound_to and h not in _held]:
            try:
                _delete_if_unchanged_owner(lock_key(held[1]), this_process())
            except Exception:  # noqa: BLE001 — still refused; the next try_lock retries
                return
            _unreleased.discard(held)


@contextmanager
def exclusive(name: str) -> Iterator[bool]:
    """Hold the named lock for the block if no one else does; yields whether we got it.
    The lock is released however the block ends (a failed commit included)."""
    if not try_lock(name):
        yield False
        return
    try:
        yield True
    finally:
        release_lock(name)


@dataclass(frozen=True)
class HeldLock:
    """A lock in the queue's storage, its owner and whether that owner still runs."""

    name: str
    owner: str | None  # "host:pid:start", None for a lock without an owner (legacy)
    taken_at: float | None
    owner_alive: bool


def held_locks() -> list[HeldLock]:
    """Every lock in the storage, with its owner's liveness."""
    locks = []
    for key, raw in huey.all_results().items():
        if not key.startswith(LOCK_PREFIX):
            continue
        value = _deserialize(raw)
        holder = LockOwner.from_value(value)
        taken_at = value.get("at") if isinstance(value, dict) else None
        locks.append(HeldLock(key[len(LOCK_PREFIX):], holder.key if holder else None,
                              taken_at if isinstance(taken_at, (int, float)) else None,
                              _holder_alive(holder)))
    return sorted(locks, key=lambda lock: lock.name)


def flush_stale_locks() -> list[str]:
    """Delete the locks whose owner is gone (a killed worker); a live worker's stay.
    Huey's flush_locks only knows static locks. Owner heartbeats of gone owners go too,
    and the chat activity of front-ends that are gone (workers/chat_activity.py)."""
    flushed = []
    for key, raw in huey.all_results().items():
        if key.startswith(LOCK_PREFIX):
            holder = LockOwner.from_value(_deserialize(raw))
            if not _holder_alive(holder) and _delete_if_unchanged(key, raw):
                flushed.append(key[len(LOCK_PREFIX):])
        elif key.startswith(OWNER_BEAT_PREFIX):
            beat = _deserialize(raw)
            if not (isinstance(beat, (int, float)) and time.time() - beat < OWNER_SILENT_SECONDS):
                _delete_if_unchanged(key, raw)
        elif key.startswith(ACTIVITY_PREFIX) and activity_is_stale(_deserialize(raw), time.time()):
            _delete_if_unchanged(key, raw)
    return sorted(flushed)


def owner_beat() -> OwnerBeat:
    """This process's owner heartbeat (a worker runs one while it may hold locks)."""
    return OwnerBeat(huey.put, huey.delete)


def other_workers_alive() -> bool:
    """Whether another worker process than this one beats and still runs."""
    me = this_process().key
    for key, raw in huey.all_results().items():
        if not key.startswith(OWNER_BEAT_PREFIX) or key[len(OWNER_BEAT_PREFIX):] == me:
            continue
        host, _, rest = key[len(OWNER_BEAT_PREFIX):].partition(":")
        pid, _, start = rest.partition(":")
        if pid.isdigit() and owner_alive(LockOwner(host, int(pid), start), _deserialize(raw)):
            return True
    return False


_held_lock = threading.RLock()
# (storage address, lock name): locks a thread of this process holds right now, and
# locks whose release the storage refused.
_held: set[tuple[tuple[str, str] | None, str]] = set()
_unreleased: set[tuple[tuple[str, str] | None, str]] = set()


def _deserialize(raw: Any) -> Any:
    try:
        return huey.serializer.deserialize(raw)
    except Exception:  # noqa: BLE001 — a legacy "1" written raw, or garbage: no owner
        return None


def _holder_alive(holder: LockOwner | None) -> bool:
    beat = None
    if holder is not None and holder.host != this_process().host:
        beat = huey.get(holder.beat_key, peek=True)
    return owner_alive(holder, beat)


_REDIS_DELETE_IF_EQUAL = (
    "if redis.call('hget', KEYS[1], ARGV[1]) == ARGV[2] then "
    "return redis.call('hdel', KEYS[1], ARGV[1]) end return 0")


def _delete_if_unchanged(key: str, raw: Any) -> bool:
    """Delete `key` only if it still holds `raw`: two workers flushing the same stale lock
    must not delete the lock the first one took after it."""
    storage = huey.storage
    if isinstance(storage, ApswSqliteStorage):
        with storage.db(commit=True) as cursor:
            cursor.execute("DELETE FROM kv WHERE queue = ? AND key = ? AND value = ?",
                           (storage.name, key, storage.to_blob(raw)))
            return cursor.rowcount == 1
    if isinstance(storage, PriorityRedisStorage):
        return bool(storage.conn.eval(_REDIS_DELETE_IF_EQUAL, 1, storage.result_key, key, raw))
    if storage.peek_data(key) == raw:  # another storage: not atomic, but close
        return bool(storage.delete_data(key))
    return False


def _delete_if_unchanged_owner(key: str, owner: LockOwner) -> None:
    raw = huey.storage.peek_data(key)
    if raw is not EmptyData and LockOwner.from_value(_deserialize(raw)) == owner:
        _delete_if_unchanged(key, raw)


def record_failure(task_id: str | None, error: Exception, task: Any = None) -> None:
    """Store `error` as the task's result, where Huey stores the errors of failed tasks;
    with `task`, also which task it was and its arguments (`hilo queue retry` needs them)."""
    if task_id is None:
        return
    metadata = redacted_failure({"error": error_sentence(error), "retries": 0, "traceback": "",
                                 "task_id": task_id})
    if task is not None:
        metadata = describe_failure(task, metadata, degraded=True)
    huey.put_result(task_id, Error(metadata))


@dataclass(frozen=True)
class FailedJob:
    """A job whose last attempt failed, as the worker left it in the result store."""

    task_id: str
    error: str
    traceback: str


def failed_jobs() -> list[FailedJob]:
    """Jobs whose last attempt failed (degraded ones included), from Huey's result store."""
    failed = []
    for key, raw in huey.all_results().items():
        if key.startswith(LOCK_PREFIX):
            continue
        try:
            value = huey.serializer.deserialize(raw)
        except Exception:  # noqa: BLE001, S112 — not a result (a lock, a revoke flag): not ours to judge
            continue
        if isinstance(value, Error):
            meta = value.metadata
            failed.append(FailedJob(str(meta.get("task_id", key)), str(meta.get("error", "")),
                                    str(meta.get("traceback", ""))))
    return failed
