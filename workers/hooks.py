"""What `HiloHuey` (workers/queue.py) adds on the enqueue and dequeue path, so that
`hilo queue` (workers/inspection.py) can say what the queue is doing.

Huey stores no enqueue time, no sign of life from the consumer and, for a failed task,
only its error; three cheap hooks add what an operator needs:

- **Enqueue time.** Task ids are UUIDv7 (`TimedTaskWrapper`): the first 48 bits are the
  creation time in ms, so a pending job's age is read from its id. No extra write and
  nothing to clean up. Ids from before this change (uuid4) have no time: their age is
  unknown.
- **Heartbeat.** Every `HiloHuey.dequeue()` — each poll of a worker thread, busy or
  idle — writes `hilo.worker.heartbeat` = {at, pid, host} to Huey's key-value store,
  at most once per HEARTBEAT_EVERY_SECONDS per process (one small write every 10 s
  while idle). A stale heartbeat with jobs due means a stalled worker.
- **Failure records.** `HiloHuey.build_error_result` (unhandled exceptions, recorded by
  Huey) and `queue.record_failure` (degraded jobs) add the task's name, arguments,
  attempts and failure time to Huey's `Error` result, so `hilo queue retry` can
  re-enqueue it; the error is stored as a sentence (`error_sentence`, not Python's
  repr) and, with its traceback, with secrets redacted. Records written before that
  are read as sentences too (`readable_error`).

This module imports nothing from workers.queue: queue.py uses it while it builds the
Huey instance.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import socket
import threading
import time
import uuid
from typing import Any

from huey.api import TaskWrapper

__all__ = ["HEARTBEAT_KEY", "HEARTBEAT_EVERY_SECONDS", "TASK_NAMESPACE", "TASKS_MODULE",
           "new_task_id", "task_id_time", "TimedTaskWrapper", "heartbeat", "registry_name",
           "short_name", "job_purpose", "error_sentence", "readable_error", "redacted_failure",
           "describe_failure"]

HEARTBEAT_KEY = "hilo.worker.heartbeat"
HEARTBEAT_EVERY_SECONDS = 10.0
# Huey names a task "<module>.<function>"; ours keep the module they were first declared
# in, so jobs queued and failures recorded by earlier versions still resolve.
TASK_NAMESPACE = "workers.tasks"
TASKS_MODULE = TASK_NAMESPACE + "."


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
    except Exception:  # noqa: BLE001 — the storage failed right now; the next poll tries again
        with _beat_lock:
            _last_beat = (0, float("-inf"))


def registry_name(task: Any) -> str:
    """How Huey's registry names a task class: "workers.tasks.distill"."""
    cls = task if isinstance(task, type) else type(task)
    return f"{cls.__module__}.{cls.__name__}"


def short_name(name: str | None) -> str | None:
    """A registry name without the tasks module: "distill"."""
    if name and name.startswith(TASKS_MODULE):
        return name[len(TASKS_MODULE):]
    return name


# Each job's arguments by name, and what it does with them, as a person reads it.
_PARAMETERS = {"distill": ("user_id", "session_id", "event_ids"),
               "compact": ("user_id", "session_id"), "diary": ("user_id", "session_id"),
               "embed": ("user_id",), "reconcile": ("grace_seconds",)}
_PURPOSES = {
    "distill": "learn facts from {messages} of session {session_id}",
    "compact": "summarise the oldest messages of session {session_id} into a card",
    "diary": "write the diary entry of session {session_id}",
    "embed": "embed what is new in memory",
    "consolidate": "merge duplicate facts and fold old cards",
    "consolidate_periodically": "merge duplicate facts and fold old cards",
    "reconcile": "look for work the memory says is undone",
    "reconcile_periodically": "look for work the memory says is undone",
    "run_scheduled_tasks": "run the scheduled tasks that are due",
    "run_scheduled_tasks_now": "run the scheduled tasks that came due while no worker ran",
    "learn_macros_periodically": "learn macros from the tool calls made",
}


def job_purpose(name: str, args: tuple, kwargs: dict) -> str:
    """What a job is for, in words: "learn facts from 2 messages of session s1, for
    ana (attempt 2)"; a job Hilo does not know, its arguments as they are."""
    if name not in _PURPOSES:
        shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        return f"{name}({', '.join(shown)})"
    named = dict(zip(_PARAMETERS.get(name, ()), args, strict=False))
    named.update({k: v for k, v in kwargs.items() if k in _PARAMETERS.get(name, ())})
    ids = named.get("event_ids")
    count = len(ids) if isinstance(ids, list) else 0
    messages = f"{count} message{'s' if count != 1 else ''}" if count else "the new messages"
    text = _PURPOSES[name].format(messages=messages,
                                  session_id=named.get("session_id", "?"))
    if named.get("user_id"):
        text += f", for {named['user_id']}"
    attempt = kwargs.get("attempt")
    if isinstance(attempt, int) and attempt > 1:
        text += f" (attempt {attempt})"
    return text




def error_sentence(exc: BaseException) -> str:
    """What went wrong, as a person reads it: Hilo's own errors say it themselves (what
    failed and what to do); any other exception is a bug, and is named as one."""
    from app.errors import HiloError  # start-up: loaded only when a job fails

    if isinstance(exc, HiloError):
        return str(exc)
    return _unexpected(type(exc).__name__, str(exc))


def _unexpected(kind: str, message: str) -> str:
    said = f": {message}" if message else ""
    return f"an unexpected {kind}{said} (a bug in Hilo: the traceback says where)"


# How Huey wrote an error before Hilo stored sentences: its repr, "JobDegraded('…')".
_REPR = re.compile(r"(?s)(?P<kind>[A-Za-z_][\w.]*)\((?P<message>'.*'|\".*\")?\)")


def readable_error(error: str) -> str:
    """A failure record's error as a sentence, whichever Hilo wrote it: an exception's
    repr becomes its message, a Python or library exception's named as unexpected."""
    match = _REPR.fullmatch(error.strip())
    if match is None:
        return error
    try:
        message = ast.literal_eval(match["message"]) if match["message"] else ""
    except (ValueError, SyntaxError):
        return error
    kind = match["kind"]
    if "." in kind or isinstance(getattr(builtins, kind, None), type):
        return _unexpected(kind.rpartition(".")[2], str(message))
    return str(message) or kind


def redacted_failure(metadata: dict) -> dict:
    """Huey's error metadata with secrets redacted from its error and traceback: an
    exception's message (a model's unusable output, say) may quote one."""
    from app.sanitize import redact_secrets  # start-up: loaded only when a job fails

    return {**metadata, **{key: redact_secrets(str(metadata[key])).text
                           for key in ("error", "traceback") if metadata.get(key)}}


def describe_failure(task: Any, metadata: dict, degraded: bool = False) -> dict:
    """Huey's error metadata, redacted, plus which task failed, its arguments, attempts
    and when."""
    kwargs = {k: v for k, v in dict(task.kwargs or {}).items() if k != "task"}
    attempt = kwargs.get("attempt", 1)
    return {
        **redacted_failure(metadata),
        "task": registry_name(task),
        "args": list(task.args or ()),
        "kwargs": kwargs,
        "attempts": attempt if isinstance(attempt, int) else 1,
        "failed_at": time.time(),
        "degraded": degraded,
    }
