"""Scheduled tasks as the database keeps them: the records, the reads and the edits behind
`hilo tasks`, the REPL's /tasks, the HTTP API, the agent's tools and the worker's
scheduler (workers/scheduler.py).

A task is a prompt and a schedule (app/tasks/schedule.py) in `scheduled_tasks`. Every
run is a turn in the task's own session, `task:<id>`, so its reply is stored, distilled
and remembered like any turn; the runs themselves are app/tasks/runs.py.

Writes go through a Writer (`writer.submit`); reads take any connection, so the
front-ends pass their read-only ones. `source` says who added a task (TASK_SOURCES):
the owner at the machine ("cli"), the HTTP API or the memory page ("http"), an MCP
client ("mcp"), the model through Hilo's tasks tool ("tool"), `[[scheduled_tasks]]` in
config.toml ("config", app/tasks/config_tasks.py) or an import ("import"); tasks added
before migration 0026 kept no such record ("unrecorded").

A trusted task's runs may use the terminal without asking. Only the owner at the
machine trusts one (`hilo tasks add --trusted`, `hilo tasks trust`, config.toml): the
HTTP API refuses to, and MCP, the model's tool and imports add tasks untrusted.

Each task records whose hand its prompt is (`from_outside`, app.memory.provenance): the
owner's at the machine or in config.toml, or Hilo's agent's from the owner's words; from
outside for the HTTP API, MCP, an import, or an agent that read outside content, and for
an add that states nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import apsw
from croniter import croniter

from app.config import Config
from app.errors import InvalidInput, NotFound
from app.sanitize import redact_secrets
from app.tasks.schedule import (
    Schedule,
    ScheduleError,
    describe_schedule,
    next_occurrence,
    parse_schedule,
    time_zone,
)
from app.tasks.sessions import task_session_id
from app.timeutil import parse_rfc3339, to_rfc3339
from app.writer import Writer

__all__ = ["TASK_SOURCES", "ADDED_THROUGH", "NO_PROMPT", "MAX_NAME_CHARS", "MAX_PROMPT_CHARS",
           "MAX_ROWID", "TaskError", "TaskNotFound", "ScheduledTask", "AddedTask", "moment_or_now",
           "select_tasks", "list_tasks", "next_run_in", "follow_zone_change", "get_task",
           "task_id_of", "describe_task", "clean_prompt", "clean_name", "insert_task",
           "split_request", "add_task", "pause_task", "resume_task", "trust_task", "remove_task",
           "delete_task", "TaskRecord", "import_task", "task_session_id"]

# Who adds a task, in the words a person reads (the tasks page, `hilo tasks list`).
TASK_SOURCES = {
    "cli": "added at this machine (hilo tasks add)",
    "http": "added over HTTP (the API or the memory page)",
    "mcp": "added by an MCP client",
    "tool": "added by the model, with Hilo's tasks tool",
    "config": "from config.toml",
    "import": "imported",
    "unrecorded": "added before Hilo recorded who adds tasks",
}
# The doors add_task serves; config.toml and imports have their own.
ADDED_THROUGH = ("cli", "http", "mcp", "tool")
# What a task without a prompt is told.
NO_PROMPT = "what should the task do? give a prompt after the schedule"
MAX_NAME_CHARS = 80
MAX_PROMPT_CHARS = 8_000
# SQLite's ids are signed 64-bit: a larger number names no task (and would not bind).
MAX_ROWID = 2**63 - 1


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
    # Its prompt is not the owner's own hand (module docstring; migration 0021).
    from_outside: bool = True

    @property
    def session_id(self) -> str:
        return task_session_id(self.id)

    @property
    def prompt_from_outside(self) -> bool:
        """Whether its prompt is text no person at this machine wrote or authorised (the
        module docstring), until the owner trusts the task (`hilo tasks trust ID`)."""
        return self.from_outside and not self.is_trusted

    def zone(self, config: Config) -> str:
        """The time zone its schedule is read in."""
        return self.timezone or config.schedule.timezone

    @property
    def added_by(self) -> str:
        """Who added it, as a person reads it."""
        return TASK_SOURCES.get(self.source, self.source)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "session_id": self.session_id}


@dataclass(frozen=True)
class AddedTask:
    task: ScheduledTask
    description: str  # "Runs at 09:00, Monday through Friday, Europe/Madrid; next: …"

    def to_json(self) -> dict[str, Any]:
        return {**self.task.to_json(), "description": self.description}


def moment_or_now(now: datetime | None) -> datetime:
    """`now` when the caller (a test, a tick) fixes the moment, else the current UTC time."""
    return now if now is not None else datetime.now(UTC)


# ----------------------------------------------------------------------------- reads


_TASK_COLUMNS = (
    "t.id, t.user_id, t.name, t.cron_expr, t.original_schedule, t.prompt, t.source, "
    "t.is_oneshot, t.is_paused, t.is_trusted, t.next_run_at, t.last_run_at, t.created_at, "
    "t.updated_at, r.status, r.error, r.retry_at, t.timezone, t.from_outside"
)
# Each task with its latest run.
_TASK_SELECT = (
    f"SELECT {_TASK_COLUMNS} FROM scheduled_tasks t "
    "LEFT JOIN task_runs r ON r.id = (SELECT max(id) FROM task_runs WHERE task_id = t.id)"
)


def _row_to_task(row: tuple) -> ScheduledTask:
    (id_, user_id, name, cron_expr, original, prompt, source, oneshot, paused, trusted,
     next_run_at, last_run_at, created_at, updated_at, status, error, retry_at, zone,
     from_outside) = row
    return ScheduledTask(
        id=id_, user_id=user_id, name=name, cron_expr=cron_expr, original_schedule=original,
        prompt=prompt, source=source, is_oneshot=bool(oneshot), is_paused=bool(paused),
        is_trusted=bool(trusted), next_run_at=next_run_at, last_run_at=last_run_at,
        created_at=created_at, updated_at=updated_at, last_status=status, last_error=error,
        retry_at=retry_at, timezone=zone, from_outside=bool(from_outside),
    )


def select_tasks(con: apsw.Connection, clause: str,
                 params: tuple[Any, ...] = ()) -> list[ScheduledTask]:
    """The tasks `clause` picks, each with its latest run's status, error and retry time.
    `clause` follows the FROM: `t` is the task, `r` its latest run ("WHERE t.id = ?")."""
    return [_row_to_task(row) for row in con.execute(f"{_TASK_SELECT} {clause}", params)]


def list_tasks(con: apsw.Connection, user_id: str,
               timezone_name: str | None = None) -> list[ScheduledTask]:
    """The user's tasks, soonest first (paused and finished ones last), each with its
    latest run's status and error; with `timezone_name` ([schedule] timezone), the next
    run of a task that follows it is read in it (`next_run_in`)."""
    found = select_tasks(
        con, "WHERE t.user_id = ? "
        "ORDER BY t.is_paused, t.next_run_at IS NULL, t.next_run_at, t.id", (user_id,))
    if timezone_name is None:
        return found
    return [replace(t, next_run_at=next_run_in(t, timezone_name)) for t in found]


def next_run_in(task: ScheduledTask, timezone_name: str) -> str | None:
    """The task's next run when its schedule is read in `timezone_name`.

    A task without a zone of its own follows [schedule] timezone, and its stored next run
    was computed in the zone of that time. When the zone has changed since (a move, `TZ`),
    that run is no occurrence of the schedule here: the first one in this zone after the
    stored one was computed (the task's last update) is.
    """
    if task.timezone is not None or task.is_oneshot or task.next_run_at is None:
        return task.next_run_at
    local = parse_rfc3339(task.next_run_at).astimezone(time_zone(timezone_name))
    try:
        if croniter.match(task.cron_expr, local):
            return task.next_run_at
        return to_rfc3339(next_occurrence(task.cron_expr, timezone_name,
                                          parse_rfc3339(task.updated_at)))
    except (ValueError, KeyError):  # a cron edited by hand: the tick says so when it is due
        return task.next_run_at


def follow_zone_change(con: apsw.Connection, timezone_name: str) -> None:
    """Store `next_run_in` for every repeating task that follows `timezone_name`, so the
    scheduler runs it by this zone's clock (the worker's tick, before it claims)."""
    for task in select_tasks(con, "WHERE t.timezone IS NULL AND t.is_oneshot = 0 "
                                  "AND t.next_run_at IS NOT NULL"):
        moved = next_run_in(task, timezone_name)
        if moved != task.next_run_at:
            con.execute("UPDATE scheduled_tasks SET next_run_at = ? WHERE id = ?",
                        (moved, task.id))


def get_task(con: apsw.Connection, user_id: str, ref: int | str) -> ScheduledTask:
    """A task by id (7, "7", "#7") or by its name; TaskNotFound names what exists."""
    task_id = task_id_of(ref)
    if task_id is not None:
        found = select_tasks(con, "WHERE t.user_id = ? AND t.id = ?",
                             (user_id, task_id)) if task_id <= MAX_ROWID else []
        if not found:
            raise TaskNotFound(f"no scheduled task #{task_id}: `hilo tasks list` shows the ids")
        return found[0]
    named = select_tasks(con, "WHERE t.user_id = ? AND t.name = ? ORDER BY t.id",
                         (user_id, str(ref).strip()))
    if not named:
        raise TaskNotFound(f'no scheduled task named "{ref}": `hilo tasks list` shows them')
    if len(named) > 1:
        ids = ", ".join(f"#{task.id}" for task in named)
        raise TaskError(f'{len(named)} tasks are named "{ref}" ({ids}): use the id')
    return named[0]


def task_id_of(ref: int | str) -> int | None:
    """The id a reference spells (7, "7", "#7"); None when it is a name."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref if ref >= 0 else None
    text = str(ref).strip().lstrip("#")
    # ASCII digits only: "²" is a digit to str.isdigit but not to int().
    return int(text) if text.isascii() and text.isdigit() else None


