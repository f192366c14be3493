"""`hilo tasks …`: scheduled tasks, added in cron or plain language."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import TYPE_CHECKING

import click

from app.cli.common import Group, emit, json_option, open_memory, user_option, with_config
from app.cli.format import task_log_rows, task_row

if TYPE_CHECKING:
    from datetime import datetime

    from app.config import Config
    from app.tasks.runs import TaskRunResult
    from app.tasks.store import ScheduledTask
    from app.writer import Writer

__all__ = ["tasks", "add", "list_command", "pause", "resume", "trust", "untrust", "remove", "run",
           "log"]

# Every `hilo` run imports every command module, so each command imports the library
# modules it uses when it runs: for start-up time.


def _writer(config: Config) -> Writer:
    """A writer for the user's own edits: committed with synchronous=FULL, like events."""
    from app.db import Durability
    from app.writer import Writer

    return Writer.from_config(config, Durability.FULL)


@click.group("tasks", cls=Group)
def tasks() -> None:
    """scheduled tasks: cron or plain language"""


@tasks.command("add")
@click.argument("schedule")
@click.argument("prompt", required=False)
@click.option("--name")
@click.option("--oneshot", is_flag=True, help="run once, then delete")
@click.option("--trusted", is_flag=True, help="runs may use tools without approval")
@click.option("--tz", "timezone_name",
              help="the task's time zone, an IANA name (default: [schedule] timezone)")
@user_option("tasks")
@with_config
@json_option
def add(config: Config, schedule: str, prompt: str | None, name: str | None, oneshot: bool,
        trusted: bool, timezone_name: str | None, user: str | None, as_json: bool) -> int:
    """add a task: SCHEDULE PROMPT, or one sentence that holds both ("remind me to stretch
    in 30 seconds")

    Schedules: a cron expression ("0 9 * * 1-5") or plain English or Spanish: "every
    weekday at 9", "every 15 minutes", "cada lunes a las 8", "in 10 minutes", "mañana a
    las 9", an ISO date-time.
    """
    from datetime import datetime

    from app.memory.provenance import is_outside
    from app.tasks.store import add_task, split_request
    from workers.notify import reply_channels

    if prompt is None:
        now = datetime.now(UTC)
        schedule, prompt = split_request(schedule, timezone_name or config.schedule.timezone,
                                         now)
    with _writer(config) as writer:
        added = add_task(writer, config, schedule, prompt, source="cli",
                         user_id=user or config.memory.user_id,
                         name=name, oneshot=oneshot, trusted=trusted,
                         timezone_name=timezone_name,
                         wake=lambda at: _wake_scheduler(config, at),
                         from_outside=is_outside("owner"))  # at the machine
        channels = reply_channels(config)
        emit(as_json, {**added.to_json(), "replies": channels},
             lambda: print(f"Added #{added.task.id} {added.task.name}: {added.description}\n"
                           f"Replies: {', '.join(channels)}"))
    return 0


def _wake_scheduler(config: Config, at: datetime) -> bool:
    """Have the worker's scheduler tick at `at` (a one-shot between minute ticks); the
    queue is loaded only then, for the start-up time of the other adds."""
    from workers.handoff import QueueHandoff
    from workers.queue import configure

    return QueueHandoff(configure(config)).wake_scheduler(at)


@tasks.command("list")
@user_option("tasks")
@with_config
@json_option
def list_command(config: Config, user: str | None, as_json: bool) -> int:
    """tasks with next and last run"""
    from app.tasks.store import describe_task, list_tasks

    tz = config.schedule.timezone
    found = list_tasks(open_memory(config), user or config.memory.user_id, tz)
    emit(as_json, [t.to_json() for t in found], lambda: print(
        "\n".join(task_row(t, describe_task(t, tz), t.timezone or tz) for t in found)
        or "(no scheduled tasks)"))
    return 0


def _change(config: Config, ref: str, user: str | None, as_json: bool, verb: str,
            change: Callable[[Writer, str], ScheduledTask]) -> int:
    """Apply `change(writer, user)` to one task, then say `verb` and which."""
    with _writer(config) as writer:
        task = change(writer, user or config.memory.user_id)
        emit(as_json, task.to_json(), lambda: print(f"{verb} {ref}"))
    return 0


@tasks.command("pause")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def pause(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """pause a task

    REF: the task's id or name
    """
    from app.tasks.store import pause_task

    return _change(config, ref, user, as_json, "Paused",
                   lambda writer, user: pause_task(writer, user, ref))


@tasks.command("resume")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def resume(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """resume a paused task

    REF: the task's id or name
    """
    from app.tasks.store import resume_task

    return _change(config, ref, user, as_json, "Resumed",
                   lambda writer, user: resume_task(writer, config, user, ref))


@tasks.command("trust")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def trust(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """let a task's runs use the terminal without asking

    REF: the task's id or name. Only the owner, here, trusts a task: tasks from the HTTP
    API, MCP, the model or an import arrive untrusted.
    """
    from app.tasks.store import trust_task

    return _change(config, ref, user, as_json, "Trusted",
                   lambda writer, user: trust_task(writer, user, ref))


@tasks.command("untrust")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def untrust(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """stop trusting a task: its runs use only allowed commands

    REF: the task's id or name
    """
    from app.tasks.store import trust_task

    return _change(config, ref, user, as_json, "Untrusted",
                   lambda writer, user: trust_task(writer, user, ref, trusted=False))


@tasks.command("rm")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def remove(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """remove a task

    REF: the task's id or name
    """
    from app.tasks.store import remove_task

    return _change(config, ref, user, as_json, "Removed",
                   lambda writer, user: remove_task(writer, user, ref))


@tasks.command("run")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def run(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """run a task now, once

    REF: the task's id or name
    """
    # Imported when run, for start-up time: a run is a turn (numpy, the model client).
    from app.turn.agent import Agent
    from app.turn.chat import ChatService
    from workers.handoff import queue_handoff
    from workers.scheduler import run_task_now

    with _writer(config) as writer:
        with ChatService(config, writer=writer, handoff=queue_handoff(config)) as service:
            agent = Agent(service, surface="task")  # as the worker runs it: nobody is asked
            result = run_task_now(config, writer, agent, user or config.memory.user_id, ref)
        emit(as_json, result.to_json(), lambda: print(_run_text(result)))
    return 0 if result.status == "done" else 1


def _run_text(result: TaskRunResult) -> str:
    """One run as a person reads it: which task, then its reply or why it failed."""
    head = f"#{result.task_id} {result.name}"
    if result.status == "done":
        return f"{head}:\n{result.reply or '(no reply)'}"
    retry = f"; retrying at {result.retry_at}" if result.retry_at else ""
    return f"{head} {result.status}: {result.error}{retry}"


@tasks.command("log")
@click.argument("ref")
@user_option("tasks")
@with_config
@json_option
def log(config: Config, ref: str, user: str | None, as_json: bool) -> int:
    """a task's runs and replies

    REF: the task's id or name
    """
    from app.tasks.runs import task_log

    found = task_log(open_memory(config), user or config.memory.user_id, ref)
    emit(as_json, found.to_json(),
         lambda: print("\n".join(task_log_rows(found)) or "(no runs yet)"))
    return 0
