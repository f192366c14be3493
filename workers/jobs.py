"""The jobs as the queue knows them: each job's name, arguments and queueing policy.

Huey finds a task by the name it was declared under ("workers.tasks.distill": a
module, pinned in workers/queue.py, and the function's name), in a registry filled when
the declaration is imported. That is all a producer needs to enqueue a job — the
hand-off after a turn (workers/handoff.py, also behind `hilo tasks run`) and `hilo queue
retry` — so this module declares every job and holds nothing else: importing it loads
no job code, opens no writer or model client and installs no signal handler. An API
process that enqueues a distill stays light.

Each declaration is a thin wrapper whose body delegates to the `Runner` attached by
whoever starts the consumer (workers/consumer.py): the job code and what it runs with —
the worker's writer, model client and embedder — live in workers/runner.py, loaded only
where jobs run. A job taken by a process with no runner attached fails, saying so, and
Huey records the failure like any other.

The alternative, declaring the tasks beside their bodies, makes every producer import
every job module: the queue's registry would again be filled by a heavy import.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any, Protocol

from huey import crontab
from huey.api import Task

from app.config import Config
from app.errors import Misconfigured
from workers.queue import huey

__all__ = ["Runner", "NoJobRunner", "attach", "detach", "is_attached", "attached", "distill",
           "compact", "embed", "diary", "consolidation_schedule", "consolidation_due",
           "consolidate_periodically", "consolidate", "reconcile_periodically", "reconcile",
           "run_scheduled_tasks", "learn_macros_periodically", "run_scheduled_tasks_now"]


class Runner(Protocol):
    """What runs the jobs in a consumer process: workers.runner.JobRunner."""

    config: Config

    def distill(self, user_id: str, session_id: str, event_ids: list[int], attempt: int,
                task: Task | None) -> None: ...

    def compact(self, user_id: str, session_id: str, attempt: int, task: Task | None) -> None: ...

    def embed(self, user_id: str | None, attempt: int, task: Task | None) -> None: ...

    def diary(self, user_id: str, session_id: str, attempt: int, task: Task | None) -> None: ...

    def consolidate(self, attempt: int, task: Task | None, since: float | None = None) -> None: ...

    def reconcile(self, grace_seconds: float | None) -> None: ...

    def run_scheduled_tasks(self) -> None: ...

    def learn_macros(self) -> None: ...


class NoJobRunner(Misconfigured):
    """A job was taken by a process that did not start a consumer."""


# One per process, like the Huey instance the jobs are declared on: set where the
# consumer starts, cleared where it stops.
_runner: Runner | None = None


def attach(runner: Runner) -> None:
    """Run this process's jobs with `runner` (the consumer's start)."""
    global _runner
    _runner = runner


def detach(runner: Runner) -> None:
    """Stop running jobs with `runner` (the consumer's shutdown)."""
    global _runner
    if _runner is runner:
        _runner = None


def is_attached() -> bool:
    """Whether this process runs jobs (a consumer started here)."""
    return _runner is not None


def attached() -> Runner:
    if _runner is None:
        raise NoJobRunner("no job runner in this process: jobs run in the worker "
                          "(hilo worker, or huey_consumer workers.consumer.huey)")
    return _runner


# -- per turn and per session --------------------------------------------------------------


@huey.task(context=True)
def distill(user_id: str, session_id: str, event_ids: list[int], attempt: int = 1,
            task: Task | None = None) -> None:
    """After a turn: the session's unlearned turns → profile, facts and cards
    (app/learn/session.py), once the person is not using the model; and vectors."""
    attached().distill(user_id, session_id, event_ids, attempt, task)


@huey.task(context=True)
def compact(user_id: str, session_id: str, attempt: int = 1, task: Task | None = None) -> None:
    """A session over the compaction threshold → its cards (and the facts of their
    chunks), as distill does: both learn the session, under one per-session lock."""
    attached().compact(user_id, session_id, attempt, task)


@huey.task(context=True)
def embed(user_id: str | None = None, attempt: int = 1, task: Task | None = None) -> None:
    """Vectors for owners that have none for the configured model (None: every user)."""
    attached().embed(user_id, attempt, task)


@huey.task(context=True)
def diary(user_id: str, session_id: str, attempt: int = 1, task: Task | None = None) -> None:
    """An ended session → its diary entry."""
    attached().diary(user_id, session_id, attempt, task)


# -- periodic --------------------------------------------------------------------------------


@cache
def consolidation_schedule(hours: int) -> Callable[[Any], bool]:
    """Every `hours` hours on the hour; crontab is evaluated on Huey's UTC clock."""
    if hours < 24:
        return crontab(minute="0", hour=f"*/{hours}", strict=True)
    return crontab(minute="0", hour="0", day=f"*/{hours // 24}", strict=True)


def consolidation_due(timestamp: datetime) -> bool:
    """Every consolidation_interval_hours of the worker's config, on the hour (UTC)."""
    hours = attached().config.memory.consolidation_interval_hours
    return consolidation_schedule(hours)(timestamp)


@huey.periodic_task(consolidation_due, context=True)
def consolidate_periodically(task: Task | None = None) -> None:
    attached().consolidate(1, task)


@huey.task(context=True)
def consolidate(attempt: int = 1, task: Task | None = None, since: float | None = None) -> None:
    """Merge duplicate facts, fold old cards, decay importance; `since`: when it first
    came due, if it has waited for a chat (workers/chat_activity.py)."""
    attached().consolidate(attempt, task, since)


@huey.periodic_task(crontab(), context=True)  # every minute
def reconcile_periodically(task: Task | None = None) -> None:
    attached().reconcile(None)


@huey.task(priority=10)
def reconcile(grace_seconds: float | None = None) -> None:
    """Run the reconcile sweep now; grace_seconds=0 at worker start, when in-flight work
    is lost."""
    attached().reconcile(grace_seconds)


@huey.periodic_task(crontab(), context=True)  # every minute; each occurrence is claimed once
def run_scheduled_tasks(task: Task | None = None) -> None:
    attached().run_scheduled_tasks()


@huey.periodic_task(crontab(minute="*/10"), context=True)
def learn_macros_periodically(task: Task | None = None) -> None:
    """Tool chains in the stored tool events → macros (app/learn/tool_chains.py)."""
    attached().learn_macros()


@huey.task()
def run_scheduled_tasks_now() -> None:
    """The same tick, once, at worker start: what came due while no worker ran goes now."""
    attached().run_scheduled_tasks()
