"""The job queue as an operator sees it, read (and steered) through Huey's own storage.

It reads whichever storage is configured (queue.sqlite3 or Redis) directly, so it works
with the worker stopped, and it never starts a consumer. What Huey does not store — when
a job was enqueued, whether a worker polls, which task failed with which arguments — the
hooks in workers/hooks.py add on the way in.

A pending job is "due since" the later of its creation (read from its UUIDv7 id) and its
eta: a retry scheduled with a delay is not late before its time.

Steering: `retry` re-enqueues a failed job's task with its original arguments (a fresh
run of attempts: the `attempt` counter is dropped) under a new id and deletes the
failure record; `revoke` flags pending or scheduled jobs with Huey's
`revoke_by_id(revoke_once=True)` — a worker drops each when it reaches it, and the flag
goes with it; `flush` is Huey's `flush()` (queue, schedule, results, revoke flags), keeping
the worker's own state (locks, the heartbeat, consolidation's last decay). Huey runs a
task at most once (a task in flight when its consumer dies is gone); whatever a flush or a revoke drops that the memory still
needs, the reconcile sweep enqueues again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import apsw
from huey.exceptions import HueyException
from huey.utils import Error

from app.config import Config
from app.datadir import DataDir
from app.db import connect_readonly
from app.errors import Unavailable
from app.learn.engine_time import (
    EngineSpend,
    LearningStall,
    ShareHold,
    engine_spend,
    learning_stall,
    share_hold,
)
from app.log import get_logger
from workers.chat_activity import ServerActivity, chat_deferral, read_activity
from workers.hooks import (
    HEARTBEAT_KEY,
    TASKS_MODULE,
    job_purpose,
    readable_error,
    short_name,
    task_id_time,
)
from workers.queue import configure
from workers.waiting import WAITING_PREFIX

__all__ = ["ACTIVE_WITHIN_SECONDS", "STATE_PREFIX", "LOCK_PREFIX", "REVOKE_PREFIX", "log",
           "QueueError", "QueueUnavailable", "iso_time", "Job", "Failure", "KeyValues",
           "OldestPending", "TaskCounts", "WorkerPoll", "MODEL_JOBS", "ChatWait", "LearningCost",
           "learning_cost", "QueueStatus", "Retried", "Skipped", "RetryOutcome", "Revocation",
           "Flushed", "redacted", "QueueView"]

# A worker that polled within this long is "active" (it polls at least every
# poll_max_delay seconds, and writes the heartbeat every HEARTBEAT_EVERY_SECONDS).
ACTIVE_WITHIN_SECONDS = 60.0
STATE_PREFIX = "hilo."  # kv keys that are the worker's state (locks, heartbeat), not results
LOCK_PREFIX = "hilo.lock."
REVOKE_PREFIX = "r:"  # Huey's per-task revoke flag

log = get_logger(__name__)


class QueueError(Unavailable):
    """Something the user asked that cannot be done; str() says why and what to do."""


class QueueUnavailable(QueueError):
    """The configured storage cannot be read (Redis down, a locked or broken file)."""


def iso_time(moment: float | None) -> str | None:
    """A Unix time as RFC 3339 UTC to the second, the way `hilo queue` shows times."""
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _eta_seconds(eta: Any) -> float | None:
    """Huey's etas are naive UTC datetimes (utc=True)."""
    if eta is None:
        return None
    if eta.tzinfo is None:
        eta = eta.replace(tzinfo=UTC)
    return eta.timestamp()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def _ms(seconds: float) -> float:
    return round(seconds, 3)


# -- what the queue holds ------------------------------------------------------------------

