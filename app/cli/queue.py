"""`hilo queue ACTION`: look at and steer the job queue (workers/inspection.py).

Human tables (rich) by default, one JSON document with --json; on a failure with --json,
the document is {"ok": false, "error": …}. Exit status: 0 done; 1 the queue cannot be
read or a job/task was not found (also when some of several ids were); 2 a malformed
request (flush without --yes, retry with neither ids nor --all-failed).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from app.cli.common import CommandError, Group, emit, json_option, print_json, with_config
from app.cli.format import ago
from app.errors import InvalidInput

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from app.config import Config
    from workers.inspection import (
        ChatWait,
        Failure,
        Flushed,
        Job,
        QueueStatus,
        QueueView,
        RetryOutcome,
        Revocation,
    )

__all__ = ["DEFAULT_LIMIT", "MalformedRequest", "queue", "status", "pending", "scheduled",
           "failed", "retry", "revoke", "flush"]

# workers.inspection is imported when a queue command runs, for start-up time: it loads
# Huey, which no other command needs (and without the Redis client for a SQLite queue).

DEFAULT_LIMIT = 100


class MalformedRequest(InvalidInput):
    """Arguments that do not make a request (exit status 2)."""

    exit_code = 2


@click.group("queue", cls=Group)
def queue() -> None:
    """inspect and steer the job queue (the worker may be stopped)

    The job queue, read from Huey's own storage (queue.sqlite3 or Redis); works with the
    worker stopped.
    """


@contextlib.contextmanager
def _reading(config: Config, as_json: bool) -> Iterator[QueueView]:
    """The configured queue; what cannot be done fails the command with one line (and,
    with --json, an error document)."""
    from workers.huey_loader import load_huey

    load_huey(config.queue.backend)  # this process's queue is the one it reads
    from workers.inspection import QueueError, QueueView

    if config.queue.backend == "sqlite" and not config.data_dir.is_dir():
        # Reading a queue that cannot exist would report a healthy empty one.
        message = (f"the data directory {config.data_dir} does not exist: check --data-dir "
                   "(or HILO_DATA_DIR), or create it with: hilo init")
        if as_json:
            print_json({"ok": False, "error": message})
        action = click.get_current_context().info_name
        raise CommandError(message, command=f"queue {action}")
    try:
        yield QueueView(config)
    except (QueueError, MalformedRequest) as exc:
        if as_json:
            print_json({"ok": False, "error": str(exc)})
        action = click.get_current_context().info_name
        raise CommandError(str(exc), command=f"queue {action}",
                           exit_code=2 if isinstance(exc, MalformedRequest) else 1) from None


def _listing(fn: Callable[..., int]) -> Callable[..., int]:
    """--task and --limit, for the listings."""
    fn = click.option("--limit", type=int, default=DEFAULT_LIMIT,
                      help=f"show at most N (default {DEFAULT_LIMIT}; 0: all)")(fn)
    return click.option("--task", help="only this task (distill, compact, diary, embed, …)")(fn)


# -- the actions -----------------------------------------------------------------------------


@queue.command("status")
@with_config
@json_option
def status(config: Config, as_json: bool) -> int:
    """counts, oldest pending job, failures, whether a worker polls"""
    with _reading(config, as_json) as view:
        found = view.status(time.time())
    emit(as_json, found.to_dict(), lambda: _show_status(found))
    return 0


@queue.command("pending")
@_listing
@with_config
@json_option
def pending(config: Config, task: str | None, limit: int, as_json: bool) -> int:
    """jobs waiting to run, in the order they run"""
    return _list_jobs(config, as_json, "pending", task, limit)


@queue.command("scheduled")
@_listing
@with_config
@json_option
def scheduled(config: Config, task: str | None, limit: int, as_json: bool) -> int:
    """jobs waiting for their time (retries with backoff)"""
    return _list_jobs(config, as_json, "scheduled", task, limit)


def _list_jobs(config: Config, as_json: bool, where: str, task: str | None, limit: int) -> int:
    with _reading(config, as_json) as view:
        now = time.time()
        jobs = _filtered(view.pending() if where == "pending" else view.scheduled(), task)
    shown = _limited(jobs, limit)
    emit(as_json, {"total": len(jobs), "jobs": [j.to_dict(now) for j in shown]},
         lambda: _show_jobs(_console(), where, jobs, shown, task, now))
    return 0


@queue.command("failed")
@_listing
@with_config
@json_option
def failed(config: Config, task: str | None, limit: int, as_json: bool) -> int:
    """failed jobs: task, what it was for, error, traceback, attempts"""
    with _reading(config, as_json) as view:
        now = time.time()
        failures = _filtered(view.failures(), task)
    shown = _limited(failures, limit)
    emit(as_json, {"total": len(failures), "jobs": [f.to_dict(now) for f in shown]},
         lambda: _show_failures(_console(), failures, shown, task, now))
    return 0


@queue.command("retry")
@click.argument("ids", nargs=-1)
@click.option("--all-failed", is_flag=True, help="every failed job")
@with_config
@json_option
def retry(config: Config, ids: tuple[str, ...], all_failed: bool, as_json: bool) -> int:
    """re-enqueue failed jobs with their original arguments

    IDS: failed jobs' ids (see `hilo queue failed`)
    """
    with _reading(config, as_json) as view:
        if bool(ids) == all_failed:
            raise MalformedRequest("give failed jobs' ids, or --all-failed "
                                   "(see `hilo queue failed`)")
        outcome = view.retry(None if all_failed else list(ids))
    emit(as_json, {"retried": [asdict(r) for r in outcome.retried],
                   "skipped": [asdict(s) for s in outcome.skipped]},
         lambda: _show_retried(_console(), outcome))
    return 1 if outcome.skipped else 0


@queue.command("revoke")
@click.argument("ids", nargs=-1)
@click.option("--task", help="every pending and scheduled job of this task")
@with_config
@json_option
def revoke(config: Config, ids: tuple[str, ...], task: str | None, as_json: bool) -> int:
    """drop pending or scheduled jobs before they run

    IDS: jobs' ids (see `hilo queue pending`)
    """
    with _reading(config, as_json) as view:
        if bool(ids) == bool(task):
            raise MalformedRequest("give jobs' ids, or --task NAME (see `hilo queue pending`)")
        revocation = view.revoke_task(task) if task else view.revoke_each(list(ids))
    emit(as_json, {"revoked": [{"id": j.id, "task": j.name, "where": j.where}
                               for j in revocation.revoked],
                   "not_found": revocation.not_found},
         lambda: _show_revoked(_console(), revocation, task))
    return 1 if revocation.not_found else 0


@queue.command("flush")
@click.option("--yes", is_flag=True, help="yes, delete them")
@with_config
@json_option
def flush(config: Config, yes: bool, as_json: bool) -> int:
    """delete every pending, scheduled and failed job and stored result (needs --yes)"""
    with _reading(config, as_json) as view:
        if not yes:
            found = view.status(time.time())
            raise MalformedRequest(
                f"refusing to flush without --yes: it would delete {found.pending} pending and "
                f"{found.scheduled} scheduled jobs, {found.failed} failure records and "
                f"{found.results} results")
        flushed = view.flush()
    counts = asdict(flushed)
    del counts["kept"]
    emit(as_json, {"flushed": counts, "kept": flushed.kept},
         lambda: _show_flushed(_console(), flushed))
    return 0


# -- rendering -------------------------------------------------------------------------------


def _console() -> Console:
    from rich.console import Console  # imported by the commands that print, for start-up time

    # Full ids must stay copyable: wide when not on a terminal (pipes, files, tests).
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _table(*columns: str) -> Table:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        if column == "id":
            table.add_column(column, no_wrap=True, min_width=36)
        else:
            table.add_column(column, overflow="fold")
    return table


def _text(value: Any) -> Text:
    from rich.text import Text

    return Text("-" if value is None else str(value))  # never parsed as markup


def _filtered(jobs: list, task: str | None) -> list:
    if not task:
        return jobs
    return [j for j in jobs if task in (j.name, j.task)]


def _limited(items: list, limit: int | None) -> list:
    return items if not limit or limit <= 0 else items[:limit]


def _show_status(found: QueueStatus) -> None:
    # Plain lines, the counts by task too: loading rich took ~30 ms, a quarter of the
    # command. (The listings use it: they wrap arguments and tracebacks.)
    click.echo(f"Queue: {found.backend}, {found.location}")
    worker = found.worker
    if worker.last_poll_at is None:
        line = "Worker: no worker has polled this queue — start one: hilo worker"
    elif worker.active:
        line = (f"Worker: polled {ago(worker.seconds_since_poll)} ago "
                f"(pid {worker.pid} on {worker.host})")
    else:
        line = (f"Worker: none polling — the last poll was {ago(worker.seconds_since_poll)} "
                f"ago (pid {worker.pid} on {worker.host}); start one: hilo worker")
    click.echo(line)
    oldest = found.oldest_pending
    waiting = (f"; the oldest, {oldest.task}, waiting {ago(oldest.waiting_seconds)}"
               if oldest else "")
    click.echo(
        f"Pending {found.pending} ({found.due} due{waiting}) · scheduled {found.scheduled}"
        f" · failed {found.failed} · results {found.results}"
        + (f" · revoked {found.revoked}" if found.revoked else ""))
    if found.by_task:
        click.echo("\n".join(_aligned([("task", "pending", "scheduled", "failed"), *(
            (name, str(c.pending), str(c.scheduled), str(c.failed))
            for name, c in found.by_task.items())])))
    if found.failed:
        click.echo("See `hilo queue failed`; retry with `hilo queue retry --all-failed`.")
    if found.locks:
        click.echo("Locks held: " + ", ".join(found.locks))
    click.echo(_chat_wait_line(found.chat_wait))
    if found.learning is not None:
        click.echo(found.learning.spend.line())
        if found.learning.stall is not None:
            click.echo(found.learning.stall.line())
        if found.learning.hold is not None:
            click.echo(found.learning.hold.line())


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as columns two spaces apart: the first (a name) to the left, the others
    (counts) to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join([row[0].ljust(widths[0]),
                       *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))])
            for row in rows]


def _chat_wait_line(wait: ChatWait) -> str:
    """Whether the model jobs wait for the person, in one line."""
    if wait.server is None:
        return "Model jobs: on their own model server ([llm] distill_url); they never wait for the chat"
    if wait.idle_seconds <= 0:
        return "Model jobs: never wait for the chat ([queue] chat_idle_seconds = 0)"
    queued = f"; {wait.waiting_jobs} waiting" if wait.waiting_jobs else ""
    if wait.waiting:
        return (f"Model jobs: waiting for the chat — {wait.reason}; they start when "
                f"{wait.server} has served no chat request for {wait.idle_seconds:g} s, or once "
                f"their work has waited {wait.max_defer_seconds:g} s{queued}")
    last = ("no chat request seen" if wait.last_chat_at is None
            else f"the last chat request ended {ago(max(0.0, time.time() - wait.last_chat_at))} ago")
    return f"Model jobs: free to run ({last}){queued}"


def _show_jobs(console: Console, where: str, jobs: list[Job], shown: list[Job],
               task: str | None, now: float) -> None:
    if not jobs:
        of = f" of {task}" if task else ""
        console.print(_text(f"No {where} jobs{of}."))
        return
    from workers.inspection import iso_time  # loaded by now: the command read the queue

    if where == "pending":
        table = _table("id", "task", "for", "waiting", "note")
        for j in shown:
            note = "revoked" if j.revoked else (
                "" if j.is_due(now) else f"not before {iso_time(j.eta)}")
            table.add_row(_text(j.id), _text(j.name), _text(j.purpose),
                          _text(ago(j.waiting(now))), _text(note))
    else:
        table = _table("id", "task", "for", "runs at", "note")
        for j in shown:
            runs = f"{iso_time(j.eta)} (in {ago(j.eta - now)})" if j.eta and j.eta > now else (
                f"{iso_time(j.eta)} (overdue {ago(now - j.eta)})" if j.eta else "-")
            table.add_row(_text(j.id), _text(j.name), _text(j.purpose),
                          _text(runs), _text("revoked" if j.revoked else ""))
    console.print(table)
    if len(shown) < len(jobs):
        console.print(_text(f"… {len(jobs) - len(shown)} more (--limit 0 shows all)"))


def _show_failures(console: Console, failures: list[Failure], shown: list[Failure],
                   task: str | None, now: float) -> None:
    if not failures:
        console.print(_text("No failed jobs" + (f" of {task}." if task else ".")))
        return
    table = _table("id", "task", "for", "attempts", "failed", "error")
    for f in shown:
        when = "-" if f.failed_at is None else f"{ago(now - f.failed_at)} ago"
        table.add_row(_text(f.id), _text(f.name), _text(f.purpose),
                      _text(f.attempts), _text(when),
                      _text(f.error + (" (fallback written)" if f.degraded else "")))
    console.print(table)
    for f in shown:
        if f.traceback.strip():
            console.print(_text(f"\nTraceback of {f.id} ({f.name}):"))
            console.print(_text(f.traceback.rstrip()))
    if len(shown) < len(failures):
        console.print(_text(f"… {len(failures) - len(shown)} more (--limit 0 shows all)"))
    console.print(_text("Retry: hilo queue retry <id>, or hilo queue retry --all-failed"))


def _show_retried(console: Console, outcome: RetryOutcome) -> None:
    if not outcome.retried and not outcome.skipped:
        console.print(_text("No failed jobs to retry."))
    for r in outcome.retried:
        console.print(_text(f"Retried {r.id} ({r.task}) as {r.new_id}"))
    for s in outcome.skipped:
        console.print(_text(f"Skipped {s.id}: {s.reason}"))


def _show_revoked(console: Console, revocation: Revocation, task: str | None) -> None:
    if not revocation.revoked and not revocation.not_found:
        console.print(_text(f"No pending or scheduled {task} jobs."))
    for j in revocation.revoked:
        console.print(_text(f"Revoked {j.id} ({j.name}, {j.where})"))
    if revocation.revoked:
        console.print(_text("A worker drops revoked jobs when it reaches them; until then "
                            "they are listed as revoked."))
    for job_id in revocation.not_found:
        console.print(_text(f"Not found: {job_id} is neither pending nor scheduled"))


def _show_flushed(console: Console, flushed: Flushed) -> None:
    console.print(_text(
        f"Flushed {flushed.pending} pending and {flushed.scheduled} scheduled jobs, "
        f"{flushed.failed} failure records, {flushed.results} results, "
        f"{flushed.revoke_flags} revoke flags."))
    if flushed.kept:
        console.print(_text("Kept the worker's state: " + ", ".join(flushed.kept)))
    console.print(_text("The reconcile sweep re-enqueues whatever the memory still needs."))
