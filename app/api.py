"""The HTTP front-end, `hilo serve`: memory for any existing chat client.

Hilo speaks Ollama's API (`POST /api/chat`, with `GET /api/tags`, `POST /api/show` and
`GET /api/version` passed through to the model server) and OpenAI's
(`POST /v1/chat/completions`, `GET /v1/models`), so a client pointed at Hilo instead of
the model server gets memory without changing anything else. Beside them: a JSON
memory API under `/memory/...` and `GET /health`; the OpenAPI document is /openapi.json.

Who and where, per chat request:
- user: the `X-Hilo-User` header, else `[memory] user_id`. Every read and write is
  filtered by it, so one user never sees another's rows.
- session: the `X-Hilo-Session` header, else the body's `user` field (OpenAI's), else
  `auto-` + 16 hex digits of sha256 of the conversation's first user message: clients
  resend the whole conversation, so its first message names it for as long as the
  client keeps it. Two conversations opened with the same words share a session.

Clients resend the whole history every turn, and Hilo keeps its own: only the trailing
user message is stored, and not even that when it is a resend of the session's last
stored user message — same text (as stored: sanitised), the client has not seen a
stored reply to it (its previous two messages are not that message and a stored reply
to it), and the messages before it agree with those stored before it (the last two,
as far as both go). A retry after an error and a "regenerate" are resends: they are
answered again without storing the message twice; the same words typed again after
the reply are a new message. The context comes from Hilo's memory, not the client's
history; the client's system prompt is kept and the memory layers are added to it.

With `[server] token` set, every route but /health needs `Authorization: Bearer
<token>`; without one, `run_server` refuses to listen anywhere but loopback.

ChatService is synchronous: endpoints are plain functions run in the threadpool, and
replies stream from a sync generator pulled one piece at a time in the threadpool.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import signal
import sys
import threading
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from typing import Annotated, Any, AsyncIterator, Iterator, Literal

import anyio
import structlog
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.backup import hold_pid_file
from app.chat import INTERRUPTED_MARKER, ChatService, Turn
from app.config import Config
from app.datadir import init_data_dir
from app.db import schema_version
from app.events import MAX_ID_LENGTH, Event, InvalidEvent, prepare_event, session_events
from app.llm import (
    ModelError,
    ModelHTTPError,
    ModelNotFound,
    ModelTimeout,
    ModelUnreachable,
)
from app.memory import (
    CATEGORIES,
    InvalidMemory,
    delete_fact,
    delete_profile,
    fact_history,
    get_fact,
    list_facts,
    list_profile,
    list_sessions,
    set_profile,
    upsert_fact,
)
from app.retrieval import search_memory
from app.timeutil import utc_now
from app.tokens import estimate_tokens
from workers.handoff import queue_handoff

log = structlog.get_logger(__name__)

VERSION = "0.1.0"
# Whole conversations are resent every turn: 100 turns of 32k characters fit.
MAX_BODY_BYTES = 32 * 1024 * 1024
# Routes open without the token.
OPEN_PATHS = frozenset({"/health"})
# Stored events examined when deciding whether a message is a resend.
RESEND_LOOKBACK = 16
# Messages before the resent one compared with the stored ones.
RESEND_CONTEXT = 2
SYSTEM_ROLES = ("system", "developer")
CONVERSATION_ROLES = ("user", "assistant")


# ----------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A request Hilo answers with an error in the calling API's own shape."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                       404: "not_found_error", 413: "invalid_request_error",
                       422: "invalid_request_error"}


def error_body(path: str, status: int, message: str, code: str) -> dict:
    """OpenAI's error shape under /v1, Ollama's `{"error": "..."}` everywhere else."""
    if path.startswith("/v1/"):
        kind = _OPENAI_ERROR_TYPES.get(status, "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"error": message}


def _error_response(path: str, status: int, message: str, code: str,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(path, status, message, code), status_code=status,
                        headers=headers)


def model_error_status(exc: ModelError) -> tuple[int, str]:
    """The HTTP status and error code a client gets for a model server failure."""
    if isinstance(exc, ModelNotFound):
        return 404, "model_not_found"
    if isinstance(exc, ModelUnreachable):
        return 503, "model_unreachable"
    if isinstance(exc, ModelTimeout):
        return 504, "model_timeout"
    if isinstance(exc, ModelHTTPError) and 400 <= exc.status < 500 and exc.status not in (401, 403):
        return exc.status, "model_rejected"
    return 502, "model_error"


def _turn_error(exc: ModelError) -> ApiError:
    status, code = model_error_status(exc)
    return ApiError(status, f"{exc} (Hilo kept your message: send it again to retry)", code)


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            message = f"the request body is not valid JSON: {error.get('msg', '')}"
            return 400, message, "invalid_json"
        if tuple(error.get("loc", ())) == ("body",):
            return 400, "the request body must be a JSON object", "invalid_json"
        loc = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{loc or 'body'}: {error.get('msg', 'invalid')}")
    return 422, "invalid request: " + "; ".join(problems), "invalid_request"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(request.url.path, exc.status, exc.message, exc.code)

    @app.exception_handler(ModelError)
    async def model_error(request: Request, exc: ModelError) -> JSONResponse:
        status, code = model_error_status(exc)
        return _error_response(request.url.path, status, str(exc), code)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, code = _validation_message(exc)
        return _error_response(request.url.path, status, message, code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; see /openapi.json"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
        return _error_response(request.url.path, exc.status_code, message, "http_error",
                               getattr(exc, "headers", None))


# ----------------------------------------------------------------------------- the gate


class _Gate:
    """Bearer token on every route but /health, and a cap on request bodies.

    A pure ASGI middleware, so streamed replies pass through untouched.
    """

    def __init__(self, app: Any, token: str, max_body: int) -> None:
        self.app, self.token, self.max_body = app, token.encode(), max_body

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = dict(scope["headers"])
        if self.token and path not in OPEN_PATHS and not self._authorized(headers):
            await _error_response(
                path, 401, "missing or wrong bearer token: send the header "
                "`Authorization: Bearer <token>` with Hilo's [server] token", "unauthorized",
                {"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None:
            if int(length) > self.max_body:
                await self._too_large(scope, receive, send, int(length))
                return
        elif scope["method"] in ("POST", "PUT", "PATCH"):
            # A chunked body: read it here, up to the cap, and hand it on whole.
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                if len(body) > self.max_body:
                    await self._too_large(scope, receive, send, None)
                    return
                if not message.get("more_body"):
                    break
            receive = _replay(bytes(body), receive)
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token)

    async def _too_large(self, scope: dict, receive: Any, send: Any, size: int | None) -> None:
        size_text = f"{size} bytes" if size is not None else "larger than that"
        message = (f"the request body is {size_text}; Hilo accepts at most "
                   f"{self.max_body} bytes — send less history or shorter messages")
        await _error_response(scope["path"], 413, message, "body_too_large")(scope, receive, send)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


# ----------------------------------------------------------------------------- who is asking


@dataclass(frozen=True)
class Caller:
    user_id: str
    session_header: str | None


def _check_id(name: str, value: str) -> str:
    if not value.strip() or len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise ApiError(400, f"{name} must be 1 to {MAX_ID_LENGTH} printable characters",
                       f"bad_{name}")
    return value


UserHeader = Annotated[str | None, Header(description="The user, else [memory] user_id")]
SessionHeader = Annotated[str | None, Header(description="The session (chat routes)")]


def caller(request: Request, x_hilo_user: UserHeader = None,
           x_hilo_session: SessionHeader = None) -> Caller:
    user_id = x_hilo_user if x_hilo_user is not None else request.app.state.config.memory.user_id
    session = _check_id("session", x_hilo_session) if x_hilo_session is not None else None
    return Caller(_check_id("user", user_id), session)


def service_of(request: Request) -> ChatService:
    return request.app.state.service


Who = Annotated[Caller, Depends(caller)]
Service = Annotated[ChatService, Depends(service_of)]


# ----------------------------------------------------------------------------- conversations


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    """A message's text; of OpenAI's content parts, only the text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content
                   if part.get("type", "text") == "text")


