"""`hilo queue`: look at and steer the job queue through Huey's own storage.

It reads whichever storage is configured (queue.sqlite3 or Redis) directly, so it works
with the worker stopped, and it never starts a consumer. Huey stores no enqueue time, no
sign of life from the consumer and, for a failed task, only its error; three cheap hooks
in `HiloHuey` (workers/queue.py) add what an operator needs:

- **Enqueue time.** Task ids are UUIDv7 (`TimedTaskWrapper`): the first 48 bits are the
  creation time in ms, so a pending job's age is read from its id. No extra write and
  nothing to clean up; a job is "due since" the later of its creation and its eta (a
  retry scheduled with a delay is not late before its time). Ids from before this
  change (uuid4) have no time: their age is unknown.
- **Heartbeat.** Every `HiloHuey.dequeue()` — each poll of a worker thread, busy or
  idle — writes `hilo.worker.heartbeat` = {at, pid, host} to Huey's key-value store,
  at most once per HEARTBEAT_EVERY_SECONDS per process (one small write every 10 s
  while idle). A stale heartbeat with jobs due means a stalled worker.
- **Failure records.** `HiloHuey.build_error_result` (unhandled exceptions, recorded by
  Huey) and `queue.record_failure` (degraded jobs) add the task's name, arguments,
  attempts and failure time to Huey's `Error` result, so `retry` can re-enqueue it.

Steering: `retry` re-enqueues a failed job's task with its original arguments (a fresh
run of attempts: the `attempt` counter is dropped) under a new id and deletes the
failure record; `revoke` flags pending or scheduled jobs with Huey's
`revoke_by_id(revoke_once=True)` — a worker drops each when it reaches it, and the flag
goes with it; `flush` is Huey's `flush()` (queue, schedule, results, revoke flags), keeping
the worker's own state (locks, the heartbeat, consolidation's last decay). Huey runs a
task at most once (DESIGN §5b); whatever a flush or a revoke drops that the memory still
needs, the reconcile sweep enqueues again.

This module imports nothing from workers.queue at import time: queue.py imports it while
it builds the Huey instance.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable
from urllib.parse import urlsplit, urlunsplit

from huey.api import TaskWrapper
from huey.utils import Error

HEARTBEAT_KEY = "hilo.worker.heartbeat"
HEARTBEAT_EVERY_SECONDS = 10.0
# A worker that polled within this long is "active" (it polls at least every
# poll_max_delay seconds, and writes the heartbeat every HEARTBEAT_EVERY_SECONDS).
ACTIVE_WITHIN_SECONDS = 60.0
STATE_PREFIX = "hilo."  # kv keys that are the worker's state (locks, heartbeat), not results
LOCK_PREFIX = "hilo.lock."
REVOKE_PREFIX = "r:"  # Huey's per-task revoke flag
TASKS_MODULE = "workers.tasks."
DEFAULT_LIMIT = 100


# -- hooks called by HiloHuey --------------------------------------------------------------


def new_task_id(at: float | None = None) -> str:
    """A UUIDv7: 48 bits of Unix time in ms, then random bits; sorts by creation."""
    ms = int((time.time() if at is None else at) * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = ((ms << 80) | (0x7 << 76) | (((rand >> 62) & 0xFFF) << 64) | (0b10 << 62)
             | (rand & ((1 << 62) - 1)))
    return str(uuid.UUID(int=value))


def task_id_time(task_id: Any) -> float | None:
    """The creation time (Unix seconds) carried by a UUIDv7 task id; None for others."""
    try:
        parsed = uuid.UUID(str(task_id))
    except ValueError:
        return None
    if parsed.version != 7:
        return None
    return (parsed.int >> 80) / 1000.0


def _timed_id(self: Any) -> str:
    return new_task_id()


class TimedTaskWrapper(TaskWrapper):
    """Huey's TaskWrapper whose task classes create UUIDv7 ids (periodic ones too)."""

    def create_task(self, func: Any, context: bool = False, name: str | None = None,
                    **settings: Any) -> type:
        settings.setdefault("create_id", _timed_id)
        return super().create_task(func, context, name, **settings)