def describe_task(task: ScheduledTask, timezone_name: str) -> str:
    """The schedule in words with the next run, as shown when the task was created; in
    the task's own zone if it has one, else in `timezone_name`."""
    next_run = parse_rfc3339(task.next_run_at) if task.next_run_at else None
    return describe_schedule(task.cron_expr, task.timezone or timezone_name, next_run,
                             oneshot=task.is_oneshot)


# ----------------------------------------------------------------------------- edits


def clean_prompt(prompt: str) -> str:
    """A task's prompt as stored: secrets redacted, trimmed; TaskError if empty or too long."""
    text = redact_secrets(str(prompt)).text.strip()
    if not text:
        raise TaskError(f"the prompt is empty: {NO_PROMPT}")
    if len(text) > MAX_PROMPT_CHARS:
        raise TaskError(f"the prompt has {len(text)} characters; at most {MAX_PROMPT_CHARS}")
    return text


def clean_name(name: str | None, prompt: str) -> str:
    """A task's name as stored, from its prompt when None; TaskError if empty or too long."""
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


def insert_task(con: apsw.Connection, *, user_id: str, name: str, schedule: Schedule,
                prompt: str, source: str, trusted: bool, paused: bool, now: datetime,
                from_outside: bool, timezone_name: str | None = None) -> int:
    """Store a task (its name and prompt already clean) in the caller's transaction; its id.
    `from_outside`: its prompt is not the owner's (module docstring)."""
    task_id = _next_task_id(con)
    next_run = schedule.next_run(now)
    stamp = to_rfc3339(now)
    con.execute(
        "INSERT INTO scheduled_tasks (id, user_id, name, cron_expr, original_schedule, prompt, "
        "source, is_oneshot, is_paused, is_trusted, next_run_at, last_run_at, created_at, "
        "updated_at, timezone, from_outside) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
        (task_id, user_id, name, schedule.cron_expr, schedule.original, prompt, source,
         int(schedule.is_oneshot), int(paused), int(trusted),
         to_rfc3339(next_run) if next_run else None, stamp, stamp, timezone_name,
         int(from_outside)))
    return task_id


