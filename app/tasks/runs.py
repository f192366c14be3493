"""A scheduled task's runs: asking for one, claiming a due one, finishing it, and reading
them back for `hilo tasks log`.

What happens to each occurrence of a task is a row in `task_runs`
(migrations/0002_task_runs.sql): the claim, the attempts, the last error. Every run is a
turn in the task's own session, `task:<id>`, so `task_log` reads its reply back there.

Claiming is the one delicate part. `claim_next_run` inserts the run row for the due
occurrence — UNIQUE (task_id, scheduled_for) — in the same transaction that moves the
task's `next_run_at` past now, so two consumers never run one occurrence twice, and a
task missed during downtime runs once, not once per missed slot. A failed run is retried
with backoff in its own row and never holds up other tasks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import apsw

from app.config import Config
from app.events import Event, session_events
from app.tasks.schedule import next_occurrence
from app.tasks.store import (
    MAX_ROWID,
    ScheduledTask,
    TaskNotFound,
    follow_zone_change,
    get_task,
    moment_or_now,
    select_tasks,
    task_id_of,
    task_session_id,
)
from app.timeutil import to_rfc3339
from app.writer import Writer

__all__ = ["RETRY_BASE", "RETRY_MAX", "STALE_RUN_AFTER", "TaskRun", "TaskLog", "Claim",
           "TaskRunResult", "task_runs", "task_log", "request_run", "claim_next_run",
           "claim_task_now", "retry_delay", "finish_run"]

# A failed run waits 1, 2, 4, ... minutes (at most an hour) before its next attempt, up to
# [queue] max_attempts attempts. The scheduler looks once a minute, so shorter waits
# would not be kept anyway.
RETRY_BASE = timedelta(minutes=1)
RETRY_MAX = timedelta(hours=1)
# A run still marked running after this long was cut off (its worker was killed): it
# counts as a failed attempt and is retried.
STALE_RUN_AFTER = timedelta(hours=1)


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
    # Delivery (migrations/0007_forget_and_delivery.sql, 0008_task_run_delivery.sql): when a `hilo chat` showed it, when the webhook
    # took it or why it did not.
    delivered_at: str | None = None
    notified_at: str | None = None
    notify_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


# ----------------------------------------------------------------------------- reads


_RUN_COLUMNS = ("id, user_id, task_id, scheduled_for, kind, started_at, finished_at, status, "
                "error, attempts, retry_at, session_id, delivered_at, notified_at, notify_error")


def _row_to_run(row: tuple) -> TaskRun:
    return TaskRun(*row)


def _load_run(con: apsw.Connection, run_id: int) -> TaskRun:
    return _row_to_run(con.execute(f"SELECT {_RUN_COLUMNS} FROM task_runs WHERE id = ?",
                                   (run_id,)).fetchone())


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
        task: ScheduledTask | None = get_task(con, user_id, ref)
        task_id = task.id
    except TaskNotFound:
        task_id_or_none = task_id_of(ref)
        if task_id_or_none is None or task_id_or_none > MAX_ROWID:
            raise
        task, task_id = None, task_id_or_none
    found_runs = task_runs(con, user_id, task_id, runs)
    found_events = session_events(con, user_id, task_session_id(task_id), limit=events)
    if task is None and not found_runs and not found_events:
        raise TaskNotFound(f"no scheduled task #{task_id}, and no runs of one: "
                           "`hilo tasks list` shows the ids")
    return TaskLog(task_id, task, found_runs, found_events)


# ----------------------------------------------------------------------------- claiming


def request_run(writer: Writer, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> TaskRun:
    """Ask the worker to run the task once, now (at its next tick), even if paused.
    Its schedule is unchanged. `workers.scheduler.run_task_now` runs it in-process instead."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> TaskRun:
        task = get_task(con, user_id, ref)
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
        task = get_task(con, user_id, ref)
        con.execute(
            "INSERT INTO task_runs (user_id, task_id, scheduled_for, kind, started_at, status, "
            "attempts, session_id) VALUES (?, ?, ?, 'manual', ?, 'running', 1, ?)",
            (task.user_id, task.id, stamp, stamp, task.session_id))
        return Claim(task, _load_run(con, con.last_insert_rowid()))

    return writer.submit(write)


def _claim(con: apsw.Connection, config: Config, now: datetime) -> Claim | None:
    """The next run to do: one already waiting (queued, retrying, cut off), else the
    earliest occurrence now due."""
    waiting = _claim_waiting_run(con, config, now)
    if waiting is not None:
        return waiting
    follow_zone_change(con, config.schedule.timezone)
    return _start_due_occurrence(con, config, now)


def _claim_waiting_run(con: apsw.Connection, config: Config, now: datetime) -> Claim | None:
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
            return None
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
        return Claim(get_task(con, run.user_id, run.task_id), run)


def _start_due_occurrence(con: apsw.Connection, config: Config, now: datetime) -> Claim | None:
    stamp = to_rfc3339(now)
    stale = to_rfc3339(now - STALE_RUN_AFTER)
    while True:
        due = select_tasks(
            con, "WHERE t.is_paused = 0 AND t.next_run_at IS NOT NULL "
            "AND t.next_run_at <= ? ORDER BY t.next_run_at, t.id LIMIT 1", (stamp,))
        if not due:
            return None
        task = due[0]
        scheduled_for = task.next_run_at
        assert scheduled_for is not None
        next_run, error = _next_run(task, config, now)
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
        return Claim(task, _load_run(con, con.last_insert_rowid()))


def _next_run(task: ScheduledTask, config: Config, now: datetime) -> tuple[str | None, str | None]:
    """The task's next occurrence after `now` (None for a one-shot), or why there is none."""
    if task.is_oneshot:
        return None, None
    try:
        return to_rfc3339(next_occurrence(task.cron_expr, task.zone(config), now)), None
    except (ValueError, KeyError) as exc:  # a cron edited by hand: stop, say so, go on
        return None, (f'cannot compute the next run of "{task.cron_expr}" ({exc}): '
                      "remove the task and add it again")


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