_beat_lock = threading.Lock()
_last_beat: tuple[int, float] = (0, float("-inf"))  # (id of the storage, monotonic time)
_HOST = socket.gethostname()


def heartbeat(huey: Any) -> None:
    """Record that this process polled the queue; throttled, and never raises."""
    global _last_beat
    now = time.monotonic()
    try:
        storage = id(huey.storage)
        with _beat_lock:
            if _last_beat[0] == storage and now - _last_beat[1] < HEARTBEAT_EVERY_SECONDS:
                return
            _last_beat = (storage, now)
        huey.put(HEARTBEAT_KEY, {"at": time.time(), "pid": os.getpid(), "host": _HOST})
    except Exception:  # the storage failed right now; the next poll tries again
        with _beat_lock:
            _last_beat = (0, float("-inf"))


def registry_name(task: Any) -> str:
    """How Huey's registry names a task class: "workers.tasks.distill"."""
    cls = task if isinstance(task, type) else type(task)
    return f"{cls.__module__}.{cls.__name__}"


def short_name(name: str | None) -> str | None:
    if name and name.startswith(TASKS_MODULE):
        return name[len(TASKS_MODULE):]
    return name


def describe_failure(task: Any, metadata: dict, degraded: bool = False) -> dict:
    """Huey's error metadata plus which task failed, its arguments, attempts and when."""
    kwargs = {k: v for k, v in dict(task.kwargs or {}).items() if k != "task"}
    attempt = kwargs.get("attempt", 1)
    return {
        **metadata,
        "task": registry_name(task),
        "args": list(task.args or ()),
        "kwargs": kwargs,
        "attempts": attempt if isinstance(attempt, int) else 1,
        "failed_at": time.time(),
        "degraded": degraded,
    }


# -- reading the queue ------------------------------------------------------------------------


class QueueError(Exception):
    """Something the user asked that cannot be done; str() says why and what to do."""


class QueueUnavailable(QueueError):
    """The configured storage cannot be read (Redis down, a locked or broken file)."""


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _eta_seconds(eta: Any) -> float | None:
    """Huey's etas are naive UTC datetimes (utc=True)."""
    if eta is None:
        return None
    if eta.tzinfo is None:
        eta = eta.replace(tzinfo=timezone.utc)
    return eta.timestamp()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


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
            "id": self.id, "task": self.name, "args": _jsonable(list(self.args)),
            "kwargs": _jsonable(self.kwargs), "enqueued_at": _iso(self.created_at),
            "eta": _iso(self.eta), "due": self.is_due(now),
            "waiting_seconds": None if waited is None else round(waited, 3),
            "priority": self.priority, "revoked": self.revoked,
        }


