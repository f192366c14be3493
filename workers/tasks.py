"""The Huey tasks: thin wrappers that add queueing, retry policy and locks to the jobs.

The jobs themselves (workers/distill.py, compact.py, diary.py, consolidate.py,
reconcile.py) are plain functions of the writer, the model client and ids.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any, Callable

import structlog
from huey import crontab
from huey.api import Task

from workers.compact import compact_session
from workers.consolidate import consolidate as consolidate_memory
from app.vectors import pending_owners
from workers.diary import write_diary
from workers.embed import embed_pending
from workers.distill import capture_turn, distill_turn, needs_compaction
from workers.queue import (
    bound_config,
    exclusive,
    flush_stale_locks,
    huey,
    job_context,
    record_failure,
)
from workers.reading import reading
from workers.reconcile import reconcile as find_undone_work
from workers.metrics import install as install_job_metrics
from workers.retry import attempt_job
from workers.scheduler import prepare_scheduler, scheduler_tick

log = structlog.get_logger(__name__)

install_job_metrics(huey)  # counts and durations for /metrics

# Where consolidate keeps the time of its last importance decay (Huey's key-value store).
LAST_DECAY_KEY = "hilo.consolidate.last_decay_at"


def _again(task_wrapper: Any, args: tuple, attempt: int) -> Callable[[float], None]:
    """How a job re-enqueues itself for its next attempt."""
    def retry(delay: float) -> None:
        if delay > 0:
            task_wrapper.schedule(args=args, kwargs={"attempt": attempt + 1}, delay=delay)
        else:
            task_wrapper(*args, attempt=attempt + 1)
    return retry


def _policy(task: Task | None) -> dict[str, Any]:
    """The retry policy's hooks for this run of a task."""
    task_id = task.id if task is not None else None
    return {"task_id": task_id,
            "record_failure": lambda error: record_failure(task_id, error, task)}


# -- per turn and per session --------------------------------------------------------------


@huey.task(context=True)
def distill(user_id: str, session_id: str, event_ids: list[int], attempt: int = 1,
            task: Task | None = None) -> None:
    ctx = job_context()
    outcome = attempt_job(
        ctx.config, "distill", attempt,
        {"user_id": user_id, "session_id": session_id, "events": event_ids},
        work=lambda: distill_turn(ctx.writer, ctx.model, ctx.config, user_id, session_id, event_ids),
        fallback=lambda: capture_turn(ctx.writer, ctx.config, user_id, session_id, event_ids),
        retry=_again(distill, (user_id, session_id, event_ids), attempt),
        **_policy(task),
    )
    if outcome.status == "retrying":
        return
    if outcome.value.events:
        with reading(ctx.writer) as con:
            over = needs_compaction(con, ctx.config, user_id, session_id)
        if over:
            compact(user_id, session_id)
    embed(user_id)  # the turn's events and any new facts


@huey.task(context=True)
def compact(user_id: str, session_id: str, attempt: int = 1, task: Task | None = None) -> None:
    with exclusive(f"compact:{user_id}:{session_id}") as mine:
        if not mine:
            # Another worker is compacting this session; it loops until below the threshold.
            log.debug("compact.locked", user_id=user_id, session_id=session_id)
            return
        ctx = job_context()
        attempt_job(
            ctx.config, "compact", attempt, {"user_id": user_id, "session_id": session_id},
            work=lambda: compact_session(ctx.writer, ctx.model, ctx.config, user_id, session_id),
            fallback=lambda: compact_session(ctx.writer, None, ctx.config, user_id, session_id,
                                             extractive=True),
            retry=_again(compact, (user_id, session_id), attempt),
            **_policy(task),
        )
    embed(user_id)  # the new cards


@huey.task(context=True)
def embed(user_id: str | None = None, attempt: int = 1, task: Task | None = None) -> None:
    """Vectors for owners that have none for the configured model (None: every user)."""
    ctx = job_context()
    if ctx.embedder is None:
        return
    with exclusive(f"embed:{user_id}") as mine:
        if not mine:
            return  # another worker is embedding this user's backlog right now
        attempt_job(
            ctx.config, "embed", attempt, {"user_id": user_id},
            work=lambda: embed_pending(ctx.writer, ctx.embedder, user_id),
            # The per-owner errors are stored; reconcile finds those owners again later.
            fallback=lambda: 0,
            retry=_again(embed, (user_id,), attempt),
            **_policy(task),
        )