@dataclass(frozen=True)
class Conversation:
    """What a chat request says: the client's system prompt, the earlier messages
    (user and assistant only), and the new user message."""

    system: str | None
    history: tuple[tuple[str, str], ...]
    text: str
    first_user_text: str


def read_conversation(messages: list[ChatMessage]) -> Conversation:
    if not messages:
        raise ApiError(400, "no messages: send at least one message with role \"user\"",
                       "no_user_message")
    last = messages[-1]
    if last.role != "user":
        raise ApiError(400, f"the last message has role {last.role!r}: Hilo answers a trailing "
                       "message with role \"user\" (tool calls are not supported)",
                       "no_user_message")
    text = message_text(last.content)
    if not text.strip():
        raise ApiError(400, "the last user message has no text", "no_user_message")
    systems = [message_text(m.content).strip() for m in messages if m.role in SYSTEM_ROLES]
    history = tuple((m.role, message_text(m.content)) for m in messages[:-1]
                    if m.role in CONVERSATION_ROLES)
    first_user = next(message_text(m.content) for m in messages if m.role == "user")
    return Conversation("\n\n".join(s for s in systems if s) or None, history, text, first_user)


def session_for(who: Caller, body_user: str | None, conversation: Conversation) -> str:
    """X-Hilo-Session, else the body's `user`, else derived from the first user message."""
    if who.session_header is not None:
        return who.session_header
    if body_user:
        return _check_id("session", body_user)
    digest = hashlib.sha256(" ".join(conversation.first_user_text.split()).encode()).hexdigest()
    return f"auto-{digest[:16]}"


