"""Ollama's native API and the OpenAI-compatible one, as Hilo's own calls speak them.

Each builds Hilo's requests (chat, JSON, embeddings, the model list) in its API and reads
the replies, streamed or whole, into a ChatReply over a Transport; ModelClient picks one
by [llm] provider.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.model.errors import OverBudget
from app.model.json_modes import JsonSchema, ollama_format, openai_format, with_schema
from app.model.messages import Message, ToolSpec
from app.model.replies import ReplyRecord, cached_tokens
from app.model.stream import ACCEPTED, ChatReply
from app.model.tool_calls import tool_calls_of
from app.model.transport import Transport, frame_field
from app.model.usage import CallBudget, EngineTime, engine_time

__all__ = ["OllamaAPI", "OpenAIAPI", "JsonReply", "with_limit", "json_reply_text"]


class OllamaAPI:
    """Ollama's native API: /api/chat, /api/generate, /api/embed, /api/tags."""

    def __init__(self, transport: Transport, num_ctx: int, keep_alive: str) -> None:
        self._transport = transport
        self._num_ctx = num_ctx
        self._keep_alive = _keep_alive_value(keep_alive)

    def _body(self, model: str, options: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        # num_ctx on every call: Ollama otherwise silently truncates to its 2048/4096 default.
        return {
            "model": model,
            **fields,
            "options": {"num_ctx": self._num_ctx, **(options or {})},
            "keep_alive": self._keep_alive,
        }

    def chat_events(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None,
        tools: Sequence[ToolSpec] | None = None,
        sent: dict[str, Any] | None = None,
    ) -> Generator[str, None, ChatReply]:
        body = self._body(model, options, messages=[dict(m) for m in messages], stream=True)
        if tools:
            body["tools"] = [dict(t) for t in tools]
        received: list[str] = []
        calls: list[dict[str, Any]] = []
        with self._transport.open_stream("/api/chat", body, received, sent) as lines:
            yield ACCEPTED
            for line in lines:
                frame = _ollama_frame(self._transport, line, "POST /api/chat", received)
                if frame is None:
                    continue
                piece = frame_field(frame, "message", "content") or ""
                if piece:
                    received.append(piece)
                    yield piece
                calls += tool_calls_of(frame.get("message") or {})
                if frame.get("done"):
                    return _ollama_reply(frame, "".join(received), model, calls)
        raise self._transport.interrupted(received, "the stream ended without its final done message")

    def chat(self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None) -> ChatReply:
        body = self._body(model, options, messages=[dict(m) for m in messages], stream=False)
        data = self._transport.post_json("/api/chat", body)
        text = frame_field(data, "message", "content")
        if not isinstance(text, str):
            raise self._transport.malformed("POST /api/chat", "no message.content in the reply")
        return _ollama_reply(data, text, model)

    def generate_json(
        self, model: str, prompt: str, schema: JsonSchema, system: str | None, temperature: float,
        yield_to: Callable[[], bool] | None = None, mode: str = "schema",
        budget: CallBudget | None = None,
    ) -> JsonReply:
        """The reply to `prompt`, JSON asked for as `mode` (app/model/json_modes.py) says."""
        fields: dict[str, Any] = {"prompt": with_schema(prompt, schema, mode),
                                  **ollama_format(schema, mode)}
        if system is not None:
            fields["system"] = system
        return json_reply_text(self._transport, "/api/generate",
                               self._body(model, {"temperature": temperature}, **fields),
                               yield_to, budget)

    embed_endpoint = "POST /api/embed"

    def embed(self, model: str, texts: list[str]) -> Any:
        data = self._transport.post_json("/api/embed", self._body(model, input=texts))
        return frame_field(data, "embeddings")

    def list_models(self) -> list[str]:
        data = self._transport.get_json("/api/tags")
        models = frame_field(data, "models")
        if not isinstance(models, list):
            raise self._transport.malformed("GET /api/tags", "no models list in the reply")
        return [str(m.get("name") or m.get("model")) for m in models if isinstance(m, Mapping)]


def _ollama_reply(frame: Mapping[str, Any], text: str, model: str,
                  tool_calls: Sequence[dict[str, Any]] = ()) -> ChatReply:
    return ChatReply(
        text=text,
        model=str(frame.get("model") or model),
        prompt_eval_count=frame.get("prompt_eval_count"),
        eval_count=frame.get("eval_count"),
        done_reason=frame.get("done_reason"),
        tool_calls=tuple(tool_calls),
        prompt_cached_count=frame.get("prompt_eval_cached_count"),
        engine=engine_time(frame),
    )


def _keep_alive_value(keep_alive: str) -> str | int:
    # Ollama parses strings as Go durations ("5m"); a bare number must go as a number.
    return int(keep_alive) if re.fullmatch(r"\s*-?\d+\s*", keep_alive) else keep_alive


# Ollama option names → their OpenAI request fields. Others (num_ctx, …) have no
# OpenAI equivalent: those servers fix them when the model is loaded.
_OPENAI_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "stop": "stop",
    "num_predict": "max_tokens",
    "max_tokens": "max_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


class OpenAIAPI:
    """The OpenAI-compatible API: /v1/chat/completions, /v1/embeddings, /v1/models."""

    def __init__(self, transport: Transport, prefix: str) -> None:
        self._transport = transport
        self._chat_path = f"{prefix}/chat/completions"
        self._embeddings_path = f"{prefix}/embeddings"
        self._models_path = f"{prefix}/models"

    def _body(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None, **fields: Any
    ) -> dict[str, Any]:
        mapped = {_OPENAI_FIELDS[k]: v for k, v in (options or {}).items() if k in _OPENAI_FIELDS}
        return {"model": model, "messages": [dict(m) for m in messages], **mapped, **fields}

    def chat_events(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None,
        tools: Sequence[ToolSpec] | None = None,
        sent: dict[str, Any] | None = None,
    ) -> Generator[str, None, ChatReply]:
        body = self._body(model, messages, options, stream=True, stream_options={"include_usage": True})
        if tools:
            body["tools"] = [dict(t) for t in tools]
        received: list[str] = []
        usage: Mapping[str, Any] = {}
        finish_reason = None
        calls = ReplyRecord()  # gathers the tool calls and the engine's counters, streamed in pieces
        with self._transport.open_stream(self._chat_path, body, received, sent) as lines:
            yield ACCEPTED
            for line in lines:
                frame = _openai_frame(self._transport, line, f"POST {self._chat_path}", received)
                if frame is None:
                    continue
                if frame is _DONE:
                    calls.end_of_openai_stream()
                    return _openai_reply(usage, "".join(received), model, finish_reason,
                                         calls.tool_calls, calls.engine)
                usage = frame.get("usage") or usage
                calls.read_openai(frame)
                for choice in frame.get("choices") or []:
                    piece = frame_field(choice, "delta", "content") or ""
                    finish_reason = frame_field(choice, "finish_reason") or finish_reason
                    if piece:
                        received.append(piece)
                        yield piece
        if finish_reason is not None:
            # Some servers close without [DONE]; a finish_reason already says the reply is whole.
            calls.end_of_openai_stream()
            return _openai_reply(usage, "".join(received), model, finish_reason, calls.tool_calls,
                                 calls.engine)
        raise self._transport.interrupted(received, "the stream ended without a finish_reason or [DONE]")

    def chat(
        self, model: str, messages: Sequence[Message], options: Mapping[str, Any] | None
    ) -> ChatReply:
        body = self._body(model, messages, options, stream=False)
        data = self._transport.post_json(self._chat_path, body)
        text = frame_field(data, "choices", 0, "message", "content")
        if not isinstance(text, str):
            raise self._transport.malformed(f"POST {self._chat_path}", "no choices[0].message.content in the reply")
        return _openai_reply(data.get("usage") or {}, text, model,
                             frame_field(data, "choices", 0, "finish_reason"), engine=engine_time(data))

    def generate_json(
        self, model: str, prompt: str, schema: JsonSchema, system: str | None, temperature: float,
        yield_to: Callable[[], bool] | None = None, mode: str = "schema",
        budget: CallBudget | None = None,
    ) -> JsonReply:
        """The reply to `prompt`, JSON asked for as `mode` (app/model/json_modes.py) says."""
        messages = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": with_schema(prompt, schema, mode)}
        ]
        body = self._body(model, messages, {"temperature": temperature},
                          **openai_format(schema, mode))
        return json_reply_text(self._transport, self._chat_path, body, yield_to, budget)

    @property
    def embed_endpoint(self) -> str:
        return f"POST {self._embeddings_path}"

    def embed(self, model: str, texts: list[str]) -> Any:
        body = {"model": model, "input": texts, "encoding_format": "float"}
        data = self._transport.post_json(self._embeddings_path, body)
        items = frame_field(data, "data")
        if not isinstance(items, list):
            return None
        return [frame_field(item, "embedding") for item in sorted(items, key=lambda item: frame_field(item, "index") or 0)]

    def list_models(self) -> list[str]:
        items = frame_field(self._transport.get_json(self._models_path), "data")
        if not isinstance(items, list):
            raise self._transport.malformed(f"GET {self._models_path}", "no data list in the reply")
        return [str(item.get("id")) for item in items if isinstance(item, Mapping)]