def split_request(text: str, timezone_name: str, now: datetime) -> tuple[str, str]:
    """A task said in one sentence, "remind me to stretch in 30 seconds" or "every monday
    at 8 plan the week", as (schedule, prompt): the longest end, else the longest start,
    that is a schedule. TaskError when no part of it is one, or all of it is ("every day
    at 9" is not "day at 9" with the prompt "every")."""
    time_zone(timezone_name)  # a bad zone is said as such, not as "found no schedule"
    words = str(text).split()
    try:
        parse_schedule(" ".join(words), timezone_name, now)
    except ScheduleError:
        pass
    else:
        raise TaskError(f'{NO_PROMPT}: "{" ".join(words)}" "water the plants"')
    cuts = [(words[i:], words[:i]) for i in range(1, len(words))]
    cuts += [(words[:i], words[i:]) for i in range(len(words) - 1, 0, -1)]
    for schedule, prompt in cuts:
        try:
            parse_schedule(" ".join(schedule), timezone_name, now)
        except ScheduleError:
            continue
        return " ".join(schedule), " ".join(prompt)
    raise TaskError(f'found no schedule in "{" ".join(words)}": give the schedule and the '
                    'prompt as two arguments, e.g. "in 30 seconds" "remind me to stretch"')


def add_task(writer: Writer, config: Config, schedule: str, prompt: str, *, source: str,
             user_id: str | None = None, name: str | None = None, oneshot: bool = False,
             trusted: bool = False, now: datetime | None = None,
             timezone_name: str | None = None,
             wake: Callable[[datetime], object] | None = None,
             from_outside: bool = True) -> AddedTask:
    """A new task, added through `source` (one of ADDED_THROUGH: who added it).
    `from_outside` (app.memory.provenance.is_outside; unstated: outside): its prompt is
    not the owner's.

    `schedule` is cron or plain language (app/tasks/schedule.py), read in `timezone_name`
    (kept with the task), else in [schedule] timezone (followed as it changes).
    `wake(at)` is called for a one-shot due between the scheduler's minute ticks ("in 30
    seconds"), to have a tick run then (the front-end's Handoff.wake_scheduler).
    Raises ScheduleError (with examples) or TaskError; both are ValueErrors.
    """
    if source not in ADDED_THROUGH:
        raise ValueError(f"add_task: source {source!r} is not one of {ADDED_THROUGH}")
    now = moment_or_now(now)
    user_id = user_id or config.memory.user_id
    tz = timezone_name or config.schedule.timezone
    parsed = parse_schedule(schedule, tz, now, oneshot=oneshot)
    task_prompt = clean_prompt(prompt)
    task_name = clean_name(name, task_prompt)

    def write(con: apsw.Connection) -> ScheduledTask:
        task_id = insert_task(con, user_id=user_id, name=task_name, schedule=parsed,
                              prompt=task_prompt, source=source, trusted=trusted,
                              paused=False, now=now, timezone_name=timezone_name,
                              from_outside=from_outside)
        return get_task(con, user_id, task_id)

    task = writer.submit(write)
    at = parsed.run_once_at
    if wake is not None and at is not None and (at.second or at.microsecond):
        wake(at)
    return AddedTask(task, parsed.describe(now))