def _squash(text: str) -> str:
    return " ".join(text.split())


def _same(stored: str, client_text: str) -> bool:
    # An interrupted reply is stored with a marker; the client kept the text without it.
    return _squash(stored.removesuffix(INTERRUPTED_MARKER)) == _squash(client_text)


def find_resend(service: ChatService, user_id: str, session_id: str,
                conversation: Conversation) -> Event | None:
    """The stored user event this request resends, or None if its message is new.

    See the module docstring for the rule.
    """
    stored = [e for e in session_events(service.reader(), user_id, session_id,
                                        limit=RESEND_LOOKBACK)
              if e.role in CONVERSATION_ROLES]
    last = max((i for i, e in enumerate(stored) if e.role == "user"), default=None)
    if last is None:
        return None
    event = stored[last]

    def as_stored(role: str, text: str) -> str:
        return prepare_event(service.config, user_id, session_id, role, text).content

    if not _same(event.content, as_stored("user", conversation.text)):
        return None
    before = [(role, as_stored(role, text))
              for role, text in conversation.history[-RESEND_CONTEXT:]]
    replies = [e for e in stored[last + 1:] if e.role == "assistant"]
    if (len(before) == 2 and before[0][0] == "user" and before[1][0] == "assistant"
            and _same(event.content, before[0][1])
            and any(_same(reply.content, before[1][1]) for reply in replies)):
        return None  # the client saw the reply: the same words again are a new message
    for (role, text), earlier in zip(reversed(before), reversed(stored[:last])):
        if role != earlier.role or not _same(earlier.content, text):
            return None  # another conversation that happens to end with the same words
    return event


class SessionLocks:
    """One lock per (user, session) in use, so deciding whether a message is new and
    storing it happen once at a time per session: a double submit stores it once."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], list] = {}  # key -> [lock, holders]
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, user_id: str, session_id: str) -> Iterator[None]:
        key = (user_id, session_id)
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[key]


_session_locks = SessionLocks()


@dataclass
class OpenedTurn:
    turn: Turn
    user_id: str
    session_id: str
    model: str
    started: float

    @property
    def headers(self) -> dict[str, str]:
        return {name: value for name, value in (("X-Hilo-User", self.user_id),
                                                ("X-Hilo-Session", self.session_id))
                if value.isascii()}


def open_turn(service: ChatService, who: Caller, body_user: str | None,
              messages: list[ChatMessage], model: str | None, options: dict) -> OpenedTurn:
    """Store the new message (unless resent) and open the model's reply.

    Raises ApiError in the caller's shape; when the model fails, the message is kept.
    """
    started = time.perf_counter()
    conversation = read_conversation(messages)
    session_id = session_for(who, body_user, conversation)
    model = model or service.config.llm.chat_model
    with _session_locks.hold(who.user_id, session_id):
        resent = find_resend(service, who.user_id, session_id, conversation)
        try:
            if resent is None:
                turn = service.start_turn(who.user_id, session_id, conversation.text,
                                          client_system=conversation.system, model=model,
                                          options=options)
            else:
                turn = service.answer(resent, client_system=conversation.system,
                                      model=model, options=options)
        except ModelError as exc:
            log.warning("chat.model_failed", session=session_id, resent=resent is not None,
                        error=str(exc))
            raise _turn_error(exc) from exc
        except InvalidEvent as exc:
            raise ApiError(400, str(exc), "invalid_event") from exc
    log.info("chat.turn", user=who.user_id, session=session_id, resent=resent is not None,
             event_id=turn.outcome.user_event.id)
    return OpenedTurn(turn, who.user_id, session_id, model, started)


def _reply_counts(opened: OpenedTurn, text: str) -> tuple[int, int]:
    """Prompt and reply tokens: the model server's counts, else Hilo's estimates."""
    reply = opened.turn.reply
    prompt = (reply and reply.prompt_eval_count) or opened.turn.context.tokens
    completion = (reply and reply.eval_count) or estimate_tokens(text)
    return prompt, completion


async def pull_in_threadpool(lines: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Stream a sync generator, one piece per threadpool call, and close it however the
    response ends — a client that hangs up mid-reply still gets its partial reply stored."""
    try:
        while True:
            line = await run_in_threadpool(next, lines, None)
            if line is None:
                return
            yield line
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lines.close)