@dataclass
class Failure:
    """A failed job, from the Error Huey keeps as its result."""

    id: str
    task: str | None  # registry name; None in records older than this module
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

    def to_dict(self, now: float) -> dict:
        return {
            "id": self.id, "task": short_name(self.task), "args": _jsonable(list(self.args)),
            "kwargs": _jsonable(self.kwargs), "error": self.error, "traceback": self.traceback,
            "attempts": self.attempts, "failed_at": _iso(self.failed_at),
            "age_seconds": None if self.failed_at is None else round(now - self.failed_at, 3),
            "degraded": self.degraded,
        }

    @classmethod
    def from_error(cls, key: str, error: Error) -> Failure:
        meta = error.metadata if isinstance(error.metadata, dict) else {}
        failed_at = meta.get("failed_at")
        return cls(
            id=str(meta.get("task_id") or key), task=meta.get("task"),
            args=tuple(meta.get("args") or ()), kwargs=dict(meta.get("kwargs") or {}),
            error=str(meta.get("error", "")), traceback=str(meta.get("traceback") or ""),
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

    def __init__(self, config: Any) -> None:
        from app.db import QUEUE_DB

        self.config = config
        self.backend = config.queue.backend
        if self.backend == "redis":
            self.location = redacted(config.queue.redis_url)
            self.exists = True
        else:
            path = config.data_dir / QUEUE_DB
            self.location = str(path)
            self.exists = path.exists()
        self._huey: Any = None

    @property
    def huey(self) -> Any:
        if self._huey is None:
            from workers.queue import configure

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
            except Exception:  # not a message we can read; count it, show it as such
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
                        kv.heartbeat = beat if isinstance(beat, dict) else None
                    except Exception:
                        pass
                continue
            if key.startswith(REVOKE_PREFIX):
                kv.revoked.add(key)
                continue
            if key.startswith(("rt:", "chord:")):
                continue
            try:
                value = deserialize(raw)
            except Exception:
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

    def status(self, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        kv = self.key_values()
        pending, scheduled = self.pending(kv), self.scheduled(kv)
        due = [j for j in pending + scheduled if j.is_due(now)]
        waits = [(w, j) for j in due if (w := j.waiting(now)) is not None]
        oldest = max(waits, key=lambda pair: pair[0], default=None)
        by_task: dict[str, dict[str, int]] = {}
        for kind, items in (("pending", pending), ("scheduled", scheduled),
                            ("failed", kv.failures)):
            for item in items:
                counts = by_task.setdefault(item.name, {"pending": 0, "scheduled": 0, "failed": 0})
                counts[kind] += 1
        beat = kv.heartbeat
        last_poll = beat.get("at") if beat else None
        since_poll = None if last_poll is None else max(0.0, now - float(last_poll))
        failed_times = [f.failed_at for f in kv.failures if f.failed_at is not None]
        return {
            "backend": self.backend,
            "location": self.location,
            "pending": len(pending),
            "scheduled": len(scheduled),
            "due": len(due),
            "failed": len(kv.failures),
            "results": kv.results,
            "revoked": sum(j.revoked for j in pending + scheduled),
            "oldest_pending": None if oldest is None else {
                "id": oldest[1].id, "task": oldest[1].name, "waiting_seconds": round(oldest[0], 3)},
            "oldest_failure_age_seconds": (round(now - min(failed_times), 3)
                                           if failed_times else None),
            "by_task": dict(sorted(by_task.items())),
            "locks": kv.locks,
            "worker": {
                "last_poll_at": _iso(last_poll),
                "seconds_since_poll": None if since_poll is None else round(since_poll, 3),
                "pid": beat.get("pid") if beat else None,
                "host": beat.get("host") if beat else None,
                "active": since_poll is not None and since_poll <= ACTIVE_WITHIN_SECONDS,
            },
        }

    # -- steering ---------------------------------------------------------------------------

    def task_names(self) -> dict[str, str]:
        """Every registered task: short name and registry name → registry name."""
        names = {}
        for full in self.huey._registry._registry:
            names[full] = full
            names[short_name(full)] = full
        return names

    def retry(self, ids: list[str] | None) -> tuple[list[dict], list[dict]]:
        """Re-enqueue failed jobs (all with ids=None); (retried, skipped)."""
        failures = {f.id: f for f in self.failures()}
        wanted = list(failures) if ids is None else ids
        registry = self.huey._registry
        retried, skipped = [], []
        for job_id in wanted:
            failure = failures.get(job_id)
            if failure is None:
                skipped.append({"id": job_id, "reason": "no failed job has this id "
                                "(see `hilo queue failed`)"})
                continue
            if failure.task is None:
                skipped.append({"id": job_id, "reason": "its failure record does not say which "
                                "task failed (recorded before Hilo kept that); the reconcile "
                                "sweep redoes its work"})
                continue
            try:
                task_class = registry.string_to_task(failure.task)
            except Exception:
                skipped.append({"id": job_id, "reason": f"task {failure.task} no longer exists"})
                continue
            kwargs = {k: v for k, v in failure.kwargs.items() if k != "attempt"}
            task = task_class(tuple(failure.args), kwargs)
            self._call(self.huey.enqueue, task)
            self._call(self.huey.delete, job_id)
            retried.append({"id": job_id, "new_id": task.id, "task": failure.name})
        return retried, skipped

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

    def revoke_task(self, name: str) -> list[Job]:
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
        return revoked

    def flush(self) -> dict:
        """Huey's flush(), keeping the worker's own state; what was dropped, counted."""
        if not self.exists:
            return {"pending": 0, "scheduled": 0, "failed": 0, "results": 0, "revoke_flags": 0,
                    "kept": []}
        kv = self.key_values()
        counts = {"pending": self._call(self.huey.pending_count),
                  "scheduled": self._call(self.huey.scheduled_count),
                  "failed": len(kv.failures), "results": kv.results,
                  "revoke_flags": len(kv.revoked)}
        self._call(self.huey.flush)
        for key, raw in kv.state.items():
            self._call(self.huey.storage.put_data, key, raw)
        return {**counts, "kept": sorted(kv.state)}


def _is_storage_error(exc: Exception) -> bool:
    import apsw

    if isinstance(exc, apsw.Error):
        return True
    try:
        from redis.exceptions import RedisError
    except ImportError:  # pragma: no cover — redis is a dependency
        return False
    return isinstance(exc, (RedisError, ConnectionError, TimeoutError, OSError))


# -- the command --------------------------------------------------------------------------------


def add_queue_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add `queue` and its actions to the `hilo` subparsers; `parents` give --data-dir,
    --config and --json."""
    queue = sub.add_parser("queue", help="inspect and steer the job queue (the worker may be "
                           "stopped)", description="The job queue, read from Huey's own "
                           "storage (queue.sqlite3 or Redis); works with the worker stopped.")
    actions = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    actions.add_parser("status", parents=parents, help="counts, oldest pending job, failures, "
                       "whether a worker polls")
    for name, text in (("pending", "jobs waiting to run, in the order they run"),
                       ("scheduled", "jobs waiting for their time (retries with backoff)"),
                       ("failed", "failed jobs: task, arguments, error, traceback, attempts")):
        listing = actions.add_parser(name, parents=parents, help=text)
        listing.add_argument("--task", help="only this task (distill, compact, diary, embed, …)")
        listing.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                             help=f"show at most N (default {DEFAULT_LIMIT}; 0: all)")
    retry = actions.add_parser("retry", parents=parents,
                               help="re-enqueue failed jobs with their original arguments")
    retry.add_argument("id", nargs="*", help="failed jobs' ids (see `hilo queue failed`)")
    retry.add_argument("--all-failed", action="store_true", help="every failed job")
    revoke = actions.add_parser("revoke", parents=parents,
                                help="drop pending or scheduled jobs before they run")
    revoke.add_argument("id", nargs="*", help="jobs' ids (see `hilo queue pending`)")
    revoke.add_argument("--task", help="every pending and scheduled job of this task")
    flush = actions.add_parser("flush", parents=parents, help="delete every pending, scheduled "
                               "and failed job and stored result (needs --yes)")
    flush.add_argument("--yes", action="store_true", help="yes, delete them")
    return queue


class UsageError(QueueError):
    """Arguments that do not make a request (exit status 2)."""


def queue_command(args: argparse.Namespace, config: Any) -> int:
    """`hilo queue ACTION`: human tables (rich) by default, one JSON document with --json.

    Exit status: 0 done; 1 the queue cannot be read or a job/task was not found (also
    when some of several ids were); 2 a malformed request (flush without --yes, retry
    with neither ids nor --all-failed).
    """
    action = args.queue_command
    as_json = bool(getattr(args, "json", False))
    view = QueueView(config)
    now = time.time()
    try:
        document, human, status = _ACTIONS[action](view, args, now)
    except QueueError as exc:
        if as_json:
            _print_json({"ok": False, "error": str(exc)})
        print(f"hilo queue {action}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    if as_json:
        _print_json(document)
    else:
        human(_console())
    return status


def _print_json(document: Any) -> None:
    json.dump(document, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")


def _console() -> Any:
    from rich.console import Console

    # Full ids must stay copyable: wide when not on a terminal (pipes, files, tests).
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def _call_text(args: Iterable[Any], kwargs: dict, width: int = 80) -> str:
    text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(*columns: str) -> Any:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        if column == "id":
            table.add_column(column, no_wrap=True, min_width=36)
        else:
            table.add_column(column, overflow="fold")
    return table


def _text(value: Any) -> Any:
    from rich.text import Text

    return Text("-" if value is None else str(value))  # never parsed as markup


def _filtered(jobs: list, task: str | None) -> list:
    if not task:
        return jobs
    return [j for j in jobs if task in (j.name, j.task)]


def _limited(items: list, limit: int | None) -> list:
    return items if not limit or limit <= 0 else items[:limit]


def _status(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
    doc = view.status(now)

    def human(console: Any) -> None:
        console.print(_text(f"Queue: {doc['backend']}, {doc['location']}"))
        worker = doc["worker"]
        if worker["last_poll_at"] is None:
            line = "Worker: no worker has polled this queue — start one: hilo worker"
        elif worker["active"]:
            line = (f"Worker: polled {_ago(worker['seconds_since_poll'])} ago "
                    f"(pid {worker['pid']} on {worker['host']})")
        else:
            line = (f"Worker: none polling — the last poll was "
                    f"{_ago(worker['seconds_since_poll'])} ago (pid {worker['pid']} on "
                    f"{worker['host']}); start one: hilo worker")
        console.print(_text(line))
        oldest = doc["oldest_pending"]
        waiting = (f"; the oldest, {oldest['task']}, waiting {_ago(oldest['waiting_seconds'])}"
                   if oldest else "")
        console.print(_text(
            f"Pending {doc['pending']} ({doc['due']} due{waiting}) · scheduled {doc['scheduled']}"
            f" · failed {doc['failed']} · results {doc['results']}"
            + (f" · revoked {doc['revoked']}" if doc["revoked"] else "")))
        if doc["by_task"]:
            table = _table("task", "pending", "scheduled", "failed")
            for name, counts in doc["by_task"].items():
                table.add_row(_text(name), *(_text(counts[k])
                                             for k in ("pending", "scheduled", "failed")))
            console.print(table)
        if doc["failed"]:
            console.print(_text("See `hilo queue failed`; retry with "
                                "`hilo queue retry --all-failed`."))
        if doc["locks"]:
            console.print(_text("Locks held: " + ", ".join(doc["locks"])))

    return doc, human, 0


def _jobs(where: str) -> Any:
    def action(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
        jobs = _filtered(view.pending() if where == "pending" else view.scheduled(), args.task)
        shown = _limited(jobs, args.limit)
        doc = {"total": len(jobs), "jobs": [j.to_dict(now) for j in shown]}

        def human(console: Any) -> None:
            if not jobs:
                of = f" of {args.task}" if args.task else ""
                console.print(_text(f"No {where} jobs{of}."))
                return
            if where == "pending":
                table = _table("id", "task", "arguments", "waiting", "note")
                for j in shown:
                    note = "revoked" if j.revoked else (
                        "" if j.is_due(now) else f"not before {_iso(j.eta)}")
                    table.add_row(_text(j.id), _text(j.name), _text(_call_text(j.args, j.kwargs)),
                                  _text(_ago(j.waiting(now))), _text(note))
            else:
                table = _table("id", "task", "arguments", "runs at", "note")
                for j in shown:
                    runs = f"{_iso(j.eta)} (in {_ago(j.eta - now)})" if j.eta and j.eta > now else (
                        f"{_iso(j.eta)} (overdue {_ago(now - j.eta)})" if j.eta else "-")
                    table.add_row(_text(j.id), _text(j.name), _text(_call_text(j.args, j.kwargs)),
                                  _text(runs), _text("revoked" if j.revoked else ""))
            console.print(table)
            if len(shown) < len(jobs):
                console.print(_text(f"… {len(jobs) - len(shown)} more (--limit 0 shows all)"))

        return doc, human, 0

    return action


def _failed(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
    failures = _filtered(view.failures(), args.task)
    shown = _limited(failures, args.limit)
    doc = {"total": len(failures), "jobs": [f.to_dict(now) for f in shown]}

    def human(console: Any) -> None:
        if not failures:
            console.print(_text("No failed jobs" + (f" of {args.task}." if args.task else ".")))
            return
        table = _table("id", "task", "arguments", "attempts", "failed", "error")
        for f in shown:
            failed = "-" if f.failed_at is None else f"{_ago(now - f.failed_at)} ago"
            table.add_row(_text(f.id), _text(f.name), _text(_call_text(f.args, f.kwargs)),
                          _text(f.attempts), _text(failed),
                          _text(f.error + (" (fallback written)" if f.degraded else "")))
        console.print(table)
        for f in shown:
            if f.traceback.strip():
                console.print(_text(f"\nTraceback of {f.id} ({f.name}):"))
                console.print(_text(f.traceback.rstrip()))
        if len(shown) < len(failures):
            console.print(_text(f"… {len(failures) - len(shown)} more (--limit 0 shows all)"))
        console.print(_text("Retry: hilo queue retry <id>, or hilo queue retry --all-failed"))

    return doc, human, 0


def _retry(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
    if bool(args.id) == bool(args.all_failed):
        raise UsageError("give failed jobs' ids, or --all-failed (see `hilo queue failed`)")
    retried, skipped = view.retry(None if args.all_failed else list(args.id))
    doc = {"retried": retried, "skipped": skipped}

    def human(console: Any) -> None:
        if not retried and not skipped:
            console.print(_text("No failed jobs to retry."))
        for r in retried:
            console.print(_text(f"Retried {r['id']} ({r['task']}) as {r['new_id']}"))
        for s in skipped:
            console.print(_text(f"Skipped {s['id']}: {s['reason']}"))

    return doc, human, 1 if skipped else 0


def _revoke(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
    if bool(args.id) == bool(args.task):
        raise UsageError("give jobs' ids, or --task NAME (see `hilo queue pending`)")
    if args.task:
        jobs = view.revoke_task(args.task)
        missing: list[str] = []
    else:
        jobs, missing = [], []
        for job_id in args.id:
            try:
                jobs.append(view.revoke(job_id))
            except QueueUnavailable:
                raise
            except QueueError:
                missing.append(job_id)
    doc = {"revoked": [{"id": j.id, "task": j.name, "where": j.where} for j in jobs],
           "not_found": missing}

    def human(console: Any) -> None:
        if not jobs and not missing:
            console.print(_text(f"No pending or scheduled {args.task} jobs."))
        for j in jobs:
            console.print(_text(f"Revoked {j.id} ({j.name}, {j.where})"))
        if jobs:
            console.print(_text("A worker drops revoked jobs when it reaches them; until then "
                                "they are listed as revoked."))
        for job_id in missing:
            console.print(_text(f"Not found: {job_id} is neither pending nor scheduled"))

    return doc, human, 1 if missing else 0


def _flush(view: QueueView, args: argparse.Namespace, now: float) -> tuple:
    if not args.yes:
        status = view.status(now)
        raise UsageError(
            f"refusing to flush without --yes: it would delete {status['pending']} pending and "
            f"{status['scheduled']} scheduled jobs, {status['failed']} failure records and "
            f"{status['results']} results")
    counts = view.flush()
    doc = {"flushed": {k: v for k, v in counts.items() if k != "kept"}, "kept": counts["kept"]}

    def human(console: Any) -> None:
        console.print(_text(
            f"Flushed {counts['pending']} pending and {counts['scheduled']} scheduled jobs, "
            f"{counts['failed']} failure records, {counts['results']} results, "
            f"{counts['revoke_flags']} revoke flags."))
        if counts["kept"]:
            console.print(_text("Kept the worker's state: " + ", ".join(counts["kept"])))
        console.print(_text("The reconcile sweep re-enqueues whatever the memory still needs."))

    return doc, human, 0


_ACTIONS = {
    "status": _status,
    "pending": _jobs("pending"),
    "scheduled": _jobs("scheduled"),
    "failed": _failed,
    "retry": _retry,
    "revoke": _revoke,
    "flush": _flush,
}
