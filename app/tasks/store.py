"""Scheduled tasks: the store behind `hilo tasks`, the REPL's /tasks, the HTTP API and the
worker's scheduler (workers/scheduler.py).

A task is a prompt and a schedule (app/tasks/schedule.py) in `scheduled_tasks`; what happens
to each of its occurrences is a row in `task_runs` (migrations/0002_task_runs.sql):
the claim, the attempts, the last error. Every run is a turn in the task's own session,
`task:<id>`, so its reply is stored, distilled and remembered like any turn, and
`task_log` reads it back.

Claiming is the one delicate part. `claim_next_run` inserts the run row for the due
occurrence — UNIQUE (task_id, scheduled_for) — in the same transaction that moves the
task's `next_run_at` past now, so two consumers never run one occurrence twice, and a
task missed during downtime runs once, not once per missed slot. A failed run is retried
with backoff in its own row and never holds up other tasks.

Writes go through a Writer (`writer.submit`); reads take any connection, so the
front-ends pass their read-only ones. `source` is "tool" for tasks made through the CLI,
the API or the agent's tool, and "config" for `[[scheduled_tasks]]` in config.toml,
which `sync_config_tasks` keeps in step with the file at every worker start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import apsw

from app.config import Config, ConfigError
from app.errors import InvalidInput, NotFound
from app.events import Event, session_events
from app.sanitize import redact_secrets
from app.tasks.schedule import (
    Schedule,
    ScheduleError,
    describe_schedule,
    is_fixed_moment,
    next_occurrence,
    parse_schedule,
)
from app.timeutil import parse_rfc3339, to_rfc3339
from app.writer import Writer

SESSION_PREFIX = "task:"
MAX_NAME_CHARS = 80
MAX_PROMPT_CHARS = 8_000
# Keys of a [[scheduled_tasks]] entry in config.toml.
CONFIG_TASK_KEYS = ("name", "schedule", "prompt", "oneshot", "trusted", "paused", "user")
# A failed run waits 1, 2, 4, ... minutes (at most an hour) before its next attempt, up to
# [queue] max_attempts attempts. The scheduler looks once a minute, so shorter waits
# would not be kept anyway.
RETRY_BASE = timedelta(minutes=1)
RETRY_MAX = timedelta(hours=1)
# A run still marked running after this long was cut off (its worker was killed): it
# counts as a failed attempt and is retried.
STALE_RUN_AFTER = timedelta(hours=1)



class TaskError(InvalidInput, ValueError):
    """A request about tasks that cannot be done as asked; str() says why and what to do."""

    code = "invalid_task"


class TaskNotFound(TaskError, NotFound):
    http_status = NotFound.http_status
    code = NotFound.code
    pass


@dataclass(frozen=True)
class ScheduledTask:
    id: int
    user_id: str
    name: str
    cron_expr: str
    original_schedule: str
    prompt: str
    source: str
    is_oneshot: bool
    is_paused: bool
    is_trusted: bool
    next_run_at: str | None
    last_run_at: str | None
    created_at: str
    updated_at: str
    # From its latest run, if any.
    last_status: str | None = None
    last_error: str | None = None
    retry_at: str | None = None
    # Its own time zone (migration 0005); None: it follows [schedule] timezone.
    timezone: str | None = None

    @property
    def session_id(self) -> str:
        return task_session_id(self.id)

    def zone(self, config: Config) -> str:
        """The time zone its schedule is read in."""
        return self.timezone or config.schedule.timezone

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "session_id": self.session_id}


@dataclass(frozen=True)
class TaskRun:
    id: int
    user_id: str
    task_id: int
    scheduled_for: str
    kind: str  # "schedule" | "manual"
    started_at: str | None
    finished_at: str | None
    status: str
    error: str | None
    attempts: int
    retry_at: str | None
    session_id: str
    # Delivery (migrations/0007, 0008): when a `hilo chat` showed it, when the webhook
    # took it or why it did not.
    delivered_at: str | None = None
    notified_at: str | None = None
    notify_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AddedTask:
    task: ScheduledTask
    description: str  # "Runs at 09:00, Monday through Friday, Europe/Madrid; next: …"

    def to_json(self) -> dict[str, Any]:
        return {**self.task.to_json(), "description": self.description}


@dataclass(frozen=True)
class TaskLog:
    """A task's runs (newest first) and its session's events (oldest first). `task` is
    None when the task is gone (removed, or a one-shot that ran); its log stays."""

    task_id: int
    task: ScheduledTask | None
    runs: list[TaskRun]
    events: list[Event]

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task": self.task.to_json() if self.task else None,
            "runs": [r.to_json() for r in self.runs],
            "events": [{"id": e.id, "role": e.role, "content": e.content,
                        "created_at": e.created_at} for e in self.events],
        }


@dataclass(frozen=True)
class Claim:
    """A run this consumer owns: the task as it was when claimed, and the run row."""

    task: ScheduledTask
    run: TaskRun


@dataclass(frozen=True)
class TaskRunResult:
    """What the scheduler did with one claimed run."""

    task_id: int
    user_id: str
    name: str
    run_id: int
    session_id: str
    scheduled_for: str
    kind: str
    status: str  # "done", "retrying" or "failed"
    attempts: int
    trusted: bool
    reply: str | None = None
    error: str | None = None
    retry_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SyncCounts:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    expired: int = 0  # one-shots in the file whose time passed before they were added

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class ConfigTask:
    """A validated `[[scheduled_tasks]]` entry."""

    user_id: str
    name: str
    schedule: Schedule
    prompt: str
    trusted: bool = False
    paused: bool = False


def task_session_id(task_id: int) -> str:
    return f"{SESSION_PREFIX}{task_id}"


def is_task_session(session_id: str) -> bool:
    """Whether the session holds a scheduled task's runs (its prompts are instructions)."""
    return session_id.startswith(SESSION_PREFIX)


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(timezone.utc)