@dataclass
class Job:
    """A job waiting in the queue ("pending") or the schedule ("scheduled")."""

    id: str
    task: str  # registry name, "workers.tasks.distill"
    args: tuple
    kwargs: dict
    where: str
    eta: float | None = None
    priority: int | None = None
    revoked: bool = False

    @property
    def name(self) -> str:
        return short_name(self.task) or "?"

    @property
    def purpose(self) -> str:
        return job_purpose(self.name, self.args, self.kwargs)

    @property
    def created_at(self) -> float | None:
        return task_id_time(self.id)

    def due_since(self) -> float | None:
        """When it became runnable: the later of its creation and its eta."""
        times = [t for t in (self.created_at, self.eta) if t is not None]
        return max(times) if times else None

    def is_due(self, now: float) -> bool:
        return self.eta is None or self.eta <= now

    def waiting(self, now: float) -> float | None:
        since = self.due_since()
        if since is None or not self.is_due(now):
            return None
        return max(0.0, now - since)

    def to_dict(self, now: float) -> dict:
        waited = self.waiting(now)
        return {
            "id": self.id, "task": self.name, "purpose": self.purpose,
            "args": _jsonable(list(self.args)),
            "kwargs": _jsonable(self.kwargs), "enqueued_at": iso_time(self.created_at),
            "eta": iso_time(self.eta), "due": self.is_due(now),
            "waiting_seconds": None if waited is None else _ms(waited),
            "priority": self.priority, "revoked": self.revoked,
        }


@dataclass
class Failure:
    """A failed job, from the Error Huey keeps as its result."""

    id: str
    task: str | None  # registry name; None in records older than the failure hooks
    args: tuple
    kwargs: dict
    error: str
    traceback: str
    attempts: int | None
    failed_at: float | None
    degraded: bool

    @property
    def name(self) -> str:
        return short_name(self.task) or "?"

    @property
    def purpose(self) -> str:
        return job_purpose(self.name, self.args, self.kwargs)

    def to_dict(self, now: float) -> dict:
        return {
            "id": self.id, "task": short_name(self.task), "purpose": self.purpose,
            "args": _jsonable(list(self.args)),
            "kwargs": _jsonable(self.kwargs), "error": self.error, "traceback": self.traceback,
            "attempts": self.attempts, "failed_at": iso_time(self.failed_at),
            "age_seconds": None if self.failed_at is None else _ms(now - self.failed_at),
            "degraded": self.degraded,
        }

    @classmethod
    def from_error(cls, key: str, error: Error) -> Failure:
        meta = error.metadata if isinstance(error.metadata, dict) else {}
        failed_at = meta.get("failed_at")
        return cls(
            id=str(meta.get("task_id") or key), task=meta.get("task"),
            args=tuple(meta.get("args") or ()), kwargs=dict(meta.get("kwargs") or {}),
            error=readable_error(str(meta.get("error", ""))),
            traceback=str(meta.get("traceback") or ""),
            attempts=meta.get("attempts"), degraded=bool(meta.get("degraded", False)),
            failed_at=float(failed_at) if isinstance(failed_at, (int, float)) else None)


@dataclass
class KeyValues:
    """Huey's key-value store, sorted out: failures, results, revoke flags, worker state."""

    failures: list[Failure] = field(default_factory=list)
    results: int = 0
    revoked: set[str] = field(default_factory=set)
    locks: list[str] = field(default_factory=list)
    state: dict[str, bytes] = field(default_factory=dict)  # raw values, kept across a flush
    heartbeat: dict | None = None


# -- what the queue reports ----------------------------------------------------------------
# Durations are in seconds, rounded to the millisecond (as `hilo queue status --json` shows them).


@dataclass
class OldestPending:
    """The due job that has waited longest."""

    id: str
    task: str  # short name, "distill"
    waiting_seconds: float


@dataclass
class TaskCounts:
    """One task's jobs: waiting in the queue, scheduled for later, failed."""

    pending: int = 0
    scheduled: int = 0
    failed: int = 0


@dataclass
class WorkerPoll:
    """The last heartbeat a worker wrote, seen from now."""

    last_poll_at: float | None  # Unix time; None: no worker has polled this queue
    seconds_since_poll: float | None
    pid: int | None
    host: str | None
    active: bool  # polled within ACTIVE_WITHIN_SECONDS

    def to_dict(self) -> dict:
        return {"last_poll_at": iso_time(self.last_poll_at),
                "seconds_since_poll": self.seconds_since_poll, "pid": self.pid,
                "host": self.host, "active": self.active}


# Jobs that need the model, and so wait for the person (workers/chat_activity.py).
MODEL_JOBS = ("distill", "compact", "diary", "consolidate")


