"""The MCP front-end: Hilo's memory as tools and resources for any MCP client (Claude
Desktop, Claude Code, Cursor, Continue, Open WebUI, agent frameworks).

Two transports, one server (`build_server`): `hilo mcp` speaks stdio, for a client that
starts Hilo itself (`serve_stdio`); `hilo serve` answers streamable HTTP at /mcp
(`http_endpoint`, mounted by app/serve/server.py behind the same Gate: the bearer token
and the body cap). The user is `--user` on stdio; over HTTP it is decided as on every
other route (app/http/callers.py: a per-user token is its user, else `X-Hilo-User`, else
[memory] user_id), by the rule the mount passes in.

Every tool is a thin call into the library the other front-ends use: memory edits run on
the front-end's writer (synchronous=FULL) through app/memory, reads take this thread's
read-only connection, tasks go through app/tasks/store.py. The HiloError family becomes
a tool error carrying its one-line message in one place, `_reported`.

What the tools write is a model's text, the MCP client's, and that model may have read
anything: facts, profile values, hand-off notes and task prompts written here are content
from outside (docs/trust.md, *The rules*; app.memory.provenance.is_outside), so a turn
that reads them acts only on a fresh yes. Forgetting is the client's to ask (its
tool is marked destructive, which MCP clients confirm with their user).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.routing import BaseRoute

from app import __version__
from app.config import Config
from app.datadir import DataDir
from app.errors import HiloError, InvalidInput, NotFound
from app.memory import (
    Category,
    Fact,
    FactNotFound,
    correct_fact,
    delete_profile,
    is_outside,
    last_diary,
    list_facts,
    list_profile,
    remember_fact,
    set_profile,
    write_diary_entry,
)
from app.memory.forget import forget
from app.recall.fusion import search_memory
from app.tasks.store import (
    add_task,
    describe_task,
    list_tasks,
    pause_task,
    remove_task,
    resume_task,
)
from app.turn.chat import ChatService
from app.turn.context import read_bootstrap
from workers.inspection import QueueView

__all__ = ["INSTRUCTIONS", "DIARY_SHOWN", "UserOf", "READ_ONLY", "ADDITIVE", "DESTRUCTIVE",
           "MemoryTools", "build_server", "serve_stdio", "HttpEndpoint", "http_endpoint"]

INSTRUCTIONS = (
    "Hilo is the user's long-term memory. Call `recall` before answering anything that "
    "may depend on the past, `remember` when the user states something worth keeping, "
    "`correct` when a remembered fact is wrong, `forget` when asked to, and "
    "`session_handoff` to leave (write) or pick up (read) a note between sessions.")
DIARY_SHOWN = 5

# Who calls: the user for an HTTP request (None on stdio); raises a HiloError to refuse it.
UserOf = Callable[[Request | None], str]

# The HTTP request of the message being handled (None on stdio); set for each message by
# `_keep_request`, read by the tools and resources through `MemoryTools.user`.
_REQUEST: ContextVar[Request | None] = ContextVar("hilo_mcp_request", default=None)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                           open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def _fact_dict(fact: Fact) -> dict[str, Any]:
    record = asdict(fact)
    record.pop("user_id")
    return record


class MemoryTools:
    """The tools and resources, each a method documented for the model that calls it."""

    def __init__(self, service: ChatService, user_of: UserOf) -> None:
        self.service = service
        self.config = service.config
        self.user_of = user_of

    def user(self) -> str:
        return self.user_of(_REQUEST.get())

    # -- memory --------------------------------------------------------------------------

    def remember(
        self,
        key: Annotated[str, Field(description="a short name for what the fact is about",
                                  examples=["editor", "project hilo deadline"])],
        value: Annotated[str, Field(description="the fact itself, in a sentence",
                                    examples=["Uses Helix, not Vim", "Ships on 30 June"])],
        category: Annotated[Category, Field(description="what kind of memory it is")] = "fact",
        importance: Annotated[float, Field(ge=0, le=1, description="0 trivial … 1 vital")] = 0.5,
    ) -> dict[str, Any]:
        """Store a fact about the user. One current fact per (category, key): a new value,
        or a very similar text under another key, supersedes the old fact (kept as
        history). Returns the action ("insert", "supersede", "unchanged") and the fact.

        Example: remember(key="editor", value="Uses Helix, not Vim", category="preference")
        """
        user = self.user()
        edited = self.service.edit(lambda con: remember_fact(
            con, user, category, key, value, importance=importance,
            similarity=self.config.memory.dedupe_similarity, from_outside=is_outside("outside")))
        return {"action": edited.action,
                "fact": _fact_dict(edited.fact) if edited.fact else None}

    def recall(
        self,
        query: Annotated[str, Field(min_length=1, description="words to look for",
                                    examples=["deadline", "which editor"])],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        explain: Annotated[bool, Field(description="each hit's rank in every retrieval "
                                                   "stream and its fused score")] = True,
    ) -> dict[str, Any]:
        """Search the memory: facts first, then summaries of earlier conversation, then
        past messages. Each hit has its kind ("fact", "card", "event"), id, text and date;
        a fact's id is what `correct` and `forget` take.

        Example: recall(query="project deadline", limit=5)
        """
        hits = search_memory(self.service.reader(), self.user(), query, limit,
                             recall=self.service.recall, embedder=self.service.query_embedder)
        return {"hits": [hit.to_dict(explain) for hit in hits]}

    def forget(
        self,
        fact_id: Annotated[int | None, Field(description="a fact's id (from recall or "
                                                         "list_facts)", examples=[42])] = None,
        profile_key: Annotated[str | None, Field(description="a profile key (from "
                                                             "get_profile)",
                                                 examples=["name"])] = None,
        with_sources: Annotated[bool, Field(description="a fact's: also delete the messages "
                                                        "it was learned from")] = False,
    ) -> dict[str, Any]:
        """Forget a fact for good (its value, earlier versions and vectors) or delete a
        profile key; no background worker learns either again. Give exactly one of fact_id
        and profile_key.

        Examples: forget(fact_id=42); forget(fact_id=42, with_sources=true);
        forget(profile_key="city")
        """
        if (fact_id is None) == (profile_key is None):
            raise InvalidInput("give exactly one of fact_id and profile_key")
        user = self.user()
        if fact_id is not None:
            gone = forget(self.service.writer, user, fact_id, worker="user",
                          with_sources=with_sources)
            if gone is None:
                raise FactNotFound(fact_id)
            return gone.to_json()
        assert profile_key is not None
        if not self.service.edit(lambda con: delete_profile(con, user, profile_key,
                                                            worker="user")):
            raise NotFound(f"no profile key {profile_key!r}: get_profile shows the keys")
        return {"profile_key": profile_key.strip().casefold(), "deleted": True}

    def correct(
        self,
        fact_id: Annotated[int, Field(description="the wrong fact's id", examples=[42])],
        value: Annotated[str, Field(description="what is true instead",
                                    examples=["Ships on 14 July"])],
    ) -> dict[str, Any]:
        """Replace a remembered fact's value; the wrong value stays in its history.

        Example: correct(fact_id=42, value="Ships on 14 July")
        """
        user = self.user()
        edited = self.service.edit(lambda con: correct_fact(con, user, fact_id, value,
                                                            from_outside=is_outside("outside")))
        return {"action": edited.action,
                "fact": _fact_dict(edited.fact) if edited.fact else None}

    def get_profile(self) -> dict[str, Any]:
        """The user's profile: permanent attributes (name, language, city, …), key → value.

        Example: get_profile()
        """
        entries = list_profile(self.service.reader(), self.user())
        return {"profile": [asdict(entry) for entry in entries]}

    def set_profile(
        self,
        key: Annotated[str, Field(description="the attribute", examples=["name", "timezone"])],
        value: Annotated[str, Field(examples=["Ana", "Europe/Madrid"])],
    ) -> dict[str, Any]:
        """Set one profile key (a key the user deleted comes back only this way).

        Example: set_profile(key="timezone", value="Europe/Madrid")
        """
        user = self.user()
        action = self.service.edit(lambda con: set_profile(
            con, user, key, value, source="user", worker="user",
            from_outside=is_outside("outside")))
        return {"key": key.strip().casefold(), "value": value.strip(), "action": action}

    def list_facts(
        self,
        category: Annotated[Category | None, Field(description="only this kind")] = None,
        limit: Annotated[int, Field(ge=1, le=10_000)] = 100,
        history: Annotated[bool, Field(description="superseded and deleted versions "
                                                   "too")] = False,
    ) -> dict[str, Any]:
        """The user's current facts, most recent first, each with its id and date.

        Example: list_facts(category="decision", limit=20)
        """
        facts = list_facts(self.service.reader(), self.user(), category=category, limit=limit,
                           include_history=history)
        return {"facts": [_fact_dict(fact) for fact in facts]}

    def context_for(
        self,
        text: Annotated[str, Field(min_length=1, description="a message as the user would "
                                                              "send it",
                                   examples=["what did we decide about the deadline?"])],
        session_id: Annotated[str, Field(description="whose recent messages form the "
                                                     "window")] = "mcp",
        system: Annotated[str | None, Field(description="a system prompt, kept first")] = None,
    ) -> dict[str, Any]:
        """What Hilo's model would be told for `text`: the messages (memory layers in the
        system prompt, the session's recent window, the text), their tokens against the
        budget, and `explain` (each layer's status, why each fact and summary was chosen).
        Nothing is stored.

        Example: context_for(text="what did we decide about the deadline?")
        """
        built = self.service.build_context(self.user(), session_id, text, client_system=system)
        return {"messages": built.messages, "tokens": built.tokens, "budget": built.budget,
                "explain": built.explain}

    def session_handoff(
        self,
        action: Annotated[Literal["write", "read"], Field(
            description="write this session's note, or read the latest notes")],
        session_id: Annotated[str | None, Field(description="the session the note is for "
                                                            "(write)",
                                                examples=["refactor-auth"])] = None,
        entry: Annotated[str | None, Field(description="what the next session needs to "
                                                       "know (write)")] = None,
        limit: Annotated[int, Field(ge=1, le=50, description="notes to read")] = 3,
    ) -> dict[str, Any]:
        """The diary, one entry per session: leave a note at the end of a session, pick up
        the latest ones at the start of the next. Writing a session's entry again
        replaces it (the old one stays in the history).

        Examples: session_handoff(action="write", session_id="refactor-auth",
        entry="Moved token checks to the gate; tests for expiry still to write");
        session_handoff(action="read", limit=2)
        """
        user = self.user()
        if action == "write":
            if session_id is None or entry is None:
                raise InvalidInput("writing a hand-off needs session_id and entry")
            written = self.service.edit(lambda con: write_diary_entry(
                con, user, session_id, entry, from_outside=is_outside("outside")))
            return {"session_id": session_id, "action": written}
        entries = last_diary(self.service.reader(), user, limit=limit)
        return {"entries": [asdict(entry) for entry in entries]}

    # -- scheduled tasks and the queue -------------------------------------------------------

    def tasks(
        self,
        action: Annotated[Literal["add", "list", "pause", "resume", "remove"], Field()],
        schedule: Annotated[str | None, Field(
            description='cron or plain words, in [schedule] timezone (add)',
            examples=["every weekday at 9", "0 9 * * 1-5", "in 10 minutes",
                      "cada lunes a las 8"])] = None,
        prompt: Annotated[str | None, Field(description="what Hilo asks itself at each run "
                                                        "(add)",
                                            examples=["Remind me to send the report"])] = None,
        name: Annotated[str | None, Field(description="a name to refer to it by (add)")] = None,
        oneshot: Annotated[bool, Field(description="run once, then remove it (add)")] = False,
        task: Annotated[int | str | None, Field(description="a task's id or name (pause, "
                                                            "resume, remove)",
                                                examples=[7, "weekly report"])] = None,
    ) -> dict[str, Any]:
        """Scheduled tasks: a prompt Hilo sends itself on a schedule, answered by the worker
        in the task's own session, so "remind me every Monday" works. Tasks added here are
        never trusted (they cannot run terminal commands unasked).

        Examples: tasks(action="add", schedule="every monday at 8", prompt="Remind me to
        plan the week"); tasks(action="list"); tasks(action="pause", task=7)
        """
        user, writer = self.user(), self.service.writer
        if action == "list":
            tz = self.config.schedule.timezone
            return {"tasks": [{**t.to_json(), "description": describe_task(t, tz)}
                              for t in list_tasks(self.service.reader(), user, tz)]}
        if action == "add":
            if schedule is None or prompt is None:
                raise InvalidInput("adding a task needs schedule and prompt")
            return add_task(writer, self.config, schedule, prompt, source="mcp", user_id=user,
                            name=name, oneshot=oneshot,
                            wake=self.service.handoff.wake_scheduler,
                            from_outside=is_outside("outside")).to_json()
        if task is None:
            raise InvalidInput(f"{action} needs task: its id or name (tasks action=list)")
        if action == "pause":
            return pause_task(writer, user, task).to_json()
        if action == "resume":
            return resume_task(writer, self.config, user, task).to_json()
        return remove_task(writer, user, task).to_json()

    def queue_status(self) -> dict[str, Any]:
        """The background workers' queue: jobs pending, scheduled, due and failed, and
        whether a worker is polling. Memory from a conversation is distilled there, so
        a long queue means recent facts are not recallable yet.

        Example: queue_status()
        """
        return QueueView(self.config).status().to_dict()

    # -- resources -----------------------------------------------------------------------

    def memory_md(self) -> str:
        """MEMORY.md: what the user wants every conversation to know, as they wrote it."""
        return read_bootstrap(DataDir.of(self.config).bootstrap)

    def profile_resource(self) -> str:
        """The user's profile as JSON: key, value, source, last update."""
        entries = list_profile(self.service.reader(), self.user())
        return json.dumps([asdict(entry) for entry in entries], ensure_ascii=False, indent=2)

    def diary_resource(self) -> str:
        """The latest diary entries (one per session), newest first, as JSON."""
        entries = last_diary(self.service.reader(), self.user(), limit=DIARY_SHOWN)
        return json.dumps([asdict(entry) for entry in entries], ensure_ascii=False, indent=2)


def _reported(fn: Callable[..., Any], error: type[Exception]) -> Callable[..., Any]:
    """`fn` with the HiloError family turned into `error` (ToolError, ResourceError), whose
    one-line message the client shows; anything else stays a bug the SDK logs."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HiloError as exc:  # a refusal's example lines join its one line
            raise error("; ".join(exc.message.splitlines())) from exc

    return call


async def _keep_request(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Make the HTTP request (None on stdio) visible to the tools for this message:
    resources get no request context of their own."""
    request = ctx.request if isinstance(ctx.request, Request) else None
    token = _REQUEST.set(request)
    try:
        return await call_next(ctx)
    finally:
        _REQUEST.reset(token)


class _HiloServer(MCPServer):
    """The SDK's server, with arguments that do not fit a tool's schema refused in one
    line, as every other tool error is (the SDK would send pydantic's multi-line dump)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            problems = "; ".join(_argument_problem(error) for error in exc.__cause__.errors())
            raise ToolError(f"Error executing tool {name}: {problems}") from exc.__cause__


def _argument_problem(error: Any) -> str:
    """One of pydantic's validation errors as a phrase: "key is missing"."""
    where = ".".join(str(part) for part in error["loc"]) or "the arguments"
    if error["type"] == "missing":
        return f"{where} is missing"
    return f"{where}: {error['msg']}"


def build_server(service: ChatService, user_of: UserOf) -> MCPServer:
    """The MCP server over `service`; `user_of` says who calls (see UserOf)."""
    tools = MemoryTools(service, user_of)
    server = _HiloServer("hilo", title="Hilo memory", instructions=INSTRUCTIONS,
                         version=__version__, middleware=[_keep_request])
    for method, hints in ((tools.remember, ADDITIVE), (tools.recall, READ_ONLY),
                          (tools.forget, DESTRUCTIVE), (tools.correct, ADDITIVE),
                          (tools.get_profile, READ_ONLY), (tools.set_profile, ADDITIVE),
                          (tools.list_facts, READ_ONLY), (tools.context_for, READ_ONLY),
                          (tools.session_handoff, ADDITIVE), (tools.tasks, DESTRUCTIVE),
                          (tools.queue_status, READ_ONLY)):
        server.add_tool(_reported(method, ToolError), annotations=hints)
    for uri, method, name in (("hilo://memory.md", tools.memory_md, "MEMORY.md"),
                              ("hilo://profile", tools.profile_resource, "profile"),
                              ("hilo://diary", tools.diary_resource, "diary")):
        mime = "text/markdown" if uri.endswith(".md") else "application/json"
        server.resource(uri, name=name, mime_type=mime)(_reported(method, ResourceError))
    return server


def serve_stdio(config: Config, user: str | None = None) -> int:
    """`hilo mcp`: answer one client on stdin/stdout until it closes them. Exit status."""
    DataDir.of(config).init()
    user_id = user or config.memory.user_id
    with ChatService(config) as service:
        service.warm_vectors()
        anyio.run(build_server(service, lambda request: user_id).run_stdio_async)
    return 0


@dataclass(frozen=True)
class HttpEndpoint:
    """/mcp for `hilo serve`: add `route` to the app and hold `running()` open for its life."""

    route: BaseRoute
    running: Callable[[], AbstractAsyncContextManager[None]]


def http_endpoint(service: ChatService, user_of: UserOf, path: str = "/mcp") -> HttpEndpoint:
    """Streamable HTTP, stateless: each request stands alone, so its own token and headers
    decide who calls, and a restart loses no session. Host and Origin are the
    app's Gate's to check, as for every other route."""
    server = build_server(service, user_of)
    app = server.streamable_http_app(
        streamable_http_path=path, stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    (route,) = app.routes
    return HttpEndpoint(route, server.session_manager.run)