def pause_task(writer: Writer, user_id: str, ref: int | str, *,
               now: datetime | None = None) -> ScheduledTask:
    """Stop running the task (and its pending retries) until resumed."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(get_task(con, user_id, ref), "pause")
        con.execute("UPDATE scheduled_tasks SET is_paused = 1, updated_at = ? WHERE id = ?",
                    (stamp, task.id))
        return get_task(con, user_id, task.id)

    return writer.submit(write)


def resume_task(writer: Writer, config: Config, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> ScheduledTask:
    """Run the task again. A repeating task skips what it missed while paused (next run:
    the next occurrence after now); a one-shot whose time passed runs at the next tick."""
    now = moment_or_now(now)

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(get_task(con, user_id, ref), "resume")
        if not task.is_paused:
            return task
        next_run = task.next_run_at
        if not task.is_oneshot:
            next_run = to_rfc3339(next_occurrence(task.cron_expr, task.zone(config), now))
        con.execute("UPDATE scheduled_tasks SET is_paused = 0, next_run_at = ?, updated_at = ? "
                    "WHERE id = ?", (next_run, to_rfc3339(now), task.id))
        return get_task(con, user_id, task.id)

    return writer.submit(write)


def trust_task(writer: Writer, user_id: str, ref: int | str, *, trusted: bool = True,
               now: datetime | None = None) -> ScheduledTask:
    """Let the task's runs use the terminal without asking (or, `trusted=False`, no
    longer). The owner's own act: `hilo tasks trust` and `untrust` call it, nothing else."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(get_task(con, user_id, ref), "trust" if trusted else "untrust",
                              f"trusted = {'true' if trusted else 'false'}")
        con.execute("UPDATE scheduled_tasks SET is_trusted = ?, updated_at = ? WHERE id = ?",
                    (int(trusted), stamp, task.id))
        return get_task(con, user_id, task.id)

    return writer.submit(write)


def remove_task(writer: Writer, user_id: str, ref: int | str, *,
                now: datetime | None = None) -> ScheduledTask:
    """Delete the task and cancel its pending runs; its log (runs, session) stays."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> ScheduledTask:
        task = _owned_by_tool(get_task(con, user_id, ref), "remove")
        delete_task(con, task.id, stamp)
        return task

    return writer.submit(write)


def _owned_by_tool(task: ScheduledTask, action: str,
                   edit: str = "paused = true, or delete the entry") -> ScheduledTask:
    # config.toml owns its tasks: a change made here would be undone at the next worker start.
    if task.source == "config":
        raise TaskError(
            f'task #{task.id} "{task.name}" comes from config.toml: to {action} it, edit its '
            f"[[scheduled_tasks]] entry ({edit}) and restart the worker")
    return task


def delete_task(con: apsw.Connection, task_id: int, stamp: str) -> None:
    """Delete a task and cancel its pending runs, in the caller's transaction."""
    con.execute("DELETE FROM scheduled_tasks WHERE id = ?", (task_id,))
    con.execute(
        "UPDATE task_runs SET status = 'cancelled', finished_at = ?, retry_at = NULL "
        "WHERE task_id = ? AND status IN ('queued', 'retrying')", (stamp, task_id))


