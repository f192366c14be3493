"""The single writer: one APSW connection, one thread, group commit.

Producers submit a write — a function of the connection — and wait for its result.
The thread drains whatever is queued into one transaction, each write inside its own
SAVEPOINT, so a write that raises is rolled back alone and its exception reaches its
own caller only. A full queue blocks producers (back-pressure; the bound is checked
without a lock, so producers racing in at the same instant may overshoot it by their
number); nothing is dropped.
A submitted write is either committed before its caller sees the result, or the
caller gets an exception.

Both processes use it: the front-end with Durability.FULL for events, the worker with
NORMAL for derived data.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import apsw

from app.datadir import DataDir
from app.db import Durability, check_memory_database, connect, create_memory_database, migrate
from app.errors import InsufficientStorage, Unavailable
from app.log import get_logger

__all__ = ["T", "Write", "log", "LINGER_SECONDS", "WriterClosed", "CommitFailed", "DiskFull",
           "disk_full", "WriterStats", "Writer"]

T = TypeVar("T")
Write = Callable[[apsw.Connection], T]

log = get_logger(__name__)

_STOP = object()
# How long a busy writer waits for more writes before committing; far below an fsync.
LINGER_SECONDS = 0.0002


class WriterClosed(Unavailable):
    """The writer has shut down; the write was not queued."""


class CommitFailed(Unavailable):
    """The transaction holding this write could not commit; the write is not stored."""


class DiskFull(CommitFailed, InsufficientStorage):
    """The disk holding the database is full (SQLITE_FULL); the write is not stored."""


def disk_full(path: Any, exc: BaseException) -> DiskFull:
    """SQLite's "database or disk is full" as the error a person can act on."""
    return DiskFull(f"could not store to {path}: the disk is full ({exc}); nothing was "
                    "stored: free space on that disk, then send it again")


def _full_disk_behind(exc: BaseException | None) -> apsw.FullError | None:
    """The FullError an exception was raised over, if any: a full disk that rolled the
    transaction back surfaces as the savepoint failing to release while handling it."""
    while exc is not None and not isinstance(exc, apsw.FullError):
        exc = exc.__context__
    return exc


@dataclass
class WriterStats:
    writes: int = 0
    failed_writes: int = 0
    commits: int = 0
    last_batch_size: int = 0
    largest_batch_size: int = 0


class _Job:
    """One queued write and its outcome.

    Completion is signalled with a bare lock (acquired now, released when done): far
    cheaper than a Future's Condition when dozens of producers hand over thousands of
    writes a second.
    """

    __slots__ = ("write", "ok", "value", "_done")

    def __init__(self, write: Write) -> None:
        self.write = write
        self.ok = False
        self.value: Any = None
        self._done = threading.Lock()
        self._done.acquire()

    def finish(self, ok: bool, value: Any) -> None:
        self.ok, self.value = ok, value
        self._done.release()

    def result(self, timeout: float | None = None) -> Any:
        if not self._done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the write was not committed in time")
        self._done.release()  # let result() be asked again
        if self.ok:
            return self.value
        raise self.value

    def done(self) -> bool:
        return not self._done.locked()


