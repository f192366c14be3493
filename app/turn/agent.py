"""Hilo's own agent: a turn in which the model may call tools (app/turn/tools/).

`Agent.start_turn` stores the message and asks the model with the tools offered. While
the model answers with tool calls, each call runs and its result is stored as a `tool`
event (after the assistant event holding the calls); then the model is asked again with
the turn so far, until it answers in words. Bounds: at most [tools] max_steps model
calls, the last one without tools so it must answer, and no tools offered after
[tools] max_seconds. Every call gets a result event — also one that did not run (a
limit, Ctrl-C) — so the record always pairs calls and results, as the chat APIs want.

Macros (app/turn/macros.py): after a successful call that triggers a learned chain, the next
call is proposed to the person (`hilo chat`) or run (a trusted scheduled task) without
asking the model; it is stored as an assistant event whose call id starts "macro_".
Each one is a model call saved (`AgentOutcome.macro_calls`).

Outside content is data, not instructions. From the first step whose context
holds content from outside (BuiltContext.outside_content: a page, a client's tool
result, an import, memory learned from one) or that reads such a result of this turn's
own calls, the model's calls run with `ToolContext.outside_content`: acting needs a fresh
yes from the person at the terminal, and a trusted task runs as untrusted (no macros, no
commands: nobody is there to say yes). A macro's call follows from the call
that triggered it, and is as tainted as that one.
Each result is stored with its origin: "hilo_tool_approved" when a person said yes to
the call or it ran in a trusted run, else "hilo_tool"; macros learn only from the first.

A model server that refuses tools for a model (Ollama: HTTP 400 "… does not support
tools") gets the turn without them; the agent does not offer that model tools again.

`hilo serve`'s chat (`answer_client`) relays each step in the client's own API, with
Hilo's tools added to the request; only the last step — the answer — reaches the
client, so with tools on a streamed reply arrives whole at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from app.events import MAX_ID_LENGTH, Event
from app.log import get_logger
from app.model.client_chat import ClientChat
from app.model.errors import ModelError, ModelHTTPError
from app.model.replies import ReplyRecord
from app.model.tool_calls import events_as_messages
from app.turn.chat import ChatService, Turn
from app.turn.context import BuiltContext
from app.turn.macros import Macro, find_macro, macro_used
from app.turn.tools import Approver, Decision, Registry, Surface, ToolContext, default_registry
from app.turn.tools.registry import ERROR_PREFIX

__all__ = ["log", "MACRO_CALL_PREFIX", "ToolNote", "OnTool", "AgentOutcome", "refuses_tools",
           "Agent", "AgentTurn"]

log = get_logger(__name__)

MACRO_CALL_PREFIX = "macro_"


@dataclass(frozen=True)
class ToolNote:
    """What a front-end may show of a call: about to run ("call"), or done ("result",
    with the stored result event)."""

    phase: Literal["call", "result"]
    name: str
    arguments: Any
    result: Event | None = None
    ok: bool = True
    macro: Macro | None = None


OnTool = Callable[[ToolNote], None]


@dataclass
class AgentOutcome:
    user_event: Event
    context: BuiltContext
    reply_event: Event | None = None  # the model's last reply: its answer, when it gave one
    model_calls: int = 0
    tool_events: list[Event] = field(default_factory=list)
    macro_calls: int = 0  # calls a macro made instead of the model: model calls saved
    stopped: str | None = None  # why the loop ended with calls it did not run
    interrupted: bool = False
    error: ModelError | None = None


class _Answers:
    """The approver of one call, noting whether the person said yes to it: a call a
    person approved is on record as such, and teaches macros."""

    def __init__(self, approver: Approver) -> None:
        self.approver = approver
        self.yes = False

    def approve_command(self, command: str, rule: str | None, why_not_always: str = "") -> Decision:
        decision = self.approver.approve_command(command, rule, why_not_always)
        self.yes = decision != "deny"
        return decision

    def confirm_macro(self, description: str) -> bool:
        return self.approver.confirm_macro(description)

    def approve_outside(self, action: str) -> bool:
        self.yes = self.approver.approve_outside(action)
        return self.yes


def refuses_tools(exc: ModelError) -> bool:
    """Whether the server refused the request for its tools (the model has none)."""
    return (isinstance(exc, ModelHTTPError) and exc.status == 400
            and "tool" in exc.server_message.lower())


class Agent:
    """Runs turns with tools on one surface ("chat", "task" or "http") of a ChatService."""

    def __init__(self, service: ChatService, *, surface: Surface,
                 registry: Registry | None = None, approver: Approver | None = None) -> None:
        self.service = service
        self.config = service.config
        self.surface = surface
        self.registry = registry or default_registry(service.config)
        self.approver = approver
        self._without_tools: set[str] = set()  # models their server refused tools for

    @property
    def enabled(self) -> bool:
        tools = self.config.tools
        return {"chat": tools.chat, "task": tools.tasks, "http": tools.http}[self.surface]

    def tool_specs(self, model: str) -> list[dict[str, Any]] | None:
        if not self.enabled or model in self._without_tools:
            return None
        return self.registry.specs(self.surface) or None

    def refused_tools(self, model: str) -> None:
        if model not in self._without_tools:
            self._without_tools.add(model)
            log.warning("agent.model_without_tools", model=model, surface=self.surface)

    def context(self, user_id: str, session_id: str, trusted: bool) -> ToolContext:
        deadline = time.monotonic() + self.config.tools.max_seconds
        return ToolContext(self.config, self.service, user_id, session_id, self.surface,
                           trusted=trusted, approver=self.approver, deadline=deadline)

    def start_turn(self, user_id: str, session_id: str, text: str | bytes, *,
                   client_system: str | None = None, role: str = "user",
                   origin: str = "typed", from_outside: bool = False, trusted: bool = False,
                   options: dict | None = None, on_tool: OnTool | None = None) -> AgentTurn:
        """Store the message and ask the model, tools offered; iterate the turn for the
        reply's text. `origin`: where the message came from (app/events.py ORIGINS);
        `from_outside`: the message is text no person at this machine wrote.
        `trusted`: a scheduled task the user trusts (its terminal commands need no
        allowed prefix, its macros run) while its context holds nothing from outside.
        Raises ModelError (after the message is stored) when the model cannot start."""
        user_event = self.service.append(user_id, session_id, role, text, origin=origin,
                                         from_outside=from_outside)
        return AgentTurn(self, self.context(user_id, session_id, trusted), user_event,
                         client_system=client_system, options=options, on_tool=on_tool)

    def answer_client(self, user_event: Event, client: ClientChat,
                      stored: Sequence[Event] = (), replaces: Sequence[int] = ()) -> AgentTurn:
        """A client's chat request (hilo serve) with Hilo's tools: iterate the turn for the
        bytes of the last step's reply; see the module docstring. `replaces`: as
        ChatService.answer takes it."""
        ctx = self.context(user_event.user_id, user_event.session_id, trusted=False)
        return AgentTurn(self, ctx, user_event, client=client, stored=stored, replaces=replaces)


class AgentTurn:
    """One turn of the agent in flight; iterate it for the reply (text pieces, or for a
    relayed request the bytes for the client), or `run()` it to the end."""

    def __init__(self, agent: Agent, ctx: ToolContext, user_event: Event, *,
                 client_system: str | None = None, options: dict | None = None,
                 on_tool: OnTool | None = None, client: ClientChat | None = None,
                 stored: Sequence[Event] = (), replaces: Sequence[int] = ()) -> None:
        self.agent = agent
        self.ctx = ctx
        self.user_event = user_event
        self._client_system = client_system
        self._options = options
        self._on_tool = on_tool
        self._client = client
        self._model = (client.model if client is not None else "") or agent.config.llm.chat_model
        self._started = time.monotonic()
        self._events: list[Event] = []  # this turn's events after the message
        self._offered = False  # whether the step in flight was offered tools
        self._outside = False  # whether a step's context has held content from outside
        self._turn = self._step(stored, first=True, replaces=replaces)
        self.outcome = AgentOutcome(user_event, self._turn.context)

    # -- what a front-end reads -------------------------------------------------------------

    @property
    def context(self) -> BuiltContext:
        return self._turn.context

    @property
    def record(self) -> ReplyRecord | None:
        return self._turn.record

    def interrupt(self) -> None:
        self._turn.interrupt()

    def run(self) -> AgentOutcome:
        """Consume the whole turn; ModelError propagates after what arrived is stored."""
        for _ in self:
            pass
        return self.outcome

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self._steps()
        except ModelError as exc:
            self.outcome.error = exc
            raise
        log.debug("agent.turn_done", surface=self.ctx.surface,
                 model_calls=self.outcome.model_calls, tool_calls=len(self.outcome.tool_events),
                 macro_calls=self.outcome.macro_calls, stopped=self.outcome.stopped)

    def _steps(self) -> Iterator[Any]:
        """Each model call in turn, its calls run, until one answers (or may not call)."""
        while True:
            turn = self._turn
            self.outcome.model_calls += 1
            if self._client is None:
                yield from turn
                held: list[bytes] = []
            else:
                held = list(turn)  # only the answer reaches the client
            step = turn.outcome
            self._outside = self._outside or step.context.outside_content
            self.outcome.context = step.context
            self.outcome.reply_event = step.reply_event
            self.outcome.interrupted = step.interrupted
            calls = turn.tool_calls if step.reply_event is not None else []
            if calls and not step.interrupted:
                if self._offered:
                    self._turn = self._step(self._run_calls(step.reply_event, calls))
                    continue
                self._not_run(step.reply_event, calls, self._limit_reason())
            yield from held
            return

    # -- one step: one model call ----------------------------------------------------------------

    def _offer(self, first: bool) -> list[dict[str, Any]] | None:
        """The tools for the next model call: none for the last one allowed, nor after
        the turn's time is up."""
        tools = self.agent.config.tools
        calls_made = 0 if first else self.outcome.model_calls
        if calls_made + 1 >= tools.max_steps:
            return None
        if time.monotonic() - self._started >= tools.max_seconds:
            return None
        return self.agent.tool_specs(self._model)

    def _limit_reason(self) -> str:
        tools = self.agent.config.tools
        if self.outcome.model_calls >= tools.max_steps:
            return (f"the turn reached its limit of {tools.max_steps} model calls "
                    "([tools] max_steps)")
        if time.monotonic() - self._started >= tools.max_seconds:
            return f"the turn ran out of time ([tools] max_seconds = {tools.max_seconds:g})"
        return "no tools were offered in this turn"

    def _step(self, stored: Sequence[Event], first: bool = False,
              replaces: Sequence[int] = ()) -> Turn:
        tools = self._offer(first)
        try:
            return self._ask(tools, stored, replaces)
        except ModelError as exc:
            if not (tools and refuses_tools(exc)):
                raise
            self.agent.refused_tools(self._model)
            return self._ask(None, stored, replaces)

    def _ask(self, tools: list[dict[str, Any]] | None, stored: Sequence[Event],
             replaces: Sequence[int] = ()) -> Turn:
        self._offered = bool(tools)
        service = self.agent.service
        if self._client is None:
            return service.answer(self.user_event, client_system=self._client_system,
                                  options=self._options, tools=tools, continued=self._events,
                                  stored=stored)
        client = self._client
        body = {key: value for key, value in client.body.items() if key != "tools"}
        if tools:
            body["tools"] = tools
        messages = [*client.messages, *events_as_messages(self._events, client.api)]
        return service.answer(self.user_event, stored=stored, continued=self._events,
                              client=ClientChat(client.api, body, messages, client.with_window,
                                                client.query, sent=len(client.messages),
                                                events=client.events),
                              replaces=replaces)

    # -- running the calls -----------------------------------------------------------------------

    def _acting(self) -> ToolContext:
        """The context the model's calls run in: once it has read content from outside,
        acting needs a fresh yes, and a trusted task's run is untrusted."""
        if not self._outside:
            return self.ctx
        return replace(self.ctx, outside_content=True, trusted=False)

    def _run_calls(self, reply: Event, calls: list[dict[str, Any]]) -> list[Event]:
        """Run a reply's calls in order, then what a macro adds; the events to send."""
        self._events.append(reply)
        start = len(self._events)
        ids = [str(call.get("id") or f"call_{reply.id}_{index}")[:MAX_ID_LENGTH]
               for index, call in enumerate(calls)]
        ctx = self._acting()
        try:
            ok = True
            for call_id, call in zip(ids, calls, strict=True):
                ok = self._run_one(call_id, str(call.get("name") or ""), call.get("arguments"),
                                   ctx)
            if ok:
                self._follow_macros(calls[-1], ctx)
        except KeyboardInterrupt:
            answered = {e.tool_call_id for e in self._events[start:]}
            for call_id, call in zip(ids, calls, strict=True):
                if call_id not in answered:
                    self._record(call_id, str(call.get("name") or ""),
                                 f"{ERROR_PREFIX}not run: the user interrupted the turn")
            self.outcome.interrupted = True
            raise
        return self._events[start:]

    def _run_one(self, call_id: str, name: str, arguments: Any, ctx: ToolContext,
                 macro: Macro | None = None) -> bool:
        self._note(ToolNote("call", name, arguments, macro=macro))
        answers = _Answers(ctx.approver) if ctx.approver is not None else None
        result = self.agent.registry.call(replace(ctx, approver=answers), name, arguments)
        approved = ctx.trusted or ctx.preapproved or (answers is not None and answers.yes)
        event = self._record(call_id, name, result.text, approved, result.from_outside)
        self._note(ToolNote("result", name, arguments, event, result.ok, macro))
        return result.ok

    def _record(self, call_id: str, name: str, text: str, approved: bool = False,
                from_outside: bool = False) -> Event:
        event = self.agent.service.append(self.ctx.user_id, self.ctx.session_id, "tool", text,
                                          tool_call_id=call_id, tool_name=name[:200] or None,
                                          origin="hilo_tool_approved" if approved
                                          else "hilo_tool", from_outside=from_outside)
        self._events.append(event)
        self.outcome.tool_events.append(event)
        return event

    def _not_run(self, reply: Event, calls: list[dict[str, Any]], reason: str) -> None:
        """Calls the model made when it was not offered tools: each gets its "not run"."""
        self._events.append(reply)
        self.outcome.stopped = reason
        for index, call in enumerate(calls):
            self._record(str(call.get("id") or f"call_{reply.id}_{index}")[:MAX_ID_LENGTH],
                         str(call.get("name") or ""), f"{ERROR_PREFIX}not run: {reason}")
        log.warning("agent.stopped", surface=self.ctx.surface, reason=reason)

    def _note(self, note: ToolNote) -> None:
        if self._on_tool is not None:
            self._on_tool(note)

    # -- macros ------------------------------------------------------------------------------------

    @staticmethod
    def _macros_apply(ctx: ToolContext) -> bool:
        """Proposed to a person who can answer; run in a trusted task (one that has read
        nothing from outside when the model made the triggering call); never elsewhere."""
        return ((ctx.surface == "chat" and ctx.approver is not None)
                or (ctx.surface == "task" and ctx.trusted))

    def _follow_macros(self, call: dict[str, Any], acting: ToolContext) -> None:
        if not self._macros_apply(acting):
            return
        tools, service = self.agent.config.tools, self.agent.service
        name, arguments = str(call.get("name") or ""), call.get("arguments")
        for _ in range(tools.max_steps):
            macro = find_macro(service.reader(), self.ctx.user_id, name, arguments,
                               confidence=tools.macro_confidence,
                               min_support=tools.macro_min_support)
            if (macro is None or self.agent.registry.get(macro.next_tool, self.ctx.surface) is None
                    or time.monotonic() - self._started >= tools.max_seconds):
                return
            ctx = acting
            if ctx.surface == "chat":
                assert ctx.approver is not None
                if not ctx.approver.confirm_macro(macro.describe()):
                    return
                ctx = ctx.approved_call()  # the person said yes to this very call
            name, arguments = macro.next_tool, macro.next_arguments
            call_id = f"{MACRO_CALL_PREFIX}{macro.id}_{len(self.outcome.tool_events)}"
            self._events.append(service.append(
                self.ctx.user_id, self.ctx.session_id, "assistant", "",
                tool_calls=[{"id": call_id, "name": name, "arguments": arguments}],
                origin="hilo_tool_approved"))  # Hilo's own call: it runs only so
            ok = self._run_one(call_id, name, arguments, ctx, macro)
            service.edit(lambda con: macro_used(con, macro.id))  # noqa: B023 — submit() waits for it
            self.outcome.macro_calls += 1
            if not ok:
                return
