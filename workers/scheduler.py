"""The scheduler job: run the due scheduled tasks as agent turns.

Each run is a turn in the task's own session, `task:<id>`: the prompt and the memory
context go to the model through the agent (app/turn/agent.py: the model may call tools; a
terminal command runs only under an allowed prefix, or any in a task the user marked
trusted, and never with anyone asked), and the reply is stored as events, which are
then distilled like any turn. `run_due_tasks` is a plain function of
(config, writer, chat service, now) with the clock passed in, so tests drive it
directly; the Huey periodic task that calls it every minute (workers/jobs.py, run by
workers/runner.py with the worker's ChatService) only adds the clock.

Claims are made in the database (app/tasks/runs.py), so any number of consumers —
and the periodic task that every consumer enqueues — can call this at once: each
occurrence runs once. A run that fails is recorded with its error and retried with
backoff later; it never stops the other tasks of the tick.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from app.config import Config
from app.log import get_logger
from app.model.errors import ModelError
from app.tasks.delivery import mark_delivered
from app.tasks.runs import Claim, TaskRunResult, claim_next_run, claim_task_now, finish_run
from app.tasks.store import ScheduledTask
from app.turn.chat import StreamingTurn
from app.turn.context import DEFAULT_SYSTEM_PROMPT
from app.writer import Writer

__all__ = ["log", "TICK_SECONDS", "ENDED", "INSTRUCTIONS_ROLE", "TurnRunner", "run_due_tasks",
           "run_task_now", "run_claim", "task_system_prompt", "scheduler_tick"]

log = get_logger(__name__)

# How long one tick keeps claiming runs; the periodic task fires every minute.
TICK_SECONDS = 60.0
# The statuses of a run that ended (a run "retrying" has not).
ENDED = ("done", "failed")
# The role a task's prompt is stored with (app/events.py): instructions, not the user.
INSTRUCTIONS_ROLE = "system"


class TurnRunner(Protocol):
    """What the scheduler needs of app.turn.agent.Agent (surface "task")."""

    def start_turn(self, user_id: str, session_id: str, text: str, *,
                   client_system: str | None = None, role: str = "user",
                   origin: str = "typed", from_outside: bool = False,
                   trusted: bool = False) -> StreamingTurn: ...


def run_due_tasks(config: Config, writer: Writer, chat_service: TurnRunner, now: datetime, *,
                  limit: int | None = None) -> list[TaskRunResult]:
    """Claim and run, one at a time, every run due at `now`; their results in order.

    Claiming one at a time lets a second consumer take the next task while this one
    waits on the model. `limit` caps the runs of this call (the rest wait for the next).
    """
    results: list[TaskRunResult] = []
    while limit is None or len(results) < limit:
        claim = claim_next_run(writer, config, now)
        if claim is None:
            break
        results.append(run_claim(config, writer, chat_service, claim, now))
    return results


def run_task_now(config: Config, writer: Writer, chat_service: TurnRunner, user_id: str,
                 ref: int | str, now: datetime | None = None) -> TaskRunResult:
    """`hilo tasks run <id>`: run one task once, here and now, paused or not; its schedule
    is unchanged. Its caller shows the result, so a run that ended counts as delivered
    (no `hilo chat` repeats it). Raises TaskNotFound."""
    now = now or datetime.now(UTC)
    result = run_claim(config, writer, chat_service, claim_task_now(writer, user_id, ref, now),
                       now)
    if result.status in ENDED:
        mark_delivered(writer, result.run_id, now)
    return result


def run_claim(config: Config, writer: Writer, chat_service: TurnRunner, claim: Claim,
              now: datetime) -> TaskRunResult:
    """Run a claimed run as an agent turn and record how it ended."""
    task, run = claim.task, claim.run
    bound = log.bind(task_id=task.id, run_id=run.id, user_id=task.user_id, attempt=run.attempts)
    reply: str | None = None
    reply_event_id: int | None = None
    error: str | None = None
    retryable = False
    try:
        # The prompt is the task's instructions, not the user speaking: stored as
        # "system", so memory learns from what the run found, not from what it was told.
        # A trusted task's run is untrusted once its context holds content from outside
        # (app/turn/agent.py); an imported task's prompt is such content.
        turn = chat_service.start_turn(task.user_id, task.session_id, task.prompt,
                                       client_system=task_system_prompt(task, config, now),
                                       role=INSTRUCTIONS_ROLE, origin="task",
                                       from_outside=task.prompt_from_outside,
                                       trusted=task.is_trusted)
        outcome = turn.run()
        if outcome.reply_event is not None:
            reply, reply_event_id = outcome.reply_event.content, outcome.reply_event.id
        else:
            reply = ""
    except ModelError as exc:
        error, retryable = str(exc), exc.retryable
    except Exception as exc:  # noqa: BLE001 — one broken task must not stop the others
        bound.exception("scheduler.run_crashed")
        error = f"{type(exc).__name__}: {exc}"
    try:
        finished = finish_run(writer, config, claim, now, error=error, retryable=retryable,
                              reply_event_id=reply_event_id)
    except Exception as exc:  # noqa: BLE001 — left running; retried once it goes stale
        bound.exception("scheduler.finish_failed")
        return _result(claim, "failed", run.attempts, reply, f"{error or 'ran'}; then {exc}", None)
    if error is None:
        # A manual run (`hilo tasks run`) prints its result; the log would only repeat it.
        done = bound.debug if run.kind == "manual" else bound.info
        done("scheduler.run_done", scheduled_for=run.scheduled_for)
    else:
        bound.warning("scheduler.run_failed", status=finished.status, error=error,
                      retry_at=finished.retry_at)
    return _result(claim, finished.status, finished.attempts, reply, error, finished.retry_at)


def _result(claim: Claim, status: str, attempts: int, reply: str | None, error: str | None,
            retry_at: str | None) -> TaskRunResult:
    task, run = claim.task, claim.run
    return TaskRunResult(
        task_id=task.id, user_id=task.user_id, name=task.name, run_id=run.id,
        session_id=task.session_id, scheduled_for=run.scheduled_for, kind=run.kind,
        status=status, attempts=attempts, trusted=task.is_trusted, reply=reply, error=error,
        retry_at=retry_at)


def task_system_prompt(task: ScheduledTask, config: Config, now: datetime) -> str:
    """The system prompt of a task's turn: the usual one, plus what this turn is and
    whether its instructions are trusted (`is_trusted`)."""
    zone = task.zone(config)
    local = now.astimezone(ZoneInfo(zone))
    trust = (
        "The user marked this task as trusted: follow its instructions as the user's own."
        if task.is_trusted else
        "The task is not marked as trusted: answer it, but do not act on the user's behalf "
        "beyond answering."
    )
    return (
        f"{DEFAULT_SYSTEM_PROMPT}\n\n"
        f'This turn is the scheduled task "{task.name}" (#{task.id}, {task.original_schedule}), '
        f"running unattended on {local:%A %Y-%m-%d at %H:%M} ({zone}); the user will read "
        f"the reply later. {trust}"
    )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def scheduler_tick(config: Config, writer: Writer, *, chat_service: TurnRunner,
                   clock: Callable[[], datetime] = _utc_now,
                   deliver: Callable[[TaskRunResult], None] | None = None,
                   ) -> list[TaskRunResult]:
    """One tick of the periodic task: run what is due, each run stamped with the time it
    is claimed, and `deliver` each run that ended (workers/notify.py: the webhook and
    the desktop). Stops taking new runs after TICK_SECONDS, when the next tick (on
    another worker thread) carries on, so a slow model never makes a tick run forever."""
    started = clock()
    results: list[TaskRunResult] = []
    while True:
        now = clock()
        if (now - started).total_seconds() >= TICK_SECONDS:
            return results
        ran = run_due_tasks(config, writer, chat_service, now, limit=1)
        if not ran:
            return results
        results += ran
        if deliver is not None:
            for result in ran:
                if result.status in ENDED:
                    deliver(result)
