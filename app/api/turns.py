"""A chat turn as the Ollama and OpenAI routes share it: read the conversation, decide
whether its message is new, store it and open the model's reply.

The session of a chat request: the `X-Hilo-Session` header, else the body's `user` field
(OpenAI's), else `auto-` + 16 hex digits of sha256 of the conversation's first user
message: clients resend the whole conversation, so its first message names it for as
long as the client keeps it. Two conversations opened with the same words share a session.

Clients resend the whole history every turn, and Hilo keeps its own: only the trailing
user message is stored, and not even that when it is a resend of the session's last
stored user message — same text (as stored: sanitised), the client has not seen a
stored reply to it (its previous two messages are not that message and a stored reply
to it), and the messages before it agree with those stored before it (the last two,
as far as both go). A retry after an error and a "regenerate" are resends: they are
answered again without storing the message twice; the same words typed again after
the reply are a new message. The context comes from Hilo's memory, not the client's
history; the client's system prompt is kept and the memory layers are added to it.

ChatService is synchronous: the chat routes are plain functions run in the threadpool,
and replies stream from a sync generator pulled one piece at a time in the threadpool.
"""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, AsyncIterator, Iterator

import anyio
import structlog
from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from app.api.deps import Caller, check_id
from app.api.errors import ApiError, turn_error
from app.chat import INTERRUPTED_MARKER, ChatService, Turn
from app.events import Event, InvalidEvent, prepare_event, session_events
from app.llm import ModelError
from app.sanitize import clean_text
from app.tokens import estimate_tokens

log = structlog.get_logger(__name__)

# Stored events examined when deciding whether a message is a resend.
RESEND_LOOKBACK = 16
# Messages before the resent one compared with the stored ones.
RESEND_CONTEXT = 2
SYSTEM_ROLES = ("system", "developer")
CONVERSATION_ROLES = ("user", "assistant")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    """A message's text, cleaned (clean_text); of OpenAI's content parts, the text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return clean_text(content)
    texts = [part.get("text", "") for part in content if part.get("type", "text") == "text"]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, 'the "text" of a text content part must be a string',
                       "invalid_content")
    return clean_text("".join(texts))


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
        return check_id("session", body_user)
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


def session_locks_of(request: Request) -> SessionLocks:
    return request.app.state.session_locks


Locks = Annotated[SessionLocks, Depends(session_locks_of)]


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


def open_turn(service: ChatService, locks: SessionLocks, who: Caller, body_user: str | None,
              messages: list[ChatMessage], model: str | None, options: dict) -> OpenedTurn:
    """Store the new message (unless resent) and open the model's reply.

    Raises ApiError in the caller's shape; when the model fails, the message is kept.
    """
    started = time.perf_counter()
    conversation = read_conversation(messages)
    session_id = session_for(who, body_user, conversation)
    model = model or service.config.llm.chat_model
    with locks.hold(who.user_id, session_id):
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
            raise turn_error(exc) from exc
        except InvalidEvent as exc:
            raise ApiError(400, str(exc), "invalid_event") from exc
    log.info("chat.turn", user=who.user_id, session=session_id, resent=resent is not None,
             event_id=turn.outcome.user_event.id)
    return OpenedTurn(turn, who.user_id, session_id, model, started)


def reply_counts(opened: OpenedTurn, text: str) -> tuple[int, int]:
    """Prompt and reply tokens: the model server's counts, else Hilo's estimates."""
    reply = opened.turn.reply
    prompt = (reply and reply.prompt_eval_count) or opened.turn.context.tokens
    completion = (reply and reply.eval_count) or estimate_tokens(text)
    return prompt, completion


def whole_reply(opened: OpenedTurn) -> str:
    """The reply in one piece, for a client that asked not to stream."""
    try:
        return "".join(opened.turn)
    except ModelError as exc:
        raise turn_error(exc) from exc


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
