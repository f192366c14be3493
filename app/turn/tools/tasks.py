"""Scheduled task tools: "remind me every Monday" from a chat, through app/tasks/store.py.
Tasks the model adds are never trusted: their runs cannot use the terminal beyond the
allowed prefixes until the user marks them trusted themselves. Adding, pausing or removing
one in a turn that read content from outside needs a fresh yes (registry.py)."""

from __future__ import annotations

from typing import Any

from app.memory import is_outside
from app.tasks.store import add_task, describe_task, list_tasks, pause_task, remove_task
from app.turn.tools.registry import Tool, ToolContext, schema

__all__ = ["add", "list_", "pause", "remove", "TASK_REF", "TOOLS"]


def _ref(args: dict[str, Any]) -> int | str:
    return args["task"]


def add(ctx: ToolContext, args: dict[str, Any]) -> str:
    ctx.fresh_approval(f"add the task {args['prompt']!r} ({args['schedule']})")
    added = add_task(ctx.service.writer, ctx.config, args["schedule"], args["prompt"],
                     source="tool", user_id=ctx.user_id, name=args.get("name"),
                     oneshot=bool(args.get("oneshot")), trusted=False,
                     wake=ctx.service.handoff.wake_scheduler,
                     from_outside=is_outside("hilo", reading=ctx.outside_content))
    return f"added task #{added.task.id} {added.task.name!r}: {added.description}"


def list_(ctx: ToolContext, args: dict[str, Any]) -> str:
    tz = ctx.config.schedule.timezone
    tasks = list_tasks(ctx.service.reader(), ctx.user_id, tz)
    lines = [f"#{t.id} {t.name!r}: {describe_task(t, tz)}; "
             f"{'paused' if t.is_paused else 'next run ' + str(t.next_run_at)}; prompt: {t.prompt}"
             for t in tasks]
    return "\n".join(lines) or "no scheduled tasks"


def pause(ctx: ToolContext, args: dict[str, Any]) -> str:
    ctx.fresh_approval(f"pause the task {_ref(args)!r}")
    task = pause_task(ctx.service.writer, ctx.user_id, _ref(args))
    return f"paused task #{task.id} {task.name!r}"


def remove(ctx: ToolContext, args: dict[str, Any]) -> str:
    ctx.fresh_approval(f"remove the task {_ref(args)!r}")
    task = remove_task(ctx.service.writer, ctx.user_id, _ref(args))
    return f"removed task #{task.id} {task.name!r}"


TASK_REF = {"type": ["integer", "string"], "description": "the task's id or name"}

TOOLS = (
    Tool("add_task",
         "Schedule a prompt that Hilo answers by itself later, once or repeatedly; the "
         "reply reaches the user. Schedules in plain English or Spanish or cron. Example: "
         '{"schedule": "every monday at 8", "prompt": "Remind me to plan the week"}',
         schema({"schedule": {"type": "string",
                              "description": 'e.g. "every weekday at 9", "in 10 minutes", '
                                             '"0 9 * * 1-5"'},
                 "prompt": {"type": "string", "description": "what to do at each run"},
                 "name": {"type": "string"},
                 "oneshot": {"type": "boolean", "description": "run once, then remove"}},
                required=("schedule", "prompt")),
         add),
    Tool("list_tasks", "List the scheduled tasks with their schedules and next runs.",
         schema({}), list_),
    Tool("pause_task", 'Pause a scheduled task. Example: {"task": 3}',
         schema({"task": TASK_REF}, required=("task",)), pause),
    Tool("remove_task", 'Remove a scheduled task for good. Example: {"task": "weekly report"}',
         schema({"task": TASK_REF}, required=("task",)), remove),
)
