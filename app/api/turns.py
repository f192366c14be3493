"""A chat request as both chat APIs answer it.

The request is relayed to the model server in the client's own API, with only its
messages changed: the memory layers join its system prompt (app/turn/context.py). What the
request brings that the session lacks is stored first (app/api/conversation.py says
what that is, and which session); the reply passes back to the client as it arrives,
and is stored too, tool calls included. A client's housekeeping (app/api/housekeeping.py)
and a request without conversation (Ollama's model load and unload: `messages: []`)
are relayed without memory and store nothing.

With `[tools] http = true`, a request that brings no tools of its own gets Hilo's
(memory, scheduled tasks, web fetch; never the terminal): the model's calls are run and
stored, and the client receives only the answer (app/turn/agent.py).

The user: as app/http/callers.py decides it, where a chat body's `user` (OpenAI's end-user
id) comes after the headers: it names the user only when no header or token did, and
naming another user than a per-user token's is refused.

ChatService is synchronous: a chat is answered in the threadpool (answer_chat_request),
and replies stream from a sync generator pulled one piece at a time in the threadpool.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from app.api.conversation import (
    continued_session,
    named_session,
    new_session_id,
    read_conversation,
    store_messages,
    unstored_messages,
)
from app.api.housekeeping import is_housekeeping
from app.errors import HiloError
from app.events import InvalidEvent, choose_again
from app.http.callers import Caller, caller_of, check_session, json_body
from app.http.errors import ApiError, error_body, model_failure, turn_error
from app.log import get_logger
from app.model.errors import ModelError
from app.model.replies import ReplyRecord
from app.turn.chat import ChatService, StreamingTurn

if TYPE_CHECKING:
    from app.turn.agent import Agent

__all__ = ["log", "SessionLocks", "answer_chat_request", "user_of", "answer_chat", "model_error",
           "relayed_response", "pull_in_threadpool"]

log = get_logger(__name__)


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


async def answer_chat_request(api: str, request: Request) -> Response:
    """The chat route of `api` ("ollama" or "openai"): the body read and the caller
    named (a body that is not JSON is refused before the caller is), then answered in
    the threadpool, since ChatService is synchronous."""
    body = await json_body(request)
    state = request.app.state
    return await run_in_threadpool(answer_chat, api, body, request.headers, caller_of(request),
                                   state.service, state.session_locks, state.agent)


def user_of(who: Caller, body: Mapping[str, Any]) -> str:
    """The caller's user, or the one the body's `user` names (Caller.naming)."""
    named = body.get("user")
    if not isinstance(named, str) or not named:
        return who.user_id
    return who.naming(named)


def answer_chat(api: str, body: dict[str, Any], headers: Mapping[str, str], who: Caller,
                service: ChatService, locks: SessionLocks, agent: Agent | None) -> Response:
    """Answer a chat request of `api` ("ollama" or "openai"); see the module docstring.

    Raises ApiError in the caller's shape; when the model fails, what was new is kept.
    """
    conversation = read_conversation(api, body, headers)
    if not body.get("model"):
        body = {**body, "model": service.config.llm.chat_model}
    user_id = user_of(who, body)
    if not conversation.turns or is_housekeeping(service.config, headers, conversation):
        log.info("chat.relayed_without_memory", user=user_id, messages=len(conversation.messages))
        try:
            stream = service.model.relay_chat(api, body)
        except ModelError as exc:
            raise model_error(exc) from exc
        return relayed_response(stream, stream.record, api, {}, model_error)
    # The question's embedding runs while the session is found and the message stored:
    # the turn's recall below takes it (ChatService.embed_ahead).
    service.embed_ahead(user_id, conversation.query)
    session_id = (named_session(who.session_header, headers, check_session)
                  or continued_session(service, user_id, conversation) or new_session_id())
    with locks.hold(user_id, session_id):
        unstored = unstored_messages(service, user_id, session_id, conversation)
        try:
            stored = ([] if unstored.start is None else
                      store_messages(service, user_id, session_id, conversation, unstored.start))
        except InvalidEvent as exc:
            raise ApiError(400, str(exc), "invalid_event") from exc
        answered = stored[-1] if stored else unstored.resent
        assert answered is not None  # what the request ends with is stored, or was
        if unstored.chosen_again:  # the client went back to a reply it had replaced
            service.edit(lambda con: [choose_again(con, user_id, event_id)
                                      for event_id in unstored.chosen_again])
        # The turn reads the provenance of every stored event the request's messages are.
        client = conversation.client_chat(body, [*unstored.matched, *stored])
        replaced = unstored.replaced
        try:
            if agent is not None and not (body.get("tools") or body.get("functions")):
                turn: StreamingTurn = agent.answer_client(answered, client, stored, replaced)
            else:
                turn = service.answer(answered, client=client, stored=stored, replaces=replaced)
        except ModelError as exc:
            log.warning("chat.model_failed", session=session_id, stored=len(stored), error=str(exc))
            raise turn_error(exc) from exc
    log.info("chat.turn", user=user_id, session=session_id, stored=len(stored),
             event_id=answered.id, history=len(conversation.turns))
    names = {"X-Hilo-User": user_id, "X-Hilo-Session": session_id}
    return relayed_response(turn, turn.record, api,
                            {k: v for k, v in names.items() if v.isascii()}, turn_error)


def model_error(exc: ModelError) -> ApiError:
    """A model failure where nothing was stored."""
    log.warning("chat.model_failed", stored=0, error=str(exc))
    return model_failure(exc, kept=False)


def relayed_response(chunks: Iterable[bytes], record: ReplyRecord | None, api: str,
                     headers: dict[str, str], error: Callable[[ModelError], ApiError]) -> Response:
    """The model server's reply passed on: streamed as it arrives, or whole. A failure
    mid-stream ends the stream with an error in the API's own shape."""
    assert record is not None  # a relayed stream always has one
    if not record.streaming:
        try:
            content = b"".join(chunks)
        except ModelError as exc:
            raise error(exc) from exc
        return Response(content, media_type=record.media_type, headers=headers)
    return StreamingResponse(pull_in_threadpool(_ending_in_errors(iter(chunks), api, error)),
                             media_type=record.media_type, headers=headers)


def _ending_in_errors(chunks: Iterator[bytes], api: str,
                      error: Callable[[ModelError], ApiError]) -> Iterator[bytes]:
    """The reply's pieces; a failure after the first one (the status is sent) ends the
    stream with an error line the client can read."""
    try:
        yield from chunks
        return
    except ModelError as exc:
        failure: HiloError = error(exc)
    except HiloError as exc:  # the reply could not be stored (a full disk)
        failure = exc
    except Exception as exc:
        log.exception("chat.stream_failed")
        failure = ApiError(500, f"the reply stopped: {exc} (see Hilo's log)", "internal_error")
    if api == "openai":
        body = error_body("/v1/", failure.http_status, failure.message, failure.code)
        yield b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
    else:
        yield json.dumps({"error": failure.message}, ensure_ascii=False).encode() + b"\n"


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
