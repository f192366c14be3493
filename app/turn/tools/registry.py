"""The tools Hilo's own agent may call: each described by a JSON schema for the model,
and run with a `ToolContext` that says who asked, where, and with what trust.

A `Registry` holds the tools, gives the model their descriptions for the chat API's
`tools` field (`specs`), and runs a call (`call`): an unknown tool, arguments that are
not what the schema asks, or a tool that fails all become a result starting "error:"
with the one-line reason, fed back to the model like any result. A result is text; the
agent stores it as a `tool` event (sanitised there, like every event).

Surfaces: "chat" (`hilo chat`, a person at the keyboard who can approve), "task" (a
scheduled task run, unattended) and "http" (`hilo serve`'s chat, where the terminal is
never offered).

Outside content is data, not instructions: a call the model made while its
context held content from outside (`ToolContext.outside_content`) carries no trust of
the run (the agent drops a trusted task's) and acts — fetches a page, adds or changes a
task — only on a fresh yes from the person at the terminal (`ToolContext.fresh_approval`,
which those tools call); the terminal then runs only what the person approves now (no
allow rule applies). A result is itself from outside when its tool reads from outside
(`Tool.reads_outside`: a page), when the call was made reading outside content, or when
the tool says so (a ToolResult: memory it read that was learned from outside). A
command's output is not, by itself: the command ran on the owner's authority (a rule
they wrote, their yes, their trusted task) over their own machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from app.config import Config
from app.errors import HiloError
from app.log import get_logger

if TYPE_CHECKING:
    from datetime import datetime

    import apsw

    from app.model.embedders import Embedder
    from app.recall.state import Recall
    from app.writer import Writer

__all__ = ["log", "Surface", "SURFACES", "Decision", "ERROR_PREFIX", "OUTSIDE_KINDS", "ToolFailed",
           "Approver", "SchedulerWake", "ToolServices", "ToolContext", "ToolResult", "Tool",
           "schema", "check_arguments", "Registry"]

log = get_logger(__name__)

Surface = Literal["chat", "task", "http"]
SURFACES: tuple[Surface, ...] = ("chat", "task", "http")
Decision = Literal["once", "always", "deny"]
ERROR_PREFIX = "error: "
# What outside content is, as a refusal tells the model.
OUTSIDE_KINDS = "a web page, a client's or an imported text, or what was learned from them"
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,)}


class ToolFailed(HiloError):
    """A tool could not do what was asked; the message goes back to the model."""

    code = "tool_failed"


class Approver(Protocol):
    """A person who answers for the agent (the REPL): never asked in tasks or over HTTP."""

    def approve_command(self, command: str, rule: str | None, why_not_always: str = "") -> Decision:
        """Run `command`? "always" stores `rule`, the command exactly (None: a command
        that cannot be allowed always — shell metacharacters, a refused option — and
        `why_not_always` says which, for the person)."""
        ...

    def confirm_macro(self, description: str) -> bool:
        """Run a learned follow-up call without asking the model?"""
        ...

    def approve_outside(self, action: str) -> bool:
        """Do `action` ("fetch https://…", "add the task …"), asked for in a turn whose
        context holds content from outside? A yes for this one call."""
        ...


class SchedulerWake(Protocol):
    def wake_scheduler(self, at: datetime) -> bool:
        """Have the scheduler tick at `at` (a task due between its minute ticks)."""
        ...


class ToolServices(Protocol):
    """What a tool may use of the process that runs it (app/turn/chat.py's ChatService
    is the one): the process's writer, this thread's reader, its recall, and the
    hand-off's wake-up for a task due between the scheduler's ticks."""

    writer: Writer
    recall: Recall
    handoff: SchedulerWake

    @property
    def query_embedder(self) -> Embedder | None: ...

    def reader(self) -> apsw.Connection: ...

    def edit(self, write: Callable[[apsw.Connection], Any]) -> Any: ...


@dataclass(frozen=True)
class ToolContext:
    """Who calls a tool, from where, and how far they are trusted."""

    config: Config
    service: ToolServices
    user_id: str
    session_id: str
    surface: Surface
    trusted: bool = False  # a scheduled task the user marked trusted
    approver: Approver | None = None
    preapproved: bool = False  # the person already said yes to this very call (a macro)
    deadline: float | None = None  # time.monotonic() by which the turn should end
    outside_content: bool = False  # the model made the call reading content from outside

    def seconds_left(self, wanted: float) -> float:
        """`wanted`, cut to what is left of the turn (but never under a second)."""
        if self.deadline is None:
            return wanted
        return min(wanted, max(1.0, self.deadline - time.monotonic()))

    def approved_call(self) -> ToolContext:
        return replace(self, preapproved=True)

    def fresh_approval(self, action: str) -> None:
        """A call made reading content from outside does `action` only on a fresh yes
        from the person at the terminal, asked here: a no, or nobody to ask, raises
        ToolFailed."""
        if not self.outside_content or self.preapproved:
            return
        if self.approver is None:
            raise ToolFailed(f"not run: {action} was asked for in a turn that read content "
                             f"from outside ({OUTSIDE_KINDS}), and only a person at the "
                             "terminal can approve that")
        if not self.approver.approve_outside(action):
            raise ToolFailed(f"not run: the user said no to {action}")


@dataclass(frozen=True)
class ToolResult:
    text: str
    ok: bool
    from_outside: bool = False  # content from outside (module docstring)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # a JSON schema of an object
    run: Callable[[ToolContext, dict[str, Any]], str | ToolResult]
    surfaces: frozenset[str] = field(default_factory=lambda: frozenset(SURFACES))
    reads_outside: bool = False  # its results come from outside Hilo (a page)

    def spec(self) -> dict[str, Any]:
        """The description the chat APIs take (Ollama and OpenAI alike)."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}


