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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from huey import Huey
from huey.storage import PriorityRedisStorage
from huey.utils import Error

from app.config import Config
from app.datadir import DataDir
from app.errors import Misconfigured
from workers.hooks import TASK_NAMESPACE, TimedTaskWrapper, describe_failure, heartbeat
from workers.storage import ApswSqliteStorage

QUEUE_NAME = "hilo"
# Seconds an enqueue may wait for a locked queue file or an unresponsive Redis (more
# than the 1 s a blocking Redis dequeue waits).
ENQUEUE_TIMEOUT_SECONDS = 2.0
LOCK_PREFIX = f"{QUEUE_NAME}.lock."


class QueueNotConfigured(Misconfigured):
    """The queue was used before this process bound it to a storage."""


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
        # Which task, its arguments, when.
        return describe_failure(task, super().build_error_result(task, exception))


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
    except Exception:  # a storage being replaced; nothing to do if closing fails
        pass


# -- locks and failures --------------------------------------------------------------------


def lock_key(name: str) -> str:
    """The storage key of a named lock, as Huey's own TaskLock spells it."""
    return LOCK_PREFIX + name


def try_lock(name: str) -> bool:
    return bool(huey.put_if_empty(lock_key(name), "1"))


def release_lock(name: str) -> None:
    huey.delete(lock_key(name))


@contextmanager
def exclusive(name: str) -> Iterator[bool]:
    """Hold the named lock for the block if no one else does; yields whether we got it."""
    if not try_lock(name):
        yield False
        return
    try:
        yield True
    finally:
        release_lock(name)


def flush_stale_locks() -> list[str]:
    """Delete every lock left by a killed worker (Huey's flush_locks only knows static ones)."""
    names = [key[len(LOCK_PREFIX):] for key in huey.all_results() if key.startswith(LOCK_PREFIX)]
    for name in names:
        release_lock(name)
    return names


def record_failure(task_id: str | None, error: Exception, task: Any = None) -> None:
    """Store `error` as the task's result, where Huey stores the errors of failed tasks;
    with `task`, also which task it was and its arguments (`hilo queue retry` needs them)."""
    if task_id is None:
        return
    metadata = {"error": repr(error), "retries": 0, "traceback": "", "task_id": task_id}
    if task is not None:
        metadata = describe_failure(task, metadata, degraded=True)
    huey.put_result(task_id, Error(metadata))


@dataclass(frozen=True)
class FailedJob:
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
        except Exception:  # not a result (a lock, a revoke flag): not ours to judge
            continue
        if isinstance(value, Error):
            meta = value.metadata
            failed.append(FailedJob(str(meta.get("task_id", key)), str(meta.get("error", "")),
                                    str(meta.get("traceback", ""))))
    return failed