@dataclass
class ChatWait:
    """Whether the workers' model jobs wait for a person right now, and why."""

    server: str | None  # the chat's model server; None when the workers have their own
    idle_seconds: float  # [queue] chat_idle_seconds (0: they never wait)
    max_defer_seconds: float
    in_flight: int  # chat requests on that server now
    last_chat_at: float | None  # when one last started or ended
    waiting: bool
    reason: str | None
    until: float | None  # when they may start, unless another chat request comes
    waiting_jobs: int  # model jobs not due yet (waiting for the chat, or a retry's backoff)

    def to_dict(self) -> dict:
        return {"server": self.server, "idle_seconds": self.idle_seconds,
                "max_defer_seconds": self.max_defer_seconds, "in_flight": self.in_flight,
                "last_chat_at": iso_time(self.last_chat_at), "waiting": self.waiting,
                "reason": self.reason, "until": iso_time(self.until),
                "waiting_jobs": self.waiting_jobs}


@dataclass
class LearningCost:
    """What learning cost the engine lately beside the chat, and whether its model still
    answers (app/learn/engine_time.py)."""

    spend: EngineSpend
    stall: LearningStall | None
    hold: ShareHold | None = None  # turns waiting for learning's share of the engine

    def to_dict(self) -> dict:
        return {**self.spend.to_dict(),
                "stall": None if self.stall is None else self.stall.to_dict(),
                "hold": None if self.hold is None else self.hold.to_dict()}


def learning_cost(config: Config, now: float | None = None) -> LearningCost | None:
    """Read from the memory database; None when there is none yet (or it predates the
    record)."""
    path = DataDir.of(config).memory_db
    if not path.exists():
        return None
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    try:
        con = connect_readonly(path)
        try:
            # The share holds only learning on the chat's own server.
            on_chat_server = config.llm.distill_url in ("", config.llm.url)
            hold = share_hold(con, config.learn.engine_share, moment) if on_chat_server else None
            return LearningCost(engine_spend(con, moment), learning_stall(con), hold)
        finally:
            con.close()
    except apsw.Error as exc:  # not migrated yet, or damaged: the database checks say which
        log.info("queue.learning_cost_unread", error=str(exc))
        return None


@dataclass
class QueueStatus:
    """Counts, the oldest due job, failures by task, locks held, the worker's last poll,
    whether model jobs wait for a chat, and what learning costs the engine."""

    backend: str  # "sqlite" or "redis"
    location: str  # the queue file, or the Redis URL without its password
    pending: int
    scheduled: int
    due: int  # pending or scheduled jobs whose time has come
    failed: int
    results: int
    revoked: int
    oldest_pending: OldestPending | None
    oldest_failure_age_seconds: float | None
    by_task: dict[str, TaskCounts]  # short task name → counts, sorted by name
    locks: list[str]
    worker: WorkerPoll
    chat_wait: ChatWait
    learning: LearningCost | None = None

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "location": self.location,
            "pending": self.pending,
            "scheduled": self.scheduled,
            "due": self.due,
            "failed": self.failed,
            "results": self.results,
            "revoked": self.revoked,
            "oldest_pending": None if self.oldest_pending is None else {
                "id": self.oldest_pending.id, "task": self.oldest_pending.task,
                "waiting_seconds": self.oldest_pending.waiting_seconds},
            "oldest_failure_age_seconds": self.oldest_failure_age_seconds,
            "by_task": {name: {"pending": c.pending, "scheduled": c.scheduled,
                               "failed": c.failed} for name, c in self.by_task.items()},
            "locks": self.locks,
            "worker": self.worker.to_dict(),
            "chat_wait": self.chat_wait.to_dict(),
            "learning": None if self.learning is None else self.learning.to_dict(),
        }


@dataclass
class Retried:
    """A failed job enqueued again under a new id."""

    id: str  # the failed job's
    new_id: str  # the job enqueued in its place
    task: str


@dataclass
class Skipped:
    """A job a retry did not enqueue again, and why."""

    id: str
    reason: str