def _openai_reply(usage: Mapping[str, Any], text: str, model: str, finish_reason: str | None,
                  tool_calls: Sequence[dict[str, Any]] = (),
                  engine: EngineTime | None = None) -> ChatReply:
    return ChatReply(
        text=text,
        model=model,
        prompt_eval_count=usage.get("prompt_tokens"),
        eval_count=usage.get("completion_tokens"),
        done_reason=finish_reason,
        tool_calls=tuple(tool_calls),
        prompt_cached_count=cached_tokens(usage),
        engine=engine,
    )


def _ollama_frame(transport: Transport, line: str, endpoint: str,
                  received: list[str]) -> dict[str, Any] | None:
    """A line of Ollama's NDJSON stream: its frame, None for a blank line; a server's
    error in the stream is raised."""
    if not line.strip():
        return None
    frame = transport.decode_line(line, endpoint)
    if "error" in frame:
        raise transport.interrupted(received, f"server error: {frame['error']}")
    return frame


# The frame of the `data: [DONE]` line that ends an OpenAI stream.
_DONE: dict[str, Any] = {}


def _openai_frame(transport: Transport, line: str, endpoint: str,
                  received: list[str]) -> dict[str, Any] | None:
    """A line of an OpenAI server-sent event stream: its frame, _DONE at its end, None for
    blank separators, comments and event names; a server's error in the stream is raised."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):].strip()
    if data == "[DONE]":
        return _DONE
    frame = transport.decode_line(data, endpoint)
    if "error" in frame:
        reason = frame_field(frame, "error", "message") or frame["error"]
        raise transport.interrupted(received, f"server error: {reason}")
    return frame


@dataclass(frozen=True)
class JsonReply:
    """A learning call's reply: its text, the server's counts and the engine's time."""

    text: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    reply_tokens: int | None = None
    engine: EngineTime | None = None