# ----------------------------------------------------------------------------- reads


_TASK_COLUMNS = (
    "t.id, t.user_id, t.name, t.cron_expr, t.original_schedule, t.prompt, t.source, "
    "t.is_oneshot, t.is_paused, t.is_trusted, t.next_run_at, t.last_run_at, t.created_at, "
    "t.updated_at, r.status, r.error, r.retry_at, t.timezone"
)
# Each task with its latest run.
_TASK_SELECT = (
    f"SELECT {_TASK_COLUMNS} FROM scheduled_tasks t "
    "LEFT JOIN task_runs r ON r.id = (SELECT max(id) FROM task_runs WHERE task_id = t.id)"
)


def _row_to_task(row: tuple) -> ScheduledTask:
    (id_, user_id, name, cron_expr, original, prompt, source, oneshot, paused, trusted,
     next_run_at, last_run_at, created_at, updated_at, status, error, retry_at, zone) = row
    return ScheduledTask(
        id=id_, user_id=user_id, name=name, cron_expr=cron_expr, original_schedule=original,
        prompt=prompt, source=source, is_oneshot=bool(oneshot), is_paused=bool(paused),
        is_trusted=bool(trusted), next_run_at=next_run_at, last_run_at=last_run_at,
        created_at=created_at, updated_at=updated_at, last_status=status, last_error=error,
        retry_at=retry_at, timezone=zone,
    )


_RUN_COLUMNS = ("id, user_id, task_id, scheduled_for, kind, started_at, finished_at, status, "
                "error, attempts, retry_at, session_id, delivered_at, notified_at, notify_error")


def _row_to_run(row: tuple) -> TaskRun:
    return TaskRun(*row)


def list_tasks(con: apsw.Connection, user_id: str) -> list[ScheduledTask]:
    """The user's tasks, soonest first (paused and finished ones last), each with its
    latest run's status and error."""
    rows = con.execute(
        f"{_TASK_SELECT} WHERE t.user_id = ? "
        "ORDER BY t.is_paused, t.next_run_at IS NULL, t.next_run_at, t.id", (user_id,))
    return [_row_to_task(r) for r in rows]


def get_task(con: apsw.Connection, user_id: str, ref: int | str) -> ScheduledTask:
    """A task by id (7, "7", "#7") or by its name; TaskNotFound names what exists."""
    return _resolve(con, user_id, ref)


def _resolve(con: apsw.Connection, user_id: str, ref: int | str) -> ScheduledTask:
    task_id = _as_id(ref)
    if task_id is not None:
        row = con.execute(f"{_TASK_SELECT} WHERE t.user_id = ? AND t.id = ?",
                          (user_id, task_id)).fetchone() if task_id <= MAX_ROWID else None
        if row is None:
            raise TaskNotFound(f"no scheduled task #{task_id}: `hilo tasks list` shows the ids")
        return _row_to_task(row)
    rows = list(con.execute(f"{_TASK_SELECT} WHERE t.user_id = ? AND t.name = ? ORDER BY t.id",
                            (user_id, str(ref).strip())))
    if not rows:
        raise TaskNotFound(f'no scheduled task named "{ref}": `hilo tasks list` shows them')
    if len(rows) > 1:
        ids = ", ".join(f"#{r[0]}" for r in rows)
        raise TaskError(f'{len(rows)} tasks are named "{ref}" ({ids}): use the id')
    return _row_to_task(rows[0])


# SQLite's ids are signed 64-bit: a larger number names no task (and would not bind).
MAX_ROWID = 2**63 - 1