def _json_line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


# ----------------------------------------------------------------------------- Ollama API


class OllamaChatRequest(BaseModel):
    """Ollama's /api/chat request; fields Hilo does not use (tools, format, ...) are ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    messages: list[ChatMessage] = Field(default_factory=list)
    stream: bool | None = None
    options: dict[str, Any] | None = None
    user: str | None = Field(None, description="Hilo: the session, if X-Hilo-Session is absent")


def _ollama_options(options: dict[str, Any] | None) -> dict[str, Any]:
    # Hilo owns the context window: its budget is computed for [llm] num_ctx.
    return {k: v for k, v in (options or {}).items() if k != "num_ctx"}


def _ollama_done(opened: OpenedTurn, text: str) -> dict:
    prompt, completion = _reply_counts(opened, text)
    reply = opened.turn.reply
    return {
        "done": True,
        "done_reason": (reply.done_reason if reply else None) or "stop",
        "total_duration": int((time.perf_counter() - opened.started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": prompt,
        "prompt_eval_duration": 0,
        "eval_count": completion,
        "eval_duration": 0,
    }


def ollama_lines(opened: OpenedTurn) -> Iterator[bytes]:
    """The reply as Ollama's NDJSON stream; a failure mid-reply is an {"error"} line."""
    pieces = iter(opened.turn)
    received: list[str] = []
    try:
        for piece in pieces:
            received.append(piece)
            yield _json_line({"model": opened.model, "created_at": utc_now(),
                              "message": {"role": "assistant", "content": piece}, "done": False})
    except ModelError as exc:
        yield _json_line({"error": _turn_error(exc).message})
        return
    finally:
        pieces.close()
    yield _json_line({"model": opened.model, "created_at": utc_now(),
                      "message": {"role": "assistant", "content": ""},
                      **_ollama_done(opened, "".join(received))})


def _whole_reply(opened: OpenedTurn) -> str:
    try:
        return "".join(opened.turn)
    except ModelError as exc:
        raise _turn_error(exc) from exc


ollama = APIRouter(tags=["Ollama API"])


@ollama.post("/api/chat", summary="Chat with memory (Ollama's /api/chat)",
             response_model=None,
             responses={200: {"description": "NDJSON stream, or one JSON object with stream=false"},
                        400: {"description": "no user message, invalid JSON"},
                        503: {"description": "the model server is down; the message is kept"}})
def ollama_chat(body: OllamaChatRequest, who: Who, service: Service) -> Response:
    """Stores the new user message, adds the memory layers to the client's system prompt
    and streams the model's reply (NDJSON) — or returns it whole with `stream: false`."""
    opened = open_turn(service, who, body.user, body.messages, body.model,
                       _ollama_options(body.options))
    if body.stream is False:
        text = _whole_reply(opened)
        return JSONResponse({"model": opened.model, "created_at": utc_now(),
                             "message": {"role": "assistant", "content": text},
                             **_ollama_done(opened, text)}, headers=opened.headers)
    return StreamingResponse(pull_in_threadpool(ollama_lines(opened)),
                             media_type="application/x-ndjson", headers=opened.headers)


def _passthrough(service: ChatService, method: str, path: str,
                 body: dict | None = None) -> Response:
    answer = service.model.forward(method, path, body)
    return Response(answer.content, status_code=answer.status_code,
                    media_type=answer.headers.get("content-type", "application/json"))