def with_limit(path: str, body: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
    """The request with its output limit as the engine takes it: Ollama's
    `options.num_predict`, the OpenAI API's `max_tokens` (llama.cpp's server reads both)."""
    if max_tokens is None:
        return dict(body)
    if path.endswith(("/api/chat", "/api/generate")):
        return {**body, "options": {**(body.get("options") or {}), "num_predict": max_tokens}}
    return {**body, "max_tokens": max_tokens}


def json_reply_text(transport: Transport, path: str, body: Mapping[str, Any],
                    yield_to: Callable[[], bool] | None,
                    budget: CallBudget | None = None) -> JsonReply:
    """A learning call's reply, in either API (by `path`), streamed and held to `budget`.

    Streamed always: llama.cpp's server looks for a gone client at every streamed token,
    but for a whole reply only once a second, so a call cut for a person (`yield_to`) or
    at its deadline would hold the engine that long; and only a stream shows a reply
    growing past its output limit on a server that ignores the limit (OverBudget)."""
    ollama = path.endswith(("/api/chat", "/api/generate"))
    field = (("response",) if path.endswith("/api/generate")
             else ("message", "content") if ollama else ("choices", 0, "delta", "content"))
    endpoint = f"POST {path}"
    limit = budget.max_tokens if budget is not None else None
    request = {**with_limit(path, body, limit), "stream": True}
    if not ollama:
        request["stream_options"] = {"include_usage": True}
    received: list[str] = []
    last: Mapping[str, Any] = {}  # the frame with the server's counts and timings
    usage: Mapping[str, Any] = {}
    finish = None
    with transport.open_stream(path, request, received, yield_to=yield_to,
                               deadline_seconds=budget.deadline_seconds if budget else None,
                               ) as lines:
        for line in lines:
            frame = (_ollama_frame(transport, line, endpoint, received) if ollama
                     else _openai_frame(transport, line, endpoint, received))
            if frame is None:
                continue
            if frame is _DONE:
                break
            piece = frame_field(frame, *field) or ""
            if piece:
                received.append(piece)
                if limit is not None and len(received) > limit:  # a piece is a token or more
                    raise OverBudget(transport.url, "tokens", limit, "".join(received))
            if ollama:
                if frame.get("done"):
                    last, finish = frame, frame.get("done_reason")
                    break
                continue
            usage = frame.get("usage") or usage
            if isinstance(frame.get("timings"), Mapping):
                last = frame
            finish = frame_field(frame, "choices", 0, "finish_reason") or finish
        else:
            if ollama or finish is None:  # some servers close without [DONE] after a finish
                raise transport.interrupted(received, "the stream ended before the reply did")
    text = "".join(received)
    if finish == "length":
        raise OverBudget(transport.url, "tokens", limit if limit is not None else 0, text)
    if ollama:
        return JsonReply(text, last.get("prompt_eval_count"), last.get("prompt_eval_cached_count"),
                         last.get("eval_count"), engine_time(last))
    return JsonReply(text, usage.get("prompt_tokens"), cached_tokens(usage),
                     usage.get("completion_tokens"), engine_time(last))