class Writer:
    def __init__(
        self,
        path: Path,
        durability: Durability = Durability.NORMAL,
        queue_size: int = 1024,
        max_batch: int = 512,
        name: str = "hilo-writer",
    ) -> None:
        self.path = Path(path)
        self.durability = durability
        self.max_batch = max_batch
        self.stats = WriterStats()
        self._con = connect(self.path, durability)
        migrate(self._con)
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self.queue_size = queue_size
        # Back-pressure: producers wait here while queue_size writes are queued. The fast
        # path (room in the queue) takes no Python-level lock.
        self._room = threading.Condition(threading.Lock())
        self._waiting_for_room = 0
        # Held while checking `_closed` and queueing, so nothing slips in behind _STOP.
        self._admit = threading.Lock()
        self._closed = False
        self._last_batch = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, config: Any, durability: Durability) -> Writer:
        """The writer of `config`'s memory database; a damaged one is refused
        (CorruptDatabase), a missing one created whole."""
        path = DataDir.of(config).memory_db
        check_memory_database(path)
        create_memory_database(path)
        return cls(
            path,
            durability,
            queue_size=config.writer.queue_size,
            max_batch=config.writer.max_batch,
        )

    # -- producers ---------------------------------------------------------------------

    def submit(self, write: Write[T], timeout: float | None = None) -> T:
        """Queue a write, wait until it is committed, return its result (or raise)."""
        return self.submit_nowait(write).result(timeout)

    def submit_nowait(self, write: Write[T]) -> _Job:
        """Queue a write and return at once with its future. Blocks while the queue is full."""
        job = _Job(write)
        if self._queue.qsize() >= self.queue_size:
            self._wait_for_room()
        with self._admit:
            if self._closed:
                raise WriterClosed(f"the writer for {self.path} is closed")
            self._queue.put(job)
        return job

    def _wait_for_room(self) -> None:
        with self._room:
            self._waiting_for_room += 1
            try:
                while self._queue.qsize() >= self.queue_size and not self._closed:
                    self._room.wait()
            finally:
                self._waiting_for_room -= 1

    @property
    def depth(self) -> int:
        """Writes queued and not yet taken by the writer thread."""
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting writes, commit everything already queued, close the connection."""
        with self._admit:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)  # takes no slot: close never waits on a full queue
        with self._room:
            self._room.notify_all()  # producers waiting for room learn it is closed
        self._thread.join(timeout)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch, stop = self._take_batch()
                if batch:
                    self._commit(batch)
                if stop:
                    return
        finally:
            self._con.close()

    def _take_batch(self) -> tuple[list[_Job], bool]:
        batch: list[_Job] = []
        stop = False
        lingered = False
        job = self._queue.get()
        while True:
            if job is _STOP:
                stop = True
                break
            batch.append(job)
            if len(batch) >= self.max_batch:
                break
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                if lingered or self._last_batch < 2:
                    break
                # Producers are busy: give the ones just released a moment to queue
                # their next write, so it shares this commit's fsync (commit_delay).
                lingered = True
                time.sleep(LINGER_SECONDS)
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
        self._last_batch = len(batch)
        with self._room:  # once per batch; under the lock, so no producer misses it
            if self._waiting_for_room:
                self._room.notify_all()
        return batch, stop

    def _commit(self, batch: list[_Job]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            self._con.execute("BEGIN IMMEDIATE")
            for job in batch:
                outcomes.append(self._run_one(job))
                if self._con.getautocommit():
                    self._rolled_back_by(job, outcomes[-1], batch)
                    return
            self._con.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 — logged, and each job gets the error
            # BEGIN or COMMIT failed (disk full, I/O error): nothing in the batch is stored.
            if not self._con.getautocommit():
                self._con.execute("ROLLBACK")
            log.error("writer.commit_failed", batch=len(batch), error=str(exc))
            for job in batch:
                job.finish(False, disk_full(self.path, exc) if isinstance(exc, apsw.FullError)
                           else CommitFailed(f"could not commit to {self.path}: {exc}"))
            return
        self.stats.commits += 1
        self.stats.last_batch_size = len(batch)
        self.stats.largest_batch_size = max(self.stats.largest_batch_size, len(batch))
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                self.stats.writes += 1
            else:
                self.stats.failed_writes += 1
            job.finish(ok, value)

    def _rolled_back_by(self, job: _Job, outcome: tuple[bool, Any], batch: list[_Job]) -> None:
        """SQLite rolled the batch's whole transaction back when `job` ran (a full disk
        can): that write fails, and the rest of the batch runs again without it, so a
        failing write is still rolled back alone."""
        ok, value = outcome
        self.stats.failed_writes += 1
        job.finish(False, CommitFailed(f"could not commit to {self.path}: SQLite rolled the "
                                       "transaction back") if ok else value)
        rest = [other for other in batch if other is not job]
        if rest:
            self._commit(rest)

    def _run_one(self, job: _Job) -> tuple[bool, Any]:
        try:
            with self._con:  # a SAVEPOINT inside the batch's transaction
                return True, job.write(self._con)
        except Exception as exc:  # noqa: BLE001 — the job's own error, handed to its caller
            full = _full_disk_behind(exc)
            return False, exc if full is None else disk_full(self.path, full)