@ollama.get("/api/tags", summary="The model server's models (passed through)")
def ollama_tags(service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "GET", "/api/tags")
    return JSONResponse({"models": [
        {"name": name, "model": name, "modified_at": "1970-01-01T00:00:00Z", "size": 0,
         "digest": "", "details": {}} for name in service.model.list_models()]})


@ollama.post("/api/show", summary="A model's details (passed through)")
def ollama_show(body: dict[str, Any], service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "POST", "/api/show", body)
    name = str(body.get("model") or body.get("name") or "")
    if name not in service.model.list_models():
        return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
    return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": {},
                         "model_info": {}, "capabilities": ["completion"]})


@ollama.get("/api/version", summary="The model server's version (passed through)")
def ollama_version(service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "GET", "/api/version")
    return JSONResponse({"version": VERSION})


# ----------------------------------------------------------------------------- OpenAI API


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class OpenAIChatRequest(BaseModel):
    """OpenAI's chat completion request; fields Hilo does not use (tools, n, ...) are ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    messages: list[ChatMessage] = Field(default_factory=list)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = Field(None, description="Hilo: the session, if X-Hilo-Session is absent")


def _openai_options(body: OpenAIChatRequest) -> dict[str, Any]:
    """OpenAI sampling fields as the model client's (Ollama-named) options."""
    options = {"temperature": body.temperature, "top_p": body.top_p, "seed": body.seed,
               "presence_penalty": body.presence_penalty,
               "frequency_penalty": body.frequency_penalty,
               "num_predict": body.max_completion_tokens or body.max_tokens,
               "stop": [body.stop] if isinstance(body.stop, str) else body.stop}
    return {k: v for k, v in options.items() if v is not None}


def _finish_reason(opened: OpenedTurn) -> str:
    reply = opened.turn.reply
    return "length" if reply and reply.done_reason == "length" else "stop"


def _usage(opened: OpenedTurn, text: str) -> dict:
    prompt, completion = _reply_counts(opened, text)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def openai_events(opened: OpenedTurn, include_usage: bool) -> Iterator[bytes]:
    """The reply as OpenAI's SSE stream; a failure mid-reply is a `data: {"error"}` event."""
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": opened.model}
    pieces = iter(opened.turn)
    received: list[str] = []
    try:
        for piece in pieces:
            delta = {"content": piece} if received else {"role": "assistant", "content": piece}
            received.append(piece)
            yield _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    except ModelError as exc:
        error = _turn_error(exc)
        yield _sse(error_body("/v1/", error.status, error.message, error.code))
        return
    finally:
        pieces.close()
    last = {} if received else {"role": "assistant", "content": ""}
    yield _sse({**head, "choices": [{"index": 0, "delta": last,
                                     "finish_reason": _finish_reason(opened)}]})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": _usage(opened, "".join(received))})
    yield b"data: [DONE]\n\n"


openai = APIRouter(tags=["OpenAI API"])


@openai.post("/v1/chat/completions", summary="Chat with memory (OpenAI's chat completions)",
             response_model=None,
             responses={200: {"description": "a chat.completion, or SSE with stream=true"},
                        400: {"description": "no user message, invalid JSON"},
                        503: {"description": "the model server is down; the message is kept"}})
def openai_chat(body: OpenAIChatRequest, who: Who, service: Service) -> Response:
    """Stores the new user message, adds the memory layers to the client's system prompt
    and answers as a chat.completion — or streams chunks (SSE) with `stream: true`;
    `stream_options.include_usage` adds the usage chunk."""
    opened = open_turn(service, who, body.user, body.messages, body.model, _openai_options(body))
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(pull_in_threadpool(openai_events(opened, include_usage)),
                                 media_type="text/event-stream", headers=opened.headers)
    text = _whole_reply(opened)
    return JSONResponse({
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": opened.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": _finish_reason(opened)}],
        "usage": _usage(opened, text),
    }, headers=opened.headers)


@openai.get("/v1/models", summary="The model server's models, as OpenAI lists them")
def openai_models(service: Service) -> dict:
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "hilo"}
        for name in service.model.list_models()]}


# ----------------------------------------------------------------------------- memory API


class EventIn(BaseModel):
    role: Literal["user", "assistant", "tool", "system"]
    content: str
    tool_call_id: str | None = None
    tool_name: str | None = None


