"""Scheduled tasks and the job queue on the memory page, steered through the calls the
task routes (app/api/tasks.py) and `hilo queue` (workers/inspection.py) make.

Trusting a task stays at the machine: the page shows the `hilo tasks trust` command, not
a button. The queue is shared by every user: a user signed in with their own token sees
and retries only the jobs that work on their memory; the owner sees them all.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.http.callers import Caller
from app.http.deps import Service
from app.tasks.runs import request_run, task_runs
from app.tasks.store import describe_task, list_tasks, pause_task, remove_task, resume_task
from app.ui.render import PageRoute, done, page, same_origin
from app.ui.users import Who
from workers.inspection import MODEL_JOBS, Failure, Job, QueueError, QueueView

__all__ = ["router", "TaskId", "RUNS_SHOWN", "tasks", "pause", "resume", "run_now", "remove",
           "job_user", "queue", "retry"]

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False,
                   dependencies=[Depends(same_origin)])

TaskId = Annotated[int, Path(ge=1, le=2**63 - 1)]
RUNS_SHOWN = 5


@router.get("/tasks", response_class=HTMLResponse)
def tasks(request: Request, who: Who, service: Service) -> HTMLResponse:
    con, zone = service.reader(), service.config.schedule.timezone
    found = list_tasks(con, who.user_id, zone)
    return page(request, who, "tasks.html", tasks=[
        (task, describe_task(task, zone), task_runs(con, who.user_id, task.id, RUNS_SHOWN))
        for task in found])


@router.post("/tasks/{task_id}/pause")
def pause(task_id: TaskId, who: Who, service: Service) -> RedirectResponse:
    task = pause_task(service.writer, who.user_id, task_id)
    return done("/ui/tasks", f"Paused #{task.id} {task.name}")


@router.post("/tasks/{task_id}/resume")
def resume(task_id: TaskId, who: Who, service: Service) -> RedirectResponse:
    task = resume_task(service.writer, service.config, who.user_id, task_id)
    return done("/ui/tasks", f"Resumed #{task.id} {task.name}: "
                             f"{describe_task(task, service.config.schedule.timezone)}")


@router.post("/tasks/{task_id}/run")
def run_now(task_id: TaskId, who: Who, service: Service) -> RedirectResponse:
    request_run(service.writer, who.user_id, task_id)
    return done("/ui/tasks", f"Task #{task_id} will run now: the worker takes it within "
                             "a minute, and its result appears here")


@router.post("/tasks/{task_id}/remove")
def remove(task_id: TaskId, who: Who, service: Service) -> RedirectResponse:
    task = remove_task(service.writer, who.user_id, task_id)
    return done("/ui/tasks", f"Removed #{task.id} {task.name}")


def job_user(job: Job | Failure) -> str | None:
    """The user whose memory a job works on (distill, compact, diary, embed), if one."""
    named = job.kwargs.get("user_id")
    if named is None and job.args and isinstance(job.args[0], str):
        named = job.args[0]
    return named if isinstance(named, str) else None


def _visible(who: Caller, jobs: list[Any]) -> list[Any]:
    if who.token_user is None:
        return jobs
    return [job for job in jobs if job_user(job) == who.user_id]


@router.get("/queue", response_class=HTMLResponse)
def queue(request: Request, who: Who, service: Service) -> HTMLResponse:
    view, now = QueueView(service.config), time.time()
    try:
        status = view.status(now)
        kv = view.key_values()
        waiting = _visible(who, view.pending(kv) + view.scheduled(kv))
        failures = _visible(who, kv.failures)
    except QueueError as exc:
        return page(request, who, "queue.html", status=503, unavailable=str(exc))
    due = [job for job in waiting if job.is_due(now)]
    later = [job for job in waiting if not job.is_due(now)]
    return page(request, who, "queue.html", queue=status, due=due, later=later,
                failures=failures, now=now, model_jobs=MODEL_JOBS,
                owner=who.token_user is None)


@router.post("/queue/{job_id}/retry")
def retry(job_id: str, who: Who, service: Service) -> RedirectResponse:
    view = QueueView(service.config)
    if not any(f.id == job_id for f in _visible(who, view.failures())):
        return done("/ui/queue", f"No failed job {job_id} of yours to retry", ok=False)
    outcome = view.retry([job_id])
    if outcome.skipped:
        return done("/ui/queue", f"Not retried: {outcome.skipped[0].reason}", ok=False)
    retried = outcome.retried[0]
    return done("/ui/queue", f"Retrying {retried.task}: queued again as {retried.new_id}")