def schema(properties: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """An object schema with these properties."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


def check_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The call's arguments, checked against the tool's schema (required keys, the type
    and enum of each); ToolFailed saying what is wrong."""
    if arguments is None or arguments == "":
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolFailed(f"{tool.name} takes a JSON object of arguments, got {arguments!r:.200}")
    properties = tool.parameters.get("properties", {})
    missing = [name for name in tool.parameters.get("required", ()) if arguments.get(name) is None]
    if missing:
        raise ToolFailed(f"{tool.name} needs {', '.join(missing)}")
    checked = {}
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            continue  # models add arguments nobody asked for: ignored, not fatal
        if value is None:
            continue
        types = spec.get("type")
        allowed = sum((_JSON_TYPES.get(t, ()) for t in ([types] if isinstance(types, str)
                                                        else types or [])), ())
        if isinstance(value, str) and int in allowed and value.strip().lstrip("-").isdigit():
            value = int(value)  # "7" for 7: small models quote numbers
        elif isinstance(value, str) and bool in allowed and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if allowed and (not isinstance(value, allowed)
                        or (isinstance(value, bool) and bool not in allowed)):
            wanted = " or ".join(types if isinstance(types, list) else [types])
            raise ToolFailed(f"{tool.name}: {name} must be {wanted}, got {value!r:.100}")
        if "enum" in spec and value not in spec["enum"]:
            choices = ", ".join(map(str, spec["enum"]))
            raise ToolFailed(f"{tool.name}: {name} must be one of {choices}")
        checked[name] = value
    return checked


class Registry:
    """The tools, by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def available(self, surface: str) -> list[Tool]:
        return [tool for tool in self._tools.values() if surface in tool.surfaces]

    def specs(self, surface: str) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.available(surface)]

    def get(self, name: str, surface: str) -> Tool | None:
        tool = self._tools.get(name)
        return tool if tool is not None and surface in tool.surfaces else None

    def call(self, ctx: ToolContext, name: str, arguments: Any) -> ToolResult:
        """Run one call; every failure is a result saying why (KeyboardInterrupt passes)."""
        tool = self.get(name, ctx.surface)
        started = time.perf_counter()
        try:
            if tool is None:
                names = ", ".join(t.name for t in self.available(ctx.surface))
                raise ToolFailed(f"there is no tool {name!r} here; the tools are: {names}")
            out = tool.run(ctx, check_arguments(tool, arguments))
            result = out if isinstance(out, ToolResult) else ToolResult(out, ok=True)
        except HiloError as exc:
            result = ToolResult(ERROR_PREFIX + exc.message, ok=False)
        except Exception as exc:
            log.exception("tool.crashed", tool=name)
            result = ToolResult(f"{ERROR_PREFIX}{type(exc).__name__}: {exc}", ok=False)
        log.debug("tool.called", tool=name, surface=ctx.surface, ok=result.ok,
                 seconds=round(time.perf_counter() - started, 3))
        outside = ctx.outside_content or (tool is not None and tool.reads_outside)
        return replace(result, from_outside=True) if outside else result