class AppendEvents(BaseModel):
    session_id: str
    events: list[EventIn] = Field(min_length=1, max_length=1000)


class ContextRequest(BaseModel):
    session_id: str
    text: str
    system: str | None = Field(None, description="the client's system prompt, kept first")
    model: str | None = None


class ProfileValue(BaseModel):
    value: str


Category = Literal["fact", "decision", "solution", "preference", "conversation"]
assert set(Category.__args__) == set(CATEGORIES)  # the same as app.memory's


class FactIn(BaseModel):
    category: Category = "fact"
    key: str
    value: str
    importance: float = Field(0.5, ge=0, le=1)


def _event_dict(event: Event) -> dict:
    return {"id": event.id, "session_id": event.session_id, "role": event.role,
            "content": event.content, "created_at": event.created_at,
            "importance": event.importance, "compacted": event.compacted,
            "truncated_from": event.original_length, "redactions": list(event.redactions)}


def _fact_dict(fact: Any) -> dict:
    record = asdict(fact)
    record.pop("user_id")
    return record


def _edit(service: ChatService, write: Any) -> Any:
    try:
        return service.edit(write)
    except InvalidMemory as exc:
        raise ApiError(400, str(exc), "invalid_memory") from exc


memory = APIRouter(prefix="/memory", tags=["Memory API"])


@memory.post("/events", summary="Append events to a session", status_code=201)
def append_events(body: AppendEvents, who: Who, service: Service) -> dict:
    """Stored as the client sent them (sanitised: secrets redacted, size capped) and
    handed to the workers like a chat turn."""
    session_id = _check_id("session", body.session_id)
    try:
        stored = [service.append(who.user_id, session_id, e.role, e.content,
                                 tool_call_id=e.tool_call_id, tool_name=e.tool_name)
                  for e in body.events]
    except InvalidEvent as exc:
        raise ApiError(400, str(exc), "invalid_event") from exc
    service.handoff.after_reply(who.user_id, session_id, [e.id for e in stored])
    return {"events": [_event_dict(e) for e in stored]}


@memory.post("/context", summary="The context a turn would get, with explain")
def get_context(body: ContextRequest, who: Who, service: Service) -> dict:
    """The messages the model would receive for `text` in this session — nothing is
    stored — and `explain`: each layer's status and tokens, and why each fact and card
    was chosen."""
    built = service.build_context(who.user_id, _check_id("session", body.session_id), body.text,
                                  client_system=body.system, model=body.model)
    return {"messages": built.messages, "tokens": built.tokens, "budget": built.budget,
            "explain": built.explain}


@memory.get("/search", summary="Search facts, context cards and events")
def search(who: Who, service: Service, q: Annotated[str, Query(min_length=1)],
           limit: Annotated[int, Query(ge=1, le=100)] = 10, explain: bool = False) -> dict:
    """Facts, then cards, then raw events matching `q`; with `explain`, each hit's rank
    in every retrieval stream and its fused score."""
    hits = search_memory(service.reader(), who.user_id, q, limit, embedder=service.embedder)
    return {"hits": [hit.to_dict(explain) for hit in hits]}


@memory.get("/profile", summary="List profile keys")
def get_profile(who: Who, service: Service) -> dict:
    return {"profile": [asdict(entry) for entry in list_profile(service.reader(), who.user_id)]}


@memory.put("/profile/{key}", summary="Set a profile key")
def put_profile(key: str, body: ProfileValue, who: Who, service: Service) -> dict:
    action = _edit(service, lambda con: set_profile(con, who.user_id, key, body.value,
                                                    source="user", worker="user"))
    return {"key": key.strip().casefold(), "value": body.value.strip(), "action": action}


@memory.delete("/profile/{key}", summary="Delete a profile key (no worker re-creates it)")
def remove_profile(key: str, who: Who, service: Service) -> dict:
    if not _edit(service, lambda con: delete_profile(con, who.user_id, key, worker="user")):
        raise ApiError(404, f"no profile key {key!r}", "not_found")
    return {"key": key.strip().casefold(), "deleted": True}


@memory.get("/facts", summary="List current facts")
def get_facts(who: Who, service: Service,
              category: Annotated[Category | None, Query()] = None,
              limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
              history: bool = False) -> dict:
    """Most recent first; with `history`, superseded and deleted versions too."""
    facts = list_facts(service.reader(), who.user_id, category=category, limit=limit,
                       include_history=history)
    return {"facts": [_fact_dict(f) for f in facts]}


