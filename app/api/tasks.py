"""Scheduled tasks under /memory/tasks: a prompt Hilo sends itself on a schedule, run by
the worker in the task's own session.

A task added here is never trusted: `trusted: true` is refused, since trust is the
owner's to grant at the machine (`hilo tasks trust ID`), not a caller's to ask for."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.http.deps import JsonRoute, Service, Who
from app.http.errors import ApiError
from app.memory import is_outside
from app.tasks.runs import request_run, task_log
from app.tasks.store import (
    add_task,
    describe_task,
    list_tasks,
    pause_task,
    remove_task,
    resume_task,
)

__all__ = ["router", "TaskIn", "refuse_trust", "get_tasks", "add_task_route", "pause_task_route",
           "resume_task_route", "remove_task_route", "run_task_route", "task_log_route"]

router = APIRouter(prefix="/memory/tasks", tags=["Scheduled tasks"], route_class=JsonRoute)


class TaskIn(BaseModel):
    schedule: str = Field(description='cron ("0 9 * * 1-5") or plain English/Spanish: '
                                      '"every weekday at 9", "cada lunes a las 8", "in 10 minutes"')
    prompt: str
    name: str | None = None
    oneshot: bool = False
    trusted: bool = Field(False, description="always false here: the owner trusts a task "
                                             "at the machine, with `hilo tasks trust ID`")
    timezone: str | None = Field(None, description="an IANA zone; default [schedule] timezone")


def refuse_trust(asked: bool) -> None:
    """A 403 for a request asking for trust: the owner gives it at the machine."""
    if asked:
        raise ApiError(403, "a task is trusted only by its owner at the machine: add it without "
                       '"trusted", then run `hilo tasks trust ID` there', "trust_refused")


@router.get("", summary="List scheduled tasks: next run, last run, last error, paused")
def get_tasks(who: Who, service: Service) -> dict:
    tz = service.config.schedule.timezone
    return {"tasks": [{**t.to_json(), "description": describe_task(t, tz)}
                      for t in list_tasks(service.reader(), who.user_id, tz)]}


@router.post("", summary="Add a task; the reply echoes the schedule in words",
             status_code=201)
def add_task_route(body: TaskIn, who: Who, service: Service) -> dict:
    refuse_trust(body.trusted)
    added = add_task(
        service.writer, service.config, body.schedule, body.prompt, source="http",
        user_id=who.user_id,
        name=body.name, oneshot=body.oneshot, timezone_name=body.timezone,
        wake=service.handoff.wake_scheduler,
        from_outside=is_outside("outside"))  # a client's text: the owner trusts it at the machine
    return added.to_json()


@router.post("/{ref}/pause", summary="Pause a task")
def pause_task_route(ref: str, who: Who, service: Service) -> dict:
    return pause_task(service.writer, who.user_id, ref).to_json()


@router.post("/{ref}/resume", summary="Resume a paused task")
def resume_task_route(ref: str, who: Who, service: Service) -> dict:
    return resume_task(service.writer, service.config, who.user_id, ref).to_json()


@router.delete("/{ref}", summary="Remove a task")
def remove_task_route(ref: str, who: Who, service: Service) -> dict:
    return remove_task(service.writer, who.user_id, ref).to_json()


@router.post("/{ref}/run", summary="Run a task once, now (queued for the worker)",
             status_code=202)
def run_task_route(ref: str, who: Who, service: Service) -> dict:
    return request_run(service.writer, who.user_id, ref).to_json()


@router.get("/{ref}/log", summary="A task's runs and the replies in its session")
def task_log_route(ref: str, who: Who, service: Service) -> dict:
    return task_log(service.reader(), who.user_id, ref).to_json()