def _as_id(ref: int | str) -> int | None:
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref if ref >= 0 else None
    text = str(ref).strip().lstrip("#")
    # ASCII digits only: "²" is a digit to str.isdigit but not to int().
    return int(text) if text.isascii() and text.isdigit() else None


def task_runs(con: apsw.Connection, user_id: str, task_id: int, limit: int = 20) -> list[TaskRun]:
    """A task's runs, newest first."""
    rows = con.execute(
        f"SELECT {_RUN_COLUMNS} FROM task_runs WHERE user_id = ? AND task_id = ? "
        "ORDER BY id DESC LIMIT ?", (user_id, task_id, limit))
    return [_row_to_run(r) for r in rows]


def task_log(con: apsw.Connection, user_id: str, ref: int | str, *, runs: int = 20,
             events: int = 50) -> TaskLog:
    """What a task's runs did: its runs and the turns stored in its session `task:<id>`.

    Works for a task that is gone (removed, or a one-shot that ran) by its id."""
    try:
        task: ScheduledTask | None = _resolve(con, user_id, ref)
        task_id = task.id
    except TaskNotFound:
        task_id_or_none = _as_id(ref)
        if task_id_or_none is None or task_id_or_none > MAX_ROWID:
            raise
        task, task_id = None, task_id_or_none
    found_runs = task_runs(con, user_id, task_id, runs)
    found_events = session_events(con, user_id, task_session_id(task_id), limit=events)
    if task is None and not found_runs and not found_events:
        raise TaskNotFound(f"no scheduled task #{task_id}, and no runs of one: "
                           "`hilo tasks list` shows the ids")
    return TaskLog(task_id, task, found_runs, found_events)


def describe_task(task: ScheduledTask, timezone_name: str) -> str:
    """The schedule in words with the next run, as shown when the task was created; in
    the task's own zone if it has one, else in `timezone_name`."""
    next_run = parse_rfc3339(task.next_run_at) if task.next_run_at else None
    return describe_schedule(task.cron_expr, task.timezone or timezone_name, next_run,
                             oneshot=task.is_oneshot)


# ----------------------------------------------------------------------------- edits


def _clean_prompt(prompt: str) -> str:
    text = redact_secrets(str(prompt)).text.strip()
    if not text:
        raise TaskError("the prompt is empty: say what the task should ask the model")
    if len(text) > MAX_PROMPT_CHARS:
        raise TaskError(f"the prompt has {len(text)} characters; at most {MAX_PROMPT_CHARS}")
    return text


def _clean_name(name: str | None, prompt: str) -> str:
    text = " ".join((name if name is not None else prompt).split())
    if not text:
        raise TaskError("the name is empty")
    if name is None and len(text) > 40:
        text = text[:39].rstrip() + "…"
    if len(text) > MAX_NAME_CHARS:
        raise TaskError(f"the name has {len(text)} characters; at most {MAX_NAME_CHARS}")
    return text


def _next_task_id(con: apsw.Connection) -> int:
    # Above every id a run ever had, so a new task never inherits a deleted one's session.
    row = con.execute(
        "SELECT max(coalesce((SELECT max(id) FROM scheduled_tasks), 0), "
        "coalesce((SELECT max(task_id) FROM task_runs), 0))").fetchone()
    return row[0] + 1


def _insert_task(con: apsw.Connection, *, user_id: str, name: str, schedule: Schedule,
                 prompt: str, source: str, trusted: bool, paused: bool, now: datetime,
                 timezone_name: str | None = None) -> int:
    task_id = _next_task_id(con)
    next_run = schedule.next_run(now)
    stamp = to_rfc3339(now)
    con.execute(
        "INSERT INTO scheduled_tasks (id, user_id, name, cron_expr, original_schedule, prompt, "
        "source, is_oneshot, is_paused, is_trusted, next_run_at, last_run_at, created_at, "
        "updated_at, timezone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
        (task_id, user_id, name, schedule.cron_expr, schedule.original, prompt, source,
         int(schedule.is_oneshot), int(paused), int(trusted),
         to_rfc3339(next_run) if next_run else None, stamp, stamp, timezone_name))
    return task_id


def add_task(writer: Writer, config: Config, schedule: str, prompt: str, *,
             user_id: str | None = None, name: str | None = None, oneshot: bool = False,
             trusted: bool = False, now: datetime | None = None,
             timezone_name: str | None = None) -> AddedTask:
    """A new task from the CLI, the API or the agent's tool (source "tool").

    `schedule` is cron or plain language (app/tasks/schedule.py), read in `timezone_name`
    (kept with the task), else in [schedule] timezone (followed as it changes).
    Raises ScheduleError (with examples) or TaskError; both are ValueErrors.
    """
    now = _now(now)
    user_id = user_id or config.memory.user_id
    tz = timezone_name or config.schedule.timezone
    parsed = parse_schedule(schedule, tz, now, oneshot=oneshot)
    clean_prompt = _clean_prompt(prompt)
    clean_name = _clean_name(name, clean_prompt)

    def write(con: apsw.Connection) -> ScheduledTask:
        task_id = _insert_task(con, user_id=user_id, name=clean_name, schedule=parsed,
                               prompt=clean_prompt, source="tool", trusted=trusted,
                               paused=False, now=now, timezone_name=timezone_name)
        return _resolve(con, user_id, task_id)

    task = writer.submit(write)
    return AddedTask(task, parsed.describe(now))