@huey.task(context=True)
def diary(user_id: str, session_id: str, attempt: int = 1, task: Task | None = None) -> None:
    ctx = job_context()
    attempt_job(
        ctx.config, "diary", attempt, {"user_id": user_id, "session_id": session_id},
        work=lambda: write_diary(ctx.writer, ctx.model, ctx.config, user_id, session_id),
        fallback=lambda: write_diary(ctx.writer, None, ctx.config, user_id, session_id,
                                     extractive=True),
        retry=_again(diary, (user_id, session_id), attempt),
        **_policy(task),
    )


# -- periodic --------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _consolidation_schedule(hours: int) -> Callable[[Any], bool]:
    # crontab is evaluated on Huey's UTC clock.
    if hours < 24:
        return crontab(minute="0", hour=f"*/{hours}", strict=True)
    return crontab(minute="0", hour="0", day=f"*/{hours // 24}", strict=True)


def consolidation_due(timestamp: Any) -> bool:
    """Every consolidation_interval_hours of the bound config, on the hour (UTC)."""
    return _consolidation_schedule(bound_config().memory.consolidation_interval_hours)(timestamp)


def _consolidate(attempt: int, task: Task | None) -> None:
    ctx = job_context()
    last_decay_at = huey.get(LAST_DECAY_KEY, peek=True)
    attempt_job(
        ctx.config, "consolidate", attempt, {},
        work=lambda: consolidate_memory(ctx.writer, ctx.model, ctx.config,
                                        last_decay_at=last_decay_at, record_decay=_record_decay),
        fallback=lambda: consolidate_memory(ctx.writer, None, ctx.config,
                                            last_decay_at=huey.get(LAST_DECAY_KEY, peek=True),
                                            record_decay=_record_decay, extractive=True),
        retry=_again(consolidate, (), attempt),
        **_policy(task),
    )


def _record_decay(decayed_at: str) -> None:
    huey.put(LAST_DECAY_KEY, decayed_at)


@huey.periodic_task(consolidation_due, context=True)
def consolidate_periodically(task: Task | None = None) -> None:
    _consolidate(1, task)


@huey.task(context=True)
def consolidate(attempt: int = 1, task: Task | None = None) -> None:
    _consolidate(attempt, task)


def _enqueue_undone(grace_seconds: float | None) -> None:
    ctx = job_context()
    work = find_undone_work(ctx.writer, ctx.config, grace_seconds=grace_seconds)
    for user_id, session_id, event_ids in work.distill:
        distill(user_id, session_id, event_ids)
    for user_id, session_id in work.compact:
        compact(user_id, session_id)
    for user_id, session_id in work.diary:
        diary(user_id, session_id)
    if ctx.embedder is not None:
        with reading(ctx.writer) as con:
            if pending_owners(con, ctx.embedder.model, limit=1):
                embed(None)
    if work:
        log.info("reconcile.enqueued", distill=len(work.distill), compact=len(work.compact),
                 diary=len(work.diary), closed_sessions=len(work.closed))


@huey.periodic_task(crontab(), context=True)  # every minute
def reconcile_periodically(task: Task | None = None) -> None:
    _enqueue_undone(None)


@huey.periodic_task(crontab(), context=True)  # every minute; each occurrence is claimed once
def run_scheduled_tasks(task: Task | None = None) -> None:
    ctx = job_context()
    scheduler_tick(ctx.config, ctx.writer)


@huey.task()
def run_scheduled_tasks_now() -> None:
    """The same tick, once, at worker start: what came due while no worker ran goes now."""
    ctx = job_context()
    scheduler_tick(ctx.config, ctx.writer)


@huey.task(priority=10)
def reconcile(grace_seconds: float | None = None) -> None:
    """Run the sweep now; grace_seconds=0 at worker start, when in-flight work is lost."""
    _enqueue_undone(grace_seconds)


# -- worker start ------------------------------------------------------------------------------

_prepared_lock = threading.Lock()
_prepared = False


@huey.on_startup()
def prepare_worker_process() -> None:
    """Once per process, before any job runs: stale locks flushed, undone work re-enqueued.

    Registered as a startup hook so `huey_consumer workers.queue.huey` gets it too.
    """
    global _prepared
    with _prepared_lock:
        if _prepared:
            return
        flushed = flush_stale_locks()
        if flushed:
            log.warning("worker.stale_locks_flushed", locks=flushed)
        ctx = job_context()
        prepare_scheduler(ctx.config, ctx.writer)  # [[scheduled_tasks]] from config.toml
        reconcile(0.0)
        run_scheduled_tasks_now()
        _prepared = True
