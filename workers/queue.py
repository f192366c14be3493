"""The Huey instance, and what the jobs run with in a worker process.

`huey` is module-level so `huey_consumer workers.queue.huey -k thread` works. Its
storage is bound by `configure(config)` — `queue.sqlite3` in the data directory
(APSW, WAL, synchronous=NORMAL) or Redis when `queue.backend = "redis"` — and, when
nothing configured it, from `load_config()` (HILO_* variables, ./config.toml) on first
use. Calling `configure` again with another data directory rebinds the storage and
the job context, so each test (or each `hilo worker --data-dir X`) gets its own.

The job context (the worker's writer and model client) is created on first use in the
process that runs jobs; a front-end that only enqueues never opens it.
"""

from __future__ import annotations

import atexit
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from huey import Huey
from huey.storage import PriorityRedisStorage
from huey.utils import Error

from app.config import Config, load_config
from app.db import QUEUE_DB, Durability
from app.embedders import Embedder, make_embedder
from app.llm import ModelClient
from app.writer import Writer
from workers.storage import ApswSqliteStorage

QUEUE_NAME = "hilo"
# Seconds an enqueue may wait for a locked queue file or an unresponsive Redis (more
# than the 1 s a blocking Redis dequeue waits).
ENQUEUE_TIMEOUT_SECONDS = 2.0
LOCK_PREFIX = f"{QUEUE_NAME}.lock."


class HiloHuey(Huey):
    """Huey whose storage is bound late, by configure() or on first use."""

    def create_storage(self) -> Any:
        return None

    @property
    def storage(self) -> Any:
        if self._storage is None:
            configure(load_config())
        return self._storage

    @storage.setter
    def storage(self, value: Any) -> None:
        self._storage = value

    # Three hooks that make the queue observable by `hilo queue` (workers/hooks.py).

    def get_task_wrapper_class(self) -> type:
        from workers.hooks import TimedTaskWrapper  # task ids carry their creation time

        return TimedTaskWrapper

    def dequeue(self) -> Any:
        from workers.hooks import heartbeat  # "a worker polled", at most every few seconds

        task = super().dequeue()
        heartbeat(self)
        return task

    def build_error_result(self, task: Any, exception: BaseException) -> dict:
        from workers.hooks import describe_failure  # which task, its arguments, when

        return describe_failure(task, super().build_error_result(task, exception))


huey = HiloHuey(QUEUE_NAME, results=True, store_none=False, utc=True)


def make_storage(config: Config) -> Any:
    if config.queue.backend == "redis":
        from redis import ConnectionPool
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No client-side retries: an unreachable Redis fails an enqueue at once (the
        # front-end must not wait; reconcile redoes it) and the consumer retries itself.
        pool = ConnectionPool.from_url(
            config.queue.redis_url, socket_connect_timeout=ENQUEUE_TIMEOUT_SECONDS,
            socket_timeout=ENQUEUE_TIMEOUT_SECONDS, retry=Retry(NoBackoff(), 0))
        # The priority flavour, like SQLite: the start-up reconcile jumps the queue.
        return PriorityRedisStorage(QUEUE_NAME, connection_pool=pool)
    return ApswSqliteStorage(
        QUEUE_NAME,
        str(config.data_dir / QUEUE_DB),
        timeout=ENQUEUE_TIMEOUT_SECONDS,
        # Tables are created on the first connection, so importing this module and
        # configuring never touch the disk (the data directory may not exist yet).
        create_tables=False,
        schema_on_connect=True,
    )


# -- binding ------------------------------------------------------------------------------

_bind_lock = threading.RLock()
_bound: Config | None = None
_context: JobContext | None = None


def configure(config: Config) -> HiloHuey:
    """Bind the queue and the job context to `config`; a no-op when already bound to it."""
    global _bound
    with _bind_lock:
        if _bound == config:
            return huey
        old_storage = huey._storage
        close_context()
        huey.storage = make_storage(config)
        _bound = config
        if old_storage is not None:
            _close_quietly(old_storage)
    return huey


def bound_config() -> Config:
    """The configuration the queue is bound to (binding from load_config() if none)."""
    huey.storage  # noqa: B018 — binds on first use
    assert _bound is not None
    return _bound


def _close_quietly(storage: Any) -> None:
    try:
        storage.close()
    except Exception:  # a storage being replaced; nothing to do if closing fails
        pass


# -- what jobs run with -------------------------------------------------------------------


@dataclass
class JobContext:
    config: Config
    writer: Writer
    model: ModelClient
    embedder: Embedder | None  # None with [embedder] kind = "none"

    def close(self) -> None:
        self.writer.close()
        self.model.close()


def job_context() -> JobContext:
    """The worker's writer (synchronous=NORMAL) and model client, opened on first use."""
    global _context
    with _bind_lock:
        if _context is None:
            config = bound_config()
            model = ModelClient.from_config(config)
            _context = JobContext(
                config=config,
                writer=Writer.from_config(config, Durability.NORMAL),
                model=model,
                embedder=make_embedder(config, client=model),
            )
        return _context


def close_context() -> None:
    """Commit the writer's queued writes and close it; the next job reopens."""
    global _context
    with _bind_lock:
        context, _context = _context, None
    if context is not None:
        context.close()


atexit.register(close_context)


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
        from workers.hooks import describe_failure

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


import workers.tasks  # noqa: E402,F401 — registers the tasks on `huey`