# ----------------------------------------------------------------------------- import


@dataclass(frozen=True)
class TaskRecord:
    """A task as an export holds it (app/ops/transfer): enough to schedule it again. Not
    its trust: an imported task arrives untrusted, whatever the file says."""

    prompt: str
    schedule: str  # as the user wrote it
    name: str | None = None  # None: from the prompt, as `hilo tasks add` does
    cron_expr: str | None = None  # None: `schedule` is read again (a file a person wrote)
    oneshot: bool = False
    paused: bool = False
    source: str = "tool"
    task_id: int | None = None  # the id it had, kept when free: its session's log stays its own
    run_once_at: str | None = None  # a one-shot's moment (RFC 3339)
    created_at: str | None = None
    updated_at: str | None = None
    last_run_at: str | None = None
    timezone: str | None = None  # its own zone; None: it follows [schedule] timezone


def import_task(con: apsw.Connection, config: Config, user_id: str, record: TaskRecord,
                now: datetime | None = None) -> tuple[str, ScheduledTask]:
    """Store an exported task, untrusted and marked as imported (its prompt is content from
    outside: ScheduledTask.prompt_from_outside), unless the same one (name, schedule and
    prompt) is there: ("insert" or "unchanged", the task). Runs inside the caller's
    transaction.

    A repeating task's next run is its next occurrence after now, in its own zone if it
    has one; a one-shot keeps its moment (and never runs if that passed); its dates and
    whether it is paused are kept. Raises TaskError or ScheduleError for a task that
    `hilo tasks add` would refuse too, and TaskError for a config.toml task, which
    belongs in that file.
    """
    now = moment_or_now(now)
    prompt = clean_prompt(record.prompt)
    name = clean_name(record.name, prompt)
    tz = record.timezone or config.schedule.timezone
    if record.cron_expr:
        # Read as `hilo tasks add` and the API read a schedule: a cron or a zone they
        # refuse (7 fields, an unknown zone) is refused here too, never run otherwise.
        parsed = parse_schedule(record.cron_expr, tz, now)
        if parsed.is_oneshot:
            raise TaskError(f'"{record.cron_expr}" is not a cron expression')
        run_once = None
        if record.oneshot:
            if not record.run_once_at:
                raise TaskError("a one-shot with no time left to run: nothing to schedule")
            run_once = parse_rfc3339(record.run_once_at)
        schedule = Schedule(" ".join((record.schedule or record.cron_expr).split()),
                            parsed.cron_expr, tz, run_once)
    else:
        schedule = parse_schedule(record.schedule, tz, now, oneshot=record.oneshot)
    same = con.execute("SELECT id FROM scheduled_tasks WHERE user_id = ? AND name = ? AND "
                       "original_schedule = ? AND prompt = ?",
                       (user_id, name, schedule.original, prompt)).fetchone()
    if same:
        return "unchanged", get_task(con, user_id, same[0])
    if record.source == "config":
        raise TaskError(f'"{name}" comes from the config.toml of the memory it was exported '
                        "from: add its [[scheduled_tasks]] entry to this config.toml to run it here")
    task_id = insert_task(con, user_id=user_id, name=name, schedule=schedule, prompt=prompt,
                          source="import", trusted=False, paused=record.paused, now=now,
                          timezone_name=record.timezone, from_outside=True)
    wanted = record.task_id
    if wanted is not None and wanted > 0 and con.execute(
            "SELECT 1 FROM scheduled_tasks WHERE id = ? UNION ALL "
            "SELECT 1 FROM task_runs WHERE task_id = ?", (wanted, wanted)).fetchone() is None:
        con.execute("UPDATE scheduled_tasks SET id = ? WHERE id = ?", (wanted, task_id))
        task_id = wanted
    con.execute("UPDATE scheduled_tasks SET created_at = coalesce(?, created_at), "
                "updated_at = coalesce(?, updated_at), last_run_at = ? WHERE id = ?",
                (record.created_at, record.updated_at, record.last_run_at, task_id))
    return "insert", get_task(con, user_id, task_id)