def pause_task(writer: Writer, user_id: str, ref: int | str, *,
               now: datetime | None = None) -> ScheduledTask:
    """Stop running the task (and its pending retries) until resumed."""
    stamp = to_rfc3339(_now(now))

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(_resolve(con, user_id, ref), "pause")
        con.execute("UPDATE scheduled_tasks SET is_paused = 1, updated_at = ? WHERE id = ?",
                    (stamp, task.id))
        return _resolve(con, user_id, task.id)

    return writer.submit(write)


def resume_task(writer: Writer, config: Config, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> ScheduledTask:
    """Run the task again. A repeating task skips what it missed while paused (next run:
    the next occurrence after now); a one-shot whose time passed runs at the next tick."""
    now = _now(now)

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(_resolve(con, user_id, ref), "resume")
        if not task.is_paused:
            return task
        next_run = task.next_run_at
        if not task.is_oneshot:
            next_run = to_rfc3339(next_occurrence(task.cron_expr, task.zone(config), now))
        con.execute("UPDATE scheduled_tasks SET is_paused = 0, next_run_at = ?, updated_at = ? "
                    "WHERE id = ?", (next_run, to_rfc3339(now), task.id))
        return _resolve(con, user_id, task.id)

    return writer.submit(write)


def remove_task(writer: Writer, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> ScheduledTask:
    """Delete the task and cancel its pending runs; its log (runs, session) stays."""
    stamp = to_rfc3339(_now(now))

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(_resolve(con, user_id, ref), "remove")
        _delete_task(con, task.id, stamp)
        return task

    return writer.submit(write)


def _owned_by_tool(task: ScheduledTask, action: str) -> ScheduledTask:
    # config.toml owns its tasks: a change made here would be undone at the next worker start.
    if task.source == "config":
        raise TaskError(
            f'task #{task.id} "{task.name}" comes from config.toml: to {action} it, edit its '
            "[[scheduled_tasks]] entry (paused = true, or delete the entry) and restart the worker")
    return task


def _delete_task(con: apsw.Connection, task_id: int, stamp: str) -> None:
    con.execute("DELETE FROM scheduled_tasks WHERE id = ?", (task_id,))
    con.execute(
        "UPDATE task_runs SET status = 'cancelled', finished_at = ?, retry_at = NULL "
        "WHERE task_id = ? AND status IN ('queued', 'retrying')", (stamp, task_id))


def request_run(writer: Writer, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> TaskRun:
    """Ask the worker to run the task once, now (at its next tick), even if paused.
    Its schedule is unchanged. `workers.scheduler.run_task_now` runs it in-process instead."""
    stamp = to_rfc3339(_now(now))

    def write(con: apsw.Connection) -> TaskRun:
        task = _resolve(con, user_id, ref)
        waiting = con.execute(
            f"SELECT {_RUN_COLUMNS} FROM task_runs WHERE task_id = ? AND kind = 'manual' "
            "AND status = 'queued'", (task.id,)).fetchone()
        if waiting is not None:  # asking twice before the worker looks runs it once
            return _row_to_run(waiting)
        con.execute(
            "INSERT INTO task_runs (user_id, task_id, scheduled_for, kind, status, attempts, "
            "session_id) VALUES (?, ?, ?, 'manual', 'queued', 0, ?)",
            (task.user_id, task.id, stamp, task.session_id))
        return _load_run(con, con.last_insert_rowid())

    return writer.submit(write)


def _load_run(con: apsw.Connection, run_id: int) -> TaskRun:
    return _row_to_run(con.execute(f"SELECT {_RUN_COLUMNS} FROM task_runs WHERE id = ?",
                                   (run_id,)).fetchone())


# ----------------------------------------------------------------------------- claiming


def claim_next_run(writer: Writer, config: Config, now: datetime) -> Claim | None:
    """Claim one run to do now, or None when nothing is due.

    In order: a requested or retrying run whose time came, a run left running by a
    killed worker, then the earliest due occurrence of an unpaused task — whose
    `next_run_at` moves, in the same transaction, to its next occurrence after `now`
    (a task missed for hours runs once) or to NULL for a one-shot.
    """
    return writer.submit(lambda con: _claim(con, config, now))


def claim_task_now(writer: Writer, user_id: str, ref: int | str, now: datetime) -> Claim:
    """Claim a manual run of one task, to run in this process right away."""
    stamp = to_rfc3339(now)

    def write(con: apsw.Connection) -> Claim:
        task = _resolve(con, user_id, ref)
        con.execute(
            "INSERT INTO task_runs (user_id, task_id, scheduled_for, kind, started_at, status, "
            "attempts, session_id) VALUES (?, ?, ?, 'manual', ?, 'running', 1, ?)",
            (task.user_id, task.id, stamp, stamp, task.session_id))
        return Claim(task, _load_run(con, con.last_insert_rowid()))

    return writer.submit(write)


def _claim(con: apsw.Connection, config: Config, now: datetime) -> Claim | None:
    stamp = to_rfc3339(now)
    stale = to_rfc3339(now - STALE_RUN_AFTER)
    max_attempts = config.queue.max_attempts
    while True:
        # A retry, or a run cut off, gives way when a later occurrence is already due.
        row = con.execute(
            "SELECT r.id, r.status, r.attempts FROM task_runs r "
            "JOIN scheduled_tasks t ON t.id = r.task_id "
            "WHERE r.status = 'queued' "
            "   OR (((r.status = 'retrying' AND r.retry_at <= ?) "
            "        OR (r.status = 'running' AND r.started_at <= ?)) "
            "       AND t.is_paused = 0 AND NOT coalesce(t.next_run_at <= ?, 0)) "
            "ORDER BY coalesce(r.retry_at, r.started_at, r.scheduled_for), r.id LIMIT 1",
            (stamp, stale, stamp)).fetchone()
        if row is None:
            break
        run_id, status, attempts = row
        if status == "running" and attempts >= max_attempts:
            con.execute(
                "UPDATE task_runs SET status = 'failed', finished_at = ?, error = ? WHERE id = ?",
                (stamp, f"the worker stopped during attempt {attempts} of {max_attempts}; gave up",
                 run_id))
            continue
        con.execute(
            "UPDATE task_runs SET status = 'running', attempts = attempts + 1, started_at = ?, "
            "retry_at = NULL, finished_at = NULL WHERE id = ?", (stamp, run_id))
        run = _load_run(con, run_id)
        return Claim(_resolve(con, run.user_id, run.task_id), run)

    while True:
        row = con.execute(
            f"{_TASK_SELECT} WHERE t.is_paused = 0 AND t.next_run_at IS NOT NULL "
            "AND t.next_run_at <= ? ORDER BY t.next_run_at, t.id LIMIT 1", (stamp,)).fetchone()
        if row is None:
            return None
        task = _row_to_task(row)
        scheduled_for = task.next_run_at
        assert scheduled_for is not None
        error = None
        next_run: str | None = None
        if not task.is_oneshot:
            try:
                next_run = to_rfc3339(
                    next_occurrence(task.cron_expr, task.zone(config), now))
            except (ValueError, KeyError) as exc:  # a cron edited by hand: stop, say so, go on
                error = (f'cannot compute the next run of "{task.cron_expr}" ({exc}): '
                         "remove the task and add it again")
        con.execute("UPDATE scheduled_tasks SET next_run_at = ?, updated_at = ? WHERE id = ?",
                    (next_run, stamp, task.id))
        # An earlier occurrence still retrying (or cut off) gives way to this one: one
        # run, not a backlog.
        con.execute(
            "UPDATE task_runs SET status = 'failed', finished_at = ?, retry_at = NULL, "
            "error = coalesce(error, 'cut off') || ' (no more retries: a later occurrence is due)' "
            "WHERE task_id = ? AND kind = 'schedule' "
            "AND (status = 'retrying' OR (status = 'running' AND started_at <= ?))",
            (stamp, task.id, stale))
        con.execute(
            "INSERT OR IGNORE INTO task_runs (user_id, task_id, scheduled_for, kind, started_at, "
            "finished_at, status, error, attempts, session_id) "
            "VALUES (?, ?, ?, 'schedule', ?, ?, ?, ?, ?, ?)",
            (task.user_id, task.id, scheduled_for, stamp, stamp if error else None,
             "failed" if error else "running", error, 0 if error else 1, task.session_id))
        if con.changes() == 0 or error:
            continue  # someone already ran this occurrence (or it cannot run): look again
        run = _load_run(con, con.last_insert_rowid())
        return Claim(task, run)


def retry_delay(attempt: int) -> timedelta:
    """How long after failed attempt `attempt` (1-based) the next one starts."""
    return min(RETRY_MAX, RETRY_BASE * 2 ** (attempt - 1))


def finish_run(writer: Writer, config: Config, claim: Claim, now: datetime, *,
               error: str | None = None, retryable: bool = False,
               reply_event_id: int | None = None) -> TaskRun:
    """Record how a claimed run ended.

    Success: the run is done, the task's `last_run_at` set, a one-shot deleted. Failure:
    retried after `retry_delay` while `retryable` and attempts remain
    ([queue] max_attempts), else failed for good, its error kept for `hilo tasks list`.
    Either way the run keeps the task's name and its reply's event id, for delivery.
    """
    stamp = to_rfc3339(now)
    run = claim.run

    def write(con: apsw.Connection) -> TaskRun:
        con.execute("UPDATE task_runs SET task_name = ?, reply_event_id = ? WHERE id = ?",
                    (claim.task.name, reply_event_id, run.id))
        if error is None:
            con.execute(
                "UPDATE task_runs SET status = 'done', finished_at = ?, error = NULL, "
                "retry_at = NULL WHERE id = ?", (stamp, run.id))
            if claim.task.is_oneshot:
                con.execute("DELETE FROM scheduled_tasks WHERE id = ? AND is_oneshot = 1",
                            (run.task_id,))
        elif retryable and run.attempts < config.queue.max_attempts:
            con.execute(
                "UPDATE task_runs SET status = 'retrying', error = ?, retry_at = ? WHERE id = ?",
                (error, to_rfc3339(now + retry_delay(run.attempts)), run.id))
        else:
            con.execute(
                "UPDATE task_runs SET status = 'failed', finished_at = ?, error = ?, "
                "retry_at = NULL WHERE id = ?", (stamp, error, run.id))
        con.execute("UPDATE scheduled_tasks SET last_run_at = ?, updated_at = ? WHERE id = ?",
                    (run.started_at or stamp, stamp, run.task_id))
        return _load_run(con, run.id)

    return writer.submit(write)


# ----------------------------------------------------------------------------- import


@dataclass(frozen=True)
class TaskRecord:
    """A task as an export holds it (app/ops/transfer): enough to schedule it again."""

    prompt: str
    schedule: str  # as the user wrote it
    name: str | None = None  # None: from the prompt, as `hilo tasks add` does
    cron_expr: str | None = None  # None: `schedule` is read again (a file a person wrote)
    oneshot: bool = False
    paused: bool = False
    trusted: bool = False
    source: str = "tool"
    task_id: int | None = None  # the id it had, kept when free: its session's log stays its own
    run_once_at: str | None = None  # a one-shot's moment (RFC 3339)
    created_at: str | None = None


def import_task(con: apsw.Connection, config: Config, user_id: str, record: TaskRecord,
                now: datetime | None = None) -> str:
    """Store an exported task unless the same one (name, schedule and prompt) is there:
    "insert" or "unchanged". Runs inside the caller's transaction.

    A repeating task's next run is its next occurrence after now; a one-shot keeps its
    moment (and never runs if that passed). Raises TaskError or ScheduleError for a task
    that cannot run, and TaskError for a config.toml task, which belongs in that file.
    """
    now = _now(now)
    prompt = _clean_prompt(record.prompt)
    name = _clean_name(record.name, prompt)
    tz = config.schedule.timezone
    if record.cron_expr:
        try:
            next_occurrence(record.cron_expr, tz, now)
        except (ValueError, KeyError) as exc:
            raise TaskError(f'"{record.cron_expr}" is not a cron expression Hilo can run '
                            f"({exc})") from None
        run_once = None
        if record.oneshot:
            if not record.run_once_at:
                raise TaskError("a one-shot with no time left to run: nothing to schedule")
            run_once = parse_rfc3339(record.run_once_at)
        schedule = Schedule(" ".join((record.schedule or record.cron_expr).split()),
                            record.cron_expr, tz, run_once)
    else:
        schedule = parse_schedule(record.schedule, tz, now, oneshot=record.oneshot)
    if con.execute("SELECT 1 FROM scheduled_tasks WHERE user_id = ? AND name = ? AND "
                   "original_schedule = ? AND prompt = ?",
                   (user_id, name, schedule.original, prompt)).fetchone():
        return "unchanged"
    if record.source == "config":
        raise TaskError(f'"{name}" comes from the config.toml of the memory it was exported '
                        "from: add its [[scheduled_tasks]] entry to this config.toml to run it here")
    task_id = _insert_task(con, user_id=user_id, name=name, schedule=schedule, prompt=prompt,
                           source="tool", trusted=record.trusted, paused=record.paused, now=now)
    wanted = record.task_id
    if wanted is not None and wanted > 0 and con.execute(
            "SELECT 1 FROM scheduled_tasks WHERE id = ? UNION ALL "
            "SELECT 1 FROM task_runs WHERE task_id = ?", (wanted, wanted)).fetchone() is None:
        con.execute("UPDATE scheduled_tasks SET id = ? WHERE id = ?", (wanted, task_id))
        task_id = wanted
    if record.created_at:
        con.execute("UPDATE scheduled_tasks SET created_at = ? WHERE id = ?",
                    (record.created_at, task_id))
    return "insert"


# ----------------------------------------------------------------------------- delivery


@dataclass(frozen=True)
class RunReport:
    """A run that ended, as the person is told of it: in `hilo chat`, by the webhook,
    on the desktop (workers/notify.py). Kept when its task is gone."""

    run_id: int
    task_id: int
    user_id: str
    name: str
    status: str  # "done" or "failed"
    reply: str | None
    error: str | None
    finished_at: str | None

    @property
    def text(self) -> str:
        """What the run found, or why it failed."""
        if self.status == "done":
            return self.reply or "(no reply)"
        return f"failed: {self.error}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_REPORT_SELECT = (
    "SELECT r.id, r.task_id, r.user_id, coalesce(r.task_name, t.name, 'task #' || r.task_id), "
    "r.status, e.content, r.error, r.finished_at FROM task_runs r "
    "LEFT JOIN scheduled_tasks t ON t.id = r.task_id "
    "LEFT JOIN events e ON e.id = r.reply_event_id"
)
# A run retrying is not news yet; a cancelled one never ran.
_ENDED = "r.status IN ('done', 'failed')"


def run_report(con: apsw.Connection, run_id: int) -> RunReport | None:
    """The run as told to the person; None unless it ended."""
    row = con.execute(f"{_REPORT_SELECT} WHERE r.id = ? AND {_ENDED}", (run_id,)).fetchone()
    return RunReport(*row) if row else None


def has_undelivered(con: apsw.Connection, user_id: str) -> bool:
    """Whether a run ended that no `hilo chat` has shown yet (a cheap read, to poll)."""
    return con.execute(
        "SELECT 1 FROM task_runs r WHERE r.user_id = ? AND r.delivered_at IS NULL "
        f"AND {_ENDED} LIMIT 1", (user_id,)).fetchone() is not None


def take_undelivered(writer: Writer, user_id: str, *, limit: int,
                     now: datetime | None = None) -> tuple[list[RunReport], int]:
    """The runs that ended since a `hilo chat` last showed one: the newest `limit`,
    oldest first, and how many older ones there were. All are marked delivered in the
    same transaction, so two open chats never show one run twice."""
    stamp = to_rfc3339(_now(now))

    def write(con: apsw.Connection) -> tuple[list[RunReport], int]:
        rows = list(con.execute(f"{_REPORT_SELECT} WHERE r.user_id = ? AND r.delivered_at IS NULL "
                                f"AND {_ENDED} ORDER BY r.id", (user_id,)))
        if not rows:
            return [], 0
        con.execute(f"UPDATE task_runs SET delivered_at = ? WHERE id IN "
                    f"({','.join('?' * len(rows))})", (stamp, *(row[0] for row in rows)))
        shown = rows[-limit:] if limit > 0 else []
        return [RunReport(*row) for row in shown], len(rows) - len(shown)

    return writer.submit(write)


def mark_delivered(writer: Writer, run_id: int, now: datetime | None = None) -> None:
    """The person saw this run's result already (`hilo tasks run` printed it)."""
    stamp = to_rfc3339(_now(now))

    def write(con: apsw.Connection) -> None:
        con.execute("UPDATE task_runs SET delivered_at = coalesce(delivered_at, ?) WHERE id = ?",
                    (stamp, run_id))

    writer.submit(write)


def record_notification(writer: Writer, run_id: int, now: datetime, *,
                        error: str | None = None) -> None:
    """How the webhook went for this run: taken (error None), or why not, for `hilo tasks log`."""
    stamp = to_rfc3339(now)

    def write(con: apsw.Connection) -> None:
        con.execute("UPDATE task_runs SET notified_at = ?, notify_error = ? WHERE id = ?",
                    (None if error else stamp, error, run_id))

    writer.submit(write)


# ----------------------------------------------------------------------------- config.toml


def config_tasks(config: Config, now: datetime | None = None) -> list[ConfigTask]:
    """The `[[scheduled_tasks]]` entries of config.toml, validated.

    Keys: name, schedule, prompt (required strings); oneshot, trusted, paused (booleans,
    default false); user (default [memory] user_id). Raises ConfigError naming the entry.
    A one-shot in the file needs an ISO date-time: "tomorrow at 9" or a repeating
    schedule would be re-created at every worker start.
    """
    now = _now(now)
    found: list[ConfigTask] = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(config.scheduled_tasks):
        where = f"scheduled_tasks[{index}]"
        if isinstance(entry.get("name"), str) and entry["name"].strip():
            where += f' ("{entry["name"].strip()}")'
        spec = _config_task(entry, where, config, now)
        key = (spec.user_id, spec.name)
        if key in seen:
            raise ConfigError(f"{where} in config.toml: another entry has the same name; "
                              "names identify config tasks, make them unique")
        seen.add(key)
        found.append(spec)
    return found


def _config_task(entry: Mapping[str, Any], where: str, config: Config, now: datetime) -> ConfigTask:
    unknown = sorted(set(entry) - set(CONFIG_TASK_KEYS))
    if unknown:
        raise ConfigError(f"{where} in config.toml: unknown key {', '.join(unknown)}; "
                          f"an entry has {', '.join(CONFIG_TASK_KEYS)}")

    def text(key: str, default: str | None = None) -> str:
        value = entry.get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}.{key} in config.toml: expected a non-empty string")
        return value.strip()

    def flag(key: str) -> bool:
        value = entry.get(key, False)
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key} in config.toml: expected true or false")
        return value

    name, schedule_text = text("name"), text("schedule")
    user_id = text("user", config.memory.user_id)
    oneshot = flag("oneshot")
    try:
        prompt = _clean_prompt(text("prompt"))
        name = _clean_name(name, prompt)
        # A one-shot whose time passed has run (or was missed): the sync does not re-add it.
        schedule = parse_schedule(schedule_text, config.schedule.timezone, now, allow_past=True)
    except ScheduleError as exc:
        raise ConfigError(f"{where}.schedule in config.toml: {exc}") from None
    except TaskError as exc:
        raise ConfigError(f"{where} in config.toml: {exc}") from None
    if (oneshot or schedule.is_oneshot) and not is_fixed_moment(schedule_text):
        raise ConfigError(
            f'{where}.schedule in config.toml: a one-shot here needs an ISO date-time such as '
            f'"2026-12-01 09:00", not "{schedule_text}": the worker reads the file at every start '
            "and would schedule it again")
    return ConfigTask(user_id, name, schedule, prompt, flag("trusted"), flag("paused"))


