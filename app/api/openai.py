"""OpenAI's API: `POST /v1/chat/completions` with memory, and `GET /v1/models`.

Replies are a chat.completion, or with `stream: true` server-sent events of
chat.completion.chunk objects ending in `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import Service, Who
from app.api.errors import error_body, turn_error
from app.api.turns import (
    ChatMessage,
    Locks,
    OpenedTurn,
    open_turn,
    pull_in_threadpool,
    reply_counts,
    whole_reply,
)
from app.llm import ModelError


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
    prompt, completion = reply_counts(opened, text)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


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
        error = turn_error(exc)
        yield _sse(error_body("/v1/", error.http_status, error.message, error.code))
        return
    finally:
        pieces.close()
    last = {} if received else {"role": "assistant", "content": ""}
    yield _sse({**head, "choices": [{"index": 0, "delta": last,
                                     "finish_reason": _finish_reason(opened)}]})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": _usage(opened, "".join(received))})
    yield b"data: [DONE]\n\n"


router = APIRouter(tags=["OpenAI API"])


@router.post("/v1/chat/completions", summary="Chat with memory (OpenAI's chat completions)",
             response_model=None,
             responses={200: {"description": "a chat.completion, or SSE with stream=true"},
                        400: {"description": "no user message, invalid JSON"},
                        503: {"description": "the model server is down; the message is kept"}})
def openai_chat(body: OpenAIChatRequest, who: Who, service: Service, locks: Locks) -> Response:
    """Stores the new user message, adds the memory layers to the client's system prompt
    and answers as a chat.completion — or streams chunks (SSE) with `stream: true`;
    `stream_options.include_usage` adds the usage chunk."""
    opened = open_turn(service, locks, who, body.user, body.messages, body.model,
                       _openai_options(body))
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(pull_in_threadpool(openai_events(opened, include_usage)),
                                 media_type="text/event-stream", headers=opened.headers)
    text = whole_reply(opened)
    return JSONResponse({
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": opened.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": _finish_reason(opened)}],
        "usage": _usage(opened, text),
    }, headers=opened.headers)


@router.get("/v1/models", summary="The model server's models, as OpenAI lists them")
def openai_models(service: Service) -> dict:
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "hilo"}
        for name in service.model.list_models()]}
