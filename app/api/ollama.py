"""Ollama's API: `POST /api/chat` with memory, and `GET /api/tags`, `POST /api/show`,
`GET /api/version` passed through to the model server.

Replies stream as Ollama's NDJSON: one JSON object per line, the last with `done: true`
and the token counts.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import Service, Who
from app.api.errors import turn_error
from app.api.health import VERSION
from app.api.turns import (
    ChatMessage,
    Locks,
    OpenedTurn,
    open_turn,
    pull_in_threadpool,
    reply_counts,
    whole_reply,
)
from app.chat import ChatService
from app.llm import ModelError
from app.timeutil import utc_now


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
    prompt, completion = reply_counts(opened, text)
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


def _json_line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


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
        yield _json_line({"error": turn_error(exc).message})
        return
    finally:
        pieces.close()
    yield _json_line({"model": opened.model, "created_at": utc_now(),
                      "message": {"role": "assistant", "content": ""},
                      **_ollama_done(opened, "".join(received))})


router = APIRouter(tags=["Ollama API"])


@router.post("/api/chat", summary="Chat with memory (Ollama's /api/chat)",
             response_model=None,
             responses={200: {"description": "NDJSON stream, or one JSON object with stream=false"},
                        400: {"description": "no user message, invalid JSON"},
                        503: {"description": "the model server is down; the message is kept"}})
def ollama_chat(body: OllamaChatRequest, who: Who, service: Service, locks: Locks) -> Response:
    """Stores the new user message, adds the memory layers to the client's system prompt
    and streams the model's reply (NDJSON) — or returns it whole with `stream: false`."""
    opened = open_turn(service, locks, who, body.user, body.messages, body.model,
                       _ollama_options(body.options))
    if body.stream is False:
        text = whole_reply(opened)
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


@router.get("/api/tags", summary="The model server's models (passed through)")
def ollama_tags(service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "GET", "/api/tags")
    return JSONResponse({"models": [
        {"name": name, "model": name, "modified_at": "1970-01-01T00:00:00Z", "size": 0,
         "digest": "", "details": {}} for name in service.model.list_models()]})


@router.post("/api/show", summary="A model's details (passed through)")
def ollama_show(body: dict[str, Any], service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "POST", "/api/show", body)
    name = str(body.get("model") or body.get("name") or "")
    if name not in service.model.list_models():
        return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
    return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": {},
                         "model_info": {}, "capabilities": ["completion"]})


@router.get("/api/version", summary="The model server's version (passed through)")
def ollama_version(service: Service) -> Response:
    if service.model.provider == "ollama":
        return _passthrough(service, "GET", "/api/version")
    return JSONResponse({"version": VERSION})