def sync_config_tasks(writer: Writer, config: Config,
                      now: datetime | None = None) -> SyncCounts:
    """Make the config tasks in the database match `[[scheduled_tasks]]` (by user and
    name): add new entries, update changed ones, remove the ones no longer in the file.
    Tool tasks are never touched. Run at worker start; raises ConfigError (and changes
    nothing) when an entry is invalid."""
    now = _now(now)
    specs = config_tasks(config, now)
    stamp = to_rfc3339(now)

    def write(con: apsw.Connection) -> SyncCounts:
        counts = SyncCounts()
        existing = {(r.user_id, r.name): r for r in (
            _row_to_task(row) for row in con.execute(f"{_TASK_SELECT} WHERE t.source = 'config'"))}
        for spec in specs:
            current = existing.pop((spec.user_id, spec.name), None)
            next_run = spec.schedule.next_run(now)
            if current is None:
                if spec.schedule.is_oneshot and next_run is None:
                    counts.expired += 1
                    continue
                _insert_task(con, user_id=spec.user_id, name=spec.name, schedule=spec.schedule,
                             prompt=spec.prompt, source="config", trusted=spec.trusted,
                             paused=spec.paused, now=now)
                counts.added += 1
                continue
            wanted = (spec.schedule.cron_expr, spec.schedule.original, spec.prompt,
                      spec.schedule.is_oneshot, spec.paused, spec.trusted)
            have = (current.cron_expr, current.original_schedule, current.prompt,
                    current.is_oneshot, current.is_paused, current.is_trusted)
            if wanted == have:
                counts.unchanged += 1
                continue
            # A new schedule, or a resumed task, starts from now; otherwise keep its place.
            rescheduled = (spec.schedule.cron_expr != current.cron_expr
                           or spec.schedule.is_oneshot != current.is_oneshot
                           or (current.is_paused and not spec.paused))
            next_run_at = (to_rfc3339(next_run) if next_run else None) if rescheduled \
                else current.next_run_at
            con.execute(
                "UPDATE scheduled_tasks SET cron_expr = ?, original_schedule = ?, prompt = ?, "
                "is_oneshot = ?, is_paused = ?, is_trusted = ?, next_run_at = ?, updated_at = ? "
                "WHERE id = ?",
                (spec.schedule.cron_expr, spec.schedule.original, spec.prompt,
                 int(spec.schedule.is_oneshot), int(spec.paused), int(spec.trusted),
                 next_run_at, stamp, current.id))
            counts.updated += 1
        for gone in existing.values():
            _delete_task(con, gone.id, stamp)
            counts.removed += 1
        return counts

    return writer.submit(write)