@dataclass
class RetryOutcome:
    """What `hilo queue retry` did with each job it was given."""

    retried: list[Retried] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class Revocation:
    """What `hilo queue revoke` flagged, and the ids it did not find."""

    revoked: list[Job] = field(default_factory=list)  # flagged now or already
    not_found: list[str] = field(default_factory=list)  # ids neither pending nor scheduled


@dataclass
class Flushed:
    """What a flush deleted, counted, and the worker-state keys it kept."""

    pending: int = 0
    scheduled: int = 0
    failed: int = 0
    results: int = 0
    revoke_flags: int = 0
    kept: list[str] = field(default_factory=list)


# -- the view ------------------------------------------------------------------------------


def redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def _unavailable(view: QueueView, exc: Exception) -> QueueUnavailable:
    if view.backend == "redis":
        return QueueUnavailable(
            f"cannot reach the Redis queue at {view.location}: {exc}. Start redis-server, "
            f"or fix [queue] redis_url (HILO_QUEUE_REDIS_URL)")
    return QueueUnavailable(f"cannot read the queue file {view.location}: {exc}")


class QueueView:
    """The configured queue, read (and steered) through Huey's storage API.

    With the SQLite backend and no queue.sqlite3 yet, the queue is empty and nothing
    is created on disk.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.backend = config.queue.backend
        if self.backend == "redis":
            self.location = redacted(config.queue.redis_url)
            self.exists = True
        else:
            path = DataDir.of(config).queue_db
            self.location = str(path)
            self.exists = path.exists()
        self._huey: Any = None

    @property
    def huey(self) -> Any:
        if self._huey is None:
            self._huey = configure(self.config)
        return self._huey

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a storage call, turning the storage's own errors into QueueUnavailable."""
        try:
            return fn(*args, **kwargs)
        except QueueError:
            raise
        except Exception as exc:
            if _is_storage_error(exc):
                raise _unavailable(self, exc) from None
            raise

    # -- reading ---------------------------------------------------------------------------

    def _messages(self, items: Iterable[bytes], where: str, revoked: set[str]) -> list[Job]:
        jobs = []
        for raw in items:
            try:
                m = self.huey.serializer.deserialize(raw)
            except Exception:  # noqa: BLE001 — not a message we can read: shown as "(unreadable)"
                jobs.append(Job(id="?", task="(unreadable)", args=(), kwargs={}, where=where))
                continue
            jobs.append(Job(id=str(m.id), task=str(m.name), args=tuple(m.args or ()),
                            kwargs=dict(m.kwargs or {}), where=where,
                            eta=_eta_seconds(m.eta), priority=m.priority,
                            revoked=f"{REVOKE_PREFIX}{m.id}" in revoked))
        return jobs

    def pending(self, kv: KeyValues | None = None) -> list[Job]:
        """Jobs in the queue, in the order a worker takes them."""
        if not self.exists:
            return []
        kv = kv or self.key_values()
        return self._messages(self._call(self.huey.storage.enqueued_items), "pending", kv.revoked)

    def scheduled(self, kv: KeyValues | None = None) -> list[Job]:
        """Jobs waiting for their time (retries with backoff), soonest first."""
        if not self.exists:
            return []
        kv = kv or self.key_values()
        return self._messages(self._call(self.huey.storage.scheduled_items), "scheduled",
                              kv.revoked)

    def key_values(self) -> KeyValues:
        kv = KeyValues()
        if not self.exists:
            return kv
        deserialize = self.huey.serializer.deserialize
        for key, raw in self._call(self.huey.all_results).items():
            if key.startswith(STATE_PREFIX):
                kv.state[key] = raw
                if key.startswith(LOCK_PREFIX):
                    kv.locks.append(key[len(LOCK_PREFIX):])
                elif key == HEARTBEAT_KEY:
                    try:
                        beat = deserialize(raw)
                    except Exception as exc:  # noqa: BLE001 — read as no heartbeat, said in the log
                        log.warning("queue.heartbeat_unreadable", error=repr(exc))
                        beat = None
                    kv.heartbeat = beat if isinstance(beat, dict) else None
                continue
            if key.startswith(REVOKE_PREFIX):
                kv.revoked.add(key)
                continue
            if key.startswith(("rt:", "chord:")):
                continue
            try:
                value = deserialize(raw)
            except Exception as exc:  # noqa: BLE001 — a damaged result is skipped, said in the log
                log.warning("queue.result_unreadable", key=key, error=repr(exc))
                continue
            if isinstance(value, Error):
                kv.failures.append(Failure.from_error(key, value))
            else:
                kv.results += 1
        kv.failures.sort(key=lambda f: (f.failed_at is None, f.failed_at or 0.0))
        kv.locks.sort()
        return kv

    def failures(self) -> list[Failure]:
        """Failed jobs, oldest first (records without a time first of all)."""
        return self.key_values().failures

    def status(self, now: float | None = None) -> QueueStatus:
        now = time.time() if now is None else now
        kv = self.key_values()
        pending, scheduled = self.pending(kv), self.scheduled(kv)
        due = [j for j in pending + scheduled if j.is_due(now)]
        waits = [(w, j) for j in due if (w := j.waiting(now)) is not None]
        oldest = max(waits, key=lambda pair: pair[0], default=None)
        by_task: dict[str, TaskCounts] = {}
        for items in (pending, scheduled, kv.failures):
            for item in items:
                counts = by_task.setdefault(item.name, TaskCounts())
                if isinstance(item, Failure):
                    counts.failed += 1
                elif item.where == "pending":
                    counts.pending += 1
                else:
                    counts.scheduled += 1
        beat = kv.heartbeat
        last_poll = beat.get("at") if beat else None
        since_poll = None if last_poll is None else max(0.0, now - float(last_poll))
        failed_times = [f.failed_at for f in kv.failures if f.failed_at is not None]
        return QueueStatus(
            backend=self.backend,
            location=self.location,
            pending=len(pending),
            scheduled=len(scheduled),
            due=len(due),
            failed=len(kv.failures),
            results=kv.results,
            revoked=sum(j.revoked for j in pending + scheduled),
            oldest_pending=None if oldest is None else OldestPending(
                id=oldest[1].id, task=oldest[1].name, waiting_seconds=_ms(oldest[0])),
            oldest_failure_age_seconds=_ms(now - min(failed_times)) if failed_times else None,
            by_task=dict(sorted(by_task.items())),
            locks=kv.locks,
            worker=WorkerPoll(
                last_poll_at=None if last_poll is None else float(last_poll),
                seconds_since_poll=None if since_poll is None else _ms(since_poll),
                pid=beat.get("pid") if beat else None,
                host=beat.get("host") if beat else None,
                active=since_poll is not None and since_poll <= ACTIVE_WITHIN_SECONDS,
            ),
            chat_wait=self.chat_wait(pending + scheduled, now),
            learning=learning_cost(self.config, now),
        )

    def chat_wait(self, jobs: list[Job], now: float) -> ChatWait:
        config = self.config
        separate = config.llm.distill_url and config.llm.distill_url != config.llm.url
        server = None if separate else config.llm.url
        activity = (read_activity(self.huey, server, now) if server and self.exists
                    else ServerActivity(0, None))
        deferral = (chat_deferral(self.huey, config, server, None, now)
                    if server and self.exists else None)
        return ChatWait(
            server=server, idle_seconds=config.queue.chat_idle_seconds,
            max_defer_seconds=config.queue.max_defer_seconds, in_flight=activity.in_flight,
            last_chat_at=activity.last_at, waiting=deferral is not None,
            reason=deferral.reason if deferral else None,
            until=deferral.until if deferral else None,
            waiting_jobs=sum(1 for job in jobs if job.name in MODEL_JOBS and not job.is_due(now)))

    # -- steering ---------------------------------------------------------------------------

    def _registry(self) -> Any:
        """Huey's registry, with every job declared: retry and revoke resolve names in it."""
        # start-up: the jobs load the model client; reading the queue needs none of them
        from workers import jobs  # noqa: F401 — declares the tasks

        return self.huey._registry

    def task_names(self) -> dict[str, str]:
        """Every registered task: short name and registry name → registry name."""
        names = {}
        for full in self._registry()._registry:
            names[full] = full
            names[short_name(full)] = full
        return names

    def retry(self, ids: list[str] | None) -> RetryOutcome:
        """Re-enqueue failed jobs (all with ids=None)."""
        failures = {f.id: f for f in self.failures()}
        wanted = list(failures) if ids is None else ids
        registry = self._registry()
        outcome = RetryOutcome()
        for job_id in wanted:
            failure = failures.get(job_id)
            if failure is None:
                outcome.skipped.append(Skipped(job_id, "no failed job has this id "
                                                       "(see `hilo queue failed`)"))
                continue
            if failure.task is None:
                outcome.skipped.append(Skipped(
                    job_id, "its failure record does not say which task failed (recorded "
                    "before Hilo kept that); the reconcile sweep redoes its work"))
                continue
            try:
                task_class = registry.string_to_task(failure.task)
            except HueyException:
                outcome.skipped.append(Skipped(job_id, f"task {failure.task} no longer exists"))
                continue
            kwargs = {k: v for k, v in failure.kwargs.items() if k != "attempt"}
            task = task_class(tuple(failure.args), kwargs)
            self._call(self.huey.enqueue, task)
            self._call(self.huey.delete, job_id)
            outcome.retried.append(Retried(id=job_id, new_id=task.id, task=failure.name))
        return outcome

    def _waiting_jobs(self) -> list[Job]:
        kv = self.key_values()
        return self.pending(kv) + self.scheduled(kv)

    def revoke(self, job_id: str) -> Job:
        """Flag one pending or scheduled job: a worker drops it instead of running it."""
        for job in self._waiting_jobs():
            if job.id == job_id:
                self._call(self.huey.revoke_by_id, job_id, revoke_once=True)
                job.revoked = True
                return job
        raise QueueError(f"no pending or scheduled job has id {job_id} "
                         "(see `hilo queue pending` and `hilo queue scheduled`)")

    def revoke_each(self, ids: list[str]) -> Revocation:
        """Flag each of these pending or scheduled jobs; an id that is neither is listed
        as not found (a queue that cannot be read still raises QueueUnavailable)."""
        revocation = Revocation()
        for job_id in ids:
            try:
                revocation.revoked.append(self.revoke(job_id))
            except QueueUnavailable:
                raise
            except QueueError:
                revocation.not_found.append(job_id)
        return revocation

    def revoke_task(self, name: str) -> Revocation:
        """Flag every pending and scheduled job of one task; later ones run as usual."""
        names = self.task_names()
        full = names.get(name) or names.get(TASKS_MODULE + name)
        jobs = self._waiting_jobs()
        if full is None and not any(j.task == name or j.name == name for j in jobs):
            known = ", ".join(sorted(short_name(n) or n for n in set(names.values())))
            raise QueueError(f"no task is called {name!r}" + (f"; tasks: {known}" if known else ""))
        revoked = []
        for job in jobs:
            if job.task in (full, name) or job.name == name:
                if not job.revoked:
                    self._call(self.huey.revoke_by_id, job.id, revoke_once=True)
                    job.revoked = True
                revoked.append(job)
        return Revocation(revoked)

    def flush(self) -> Flushed:
        """Huey's flush(), keeping the worker's own state; what was dropped, counted."""
        if not self.exists:
            return Flushed()
        kv = self.key_values()
        flushed = Flushed(pending=self._call(self.huey.pending_count),
                          scheduled=self._call(self.huey.scheduled_count),
                          failed=len(kv.failures), results=kv.results,
                          revoke_flags=len(kv.revoked), kept=sorted(k for k in kv.state if not k.startswith(WAITING_PREFIX)))
        self._call(self.huey.flush)
        for key, raw in kv.state.items():
            if not key.startswith(WAITING_PREFIX):  # their jobs are gone with the queue
                self._call(self.huey.storage.put_data, key, raw)
        return flushed


def _is_storage_error(exc: Exception) -> bool:
    if isinstance(exc, apsw.Error):
        return True
    try:
        from redis.exceptions import RedisError
    except ImportError:  # the optional redis extra is not installed
        return False
    return isinstance(exc, (RedisError, ConnectionError, TimeoutError, OSError))