@memory.post("/facts", summary="Add or update a fact", status_code=201)
def add_fact(body: FactIn, who: Who, service: Service) -> dict:
    """One current fact per (category, key): a new value supersedes the old one, which is kept."""
    written = _edit(service, lambda con: upsert_fact(
        con, who.user_id, body.category, body.key, body.value, source="user", worker="user",
        importance=body.importance))
    fact = get_fact(service.reader(), who.user_id, written.fact_id) if written.fact_id else None
    return {"action": written.action, "fact": _fact_dict(fact) if fact else None}


@memory.get("/facts/{fact_id}", summary="One fact and the history of its key")
def get_one_fact(fact_id: int, who: Who, service: Service) -> dict:
    con = service.reader()
    fact = get_fact(con, who.user_id, fact_id)
    if fact is None:
        raise ApiError(404, f"no fact {fact_id}", "not_found")
    return {"fact": _fact_dict(fact), "history": fact_history(con, who.user_id, fact_id)}


@memory.delete("/facts/{fact_id}", summary="Delete a fact (no worker re-creates it)")
def remove_fact(fact_id: int, who: Who, service: Service) -> dict:
    if not _edit(service, lambda con: delete_fact(con, who.user_id, fact_id, worker="user")):
        raise ApiError(404, f"no current fact {fact_id}", "not_found")
    return {"id": fact_id, "deleted": True}


@memory.get("/sessions", summary="List sessions, most recent first")
def get_sessions(who: Who, service: Service,
                 limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict:
    return {"sessions": [asdict(s) for s in list_sessions(service.reader(), who.user_id,
                                                          limit=limit)]}


def _session_exists(service: ChatService, user_id: str, session_id: str) -> bool:
    return service.reader().execute(
        "SELECT 1 FROM sessions WHERE user_id = ? AND id = ?", (user_id, session_id)
    ).fetchone() is not None


@memory.get("/sessions/{session_id}/events", summary="A session's events, oldest first")
def get_session_events(session_id: str, who: Who, service: Service,
                       limit: Annotated[int | None, Query(ge=1, le=10_000)] = None) -> dict:
    if not _session_exists(service, who.user_id, session_id):
        raise ApiError(404, f"no session {session_id!r}", "not_found")
    events = session_events(service.reader(), who.user_id, session_id, limit=limit)
    return {"session_id": session_id, "events": [_event_dict(e) for e in events]}


@memory.post("/sessions/{session_id}/end", summary="End a session (its diary entry is queued)")
def end_session(session_id: str, who: Who, service: Service) -> dict:
    if not _session_exists(service, who.user_id, session_id):
        raise ApiError(404, f"no session {session_id!r}", "not_found")
    ended = service.end_session(who.user_id, session_id)
    return {"session_id": session_id, "ended": ended}


# ----------------------------------------------------------------------------- scheduled tasks

tasks_router = APIRouter(prefix="/memory/tasks", tags=["Scheduled tasks"])


class TaskIn(BaseModel):
    schedule: str = Field(description='cron ("0 9 * * 1-5") or plain English/Spanish: '
                                      '"every weekday at 9", "cada lunes a las 8", "in 10 minutes"')
    prompt: str
    name: str | None = None
    oneshot: bool = False
    trusted: bool = False


def _task_call(fn: Any) -> Any:
    """Run a task operation; its errors (all ValueErrors saying what to do) become HTTP's."""
    from app.scheduled_tasks import TaskNotFound

    try:
        return fn()
    except TaskNotFound as exc:
        raise ApiError(404, str(exc), "not_found") from exc
    except ValueError as exc:  # ScheduleError, TaskError
        raise ApiError(400, str(exc), "invalid_task") from exc


@tasks_router.get("", summary="List scheduled tasks: next run, last run, last error, paused")
def get_tasks(who: Who, service: Service) -> dict:
    from app.scheduled_tasks import describe_task, list_tasks

    tz = service.config.schedule.timezone
    return {"tasks": [{**t.to_json(), "description": describe_task(t, tz)}
                      for t in list_tasks(service.reader(), who.user_id)]}


@tasks_router.post("", summary="Add a task; the reply echoes the schedule in words",
                   status_code=201)
def add_task_route(body: TaskIn, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import add_task

    added = _task_call(lambda: add_task(
        service.writer, service.config, body.schedule, body.prompt, user_id=who.user_id,
        name=body.name, oneshot=body.oneshot, trusted=body.trusted))
    return added.to_json()


@tasks_router.post("/{ref}/pause", summary="Pause a task")
def pause_task_route(ref: str, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import pause_task

    return _task_call(lambda: pause_task(service.writer, who.user_id, ref)).to_json()


@tasks_router.post("/{ref}/resume", summary="Resume a paused task")
def resume_task_route(ref: str, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import resume_task

    return _task_call(lambda: resume_task(service.writer, service.config, who.user_id,
                                          ref)).to_json()


@tasks_router.delete("/{ref}", summary="Remove a task")
def remove_task_route(ref: str, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import remove_task

    return _task_call(lambda: remove_task(service.writer, who.user_id, ref)).to_json()


@tasks_router.post("/{ref}/run", summary="Run a task once, now (queued for the worker)",
                   status_code=202)
def run_task_route(ref: str, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import request_run

    return _task_call(lambda: request_run(service.writer, who.user_id, ref)).to_json()


@tasks_router.get("/{ref}/log", summary="A task's runs and the replies in its session")
def task_log_route(ref: str, who: Who, service: Service) -> dict:
    from app.scheduled_tasks import task_log

    return _task_call(lambda: task_log(service.reader(), who.user_id, ref)).to_json()


# ----------------------------------------------------------------------------- health


health = APIRouter(tags=["Health"])


@health.get("/health", summary="Is Hilo up (open without the token)")
def get_health(service: Service) -> Response:
    try:
        version = schema_version(service.reader())
    except Exception as exc:  # noqa: BLE001 — health reports, it does not raise
        return JSONResponse({"status": "error", "error": f"memory database: {exc}"},
                            status_code=503)
    return JSONResponse({"status": "ok", "version": VERSION, "schema_version": version})


@health.get("/metrics", summary="Prometheus metrics: queue, jobs, writer, context and model "
                                "latency (needs the token when one is set)")
def get_metrics(service: Service) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    from app.metrics import render
    from workers.metrics import render_queue

    return Response(render(service.writer) + render_queue(service.config),
                    media_type=CONTENT_TYPE_LATEST)


# ----------------------------------------------------------------------------- app and server


def create_app(config: Config, service: ChatService | None = None) -> FastAPI:
    """The ASGI app. Without a service, it makes one (and closes it on shutdown)."""
    owned = service is None
    if service is None:
        init_data_dir(config)
        service = ChatService(config, handoff=queue_handoff(config))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            await run_in_threadpool(app.state.service.close)

    app = FastAPI(
        title="Hilo", version=VERSION, lifespan=lifespan,
        description="Persistent, layered memory for chat agents on local models. Point an "
                    "Ollama or OpenAI client here instead of at the model server.")
    app.state.config = config
    app.state.service = service
    _install_error_handlers(app)
    for router in (ollama, openai, tasks_router, memory, health):
        app.include_router(router)
    app.add_middleware(_Gate, token=config.server.token, max_body=MAX_BODY_BYTES)
    return app


class BindRefused(Exception):
    """Listening here would expose the memory without a token."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    if not token and not is_loopback(host):
        raise BindRefused(
            f"refusing to listen on {host} without a token: anyone who can reach it could "
            "read this memory. Set [server] token (HILO_SERVER_TOKEN), or listen on 127.0.0.1")


def run_server(config: Config, host: str | None = None, port: int | None = None) -> int:
    """`hilo serve`: serve until interrupted. Returns the exit status."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    try:
        check_bind(host, config.server.token)
    except BindRefused as exc:
        print(f"hilo serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_config=None, timeout_graceful_shutdown=3))
    log.info("serve.starting", url=f"http://{host}:{port}", ollama_api=f"http://{host}:{port}/api",
             openai_api=f"http://{host}:{port}/v1", auth=bool(config.server.token))
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully; a
        # quiet handler underneath makes that a clean exit (status 0 under honcho).
        signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with hold_pid_file(config.data_dir, "serve"):  # restore refuses while we run
            server.run()
    except SystemExit:
        pass
    if not server.started:
        print(f"hilo serve: could not listen on {host}:{port} (is the port in use? "
              "choose another with --port)", file=sys.stderr)
        return 1
    return 0
