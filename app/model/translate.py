"""An Ollama chat request and its reply, translated for a server that speaks only OpenAI's API.

The one translation the model server cannot do itself: an /api/chat request becomes a
chat completion request, and the server's reply (its chunks, or one chat.completion) the
/api/chat reply an Ollama client expects. Relaying it is app/model/relay.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from app.model.messages import message_text
from app.model.replies import ReplyRecord
from app.model.tool_calls import render_tool_calls, tool_calls_of

__all__ = ["OPTIONS_AS_OPENAI", "ollama_request_as_openai", "OpenAIReplyAsOllama"]

# Ollama options with an OpenAI request field. The rest (num_ctx, top_k, repeat_penalty,
# min_p, …) have none: an OpenAI-compatible server fixes them when it loads the model.
OPTIONS_AS_OPENAI = {
    "temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop",
    "num_predict": "max_tokens", "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


def ollama_request_as_openai(body: Mapping[str, Any]) -> dict[str, Any]:
    """An Ollama /api/chat request as a chat completion request, as faithfully as the
    OpenAI API allows: messages with images and tool calls, tools, format, sampling."""
    stream = body.get("stream", True) is not False
    request: dict[str, Any] = {"model": body.get("model"),
                               "messages": _messages_as_openai(body.get("messages") or []),
                               "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}  # for the counts of the done line
    options = body.get("options") if isinstance(body.get("options"), Mapping) else {}
    for name, value in options.items():
        if name in OPTIONS_AS_OPENAI and value is not None:
            request[OPTIONS_AS_OPENAI[name]] = value
    if body.get("tools"):
        request["tools"] = body["tools"]  # Ollama took OpenAI's tool schema as it is
    fmt = body.get("format")
    if fmt == "json":
        request["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, Mapping):
        request["response_format"] = {"type": "json_schema",
                                      "json_schema": {"name": "response", "schema": dict(fmt)}}
    if isinstance(body.get("think"), str):
        request["reasoning_effort"] = body["think"]
    return request


def _messages_as_openai(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    open_calls: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        out: dict[str, Any] = {"role": role}
        images = message.get("images") or []
        if images:
            out["content"] = ([{"type": "text", "text": message_text(message)}]
                              if message_text(message) else []) + [
                {"type": "image_url", "image_url": {"url": _image_url(image)}} for image in images]
        else:
            out["content"] = message_text(message)
        if role == "assistant" and message.get("tool_calls"):
            calls = render_tool_calls(tool_calls_of(message), "openai", f"call_{index}")
            out["tool_calls"] = calls
            open_calls = list(calls)
        if role == "tool":
            name = message.get("tool_name") or message.get("name")
            answered = next((c for c in open_calls if not name or c["function"]["name"] == name),
                            None)
            if answered is not None:
                open_calls.remove(answered)
                out["tool_call_id"] = answered["id"]
        converted.append(out)
    return converted


def _image_url(image: str) -> str:
    if image.startswith(("data:", "http://", "https://")):
        return image
    kind = "png" if image.startswith("iVBOR") else "jpeg"  # base64 of the PNG signature
    return f"data:image/{kind};base64,{image}"


_DONE_REASONS = {"tool_calls": "stop", "function_call": "stop", "content_filter": "stop"}


class OpenAIReplyAsOllama:
    """Turns an OpenAI-compatible server's reply into the /api/chat reply an Ollama
    client expects: NDJSON frames as the chunks arrive, or one object."""

    def __init__(self, model: str, record: ReplyRecord) -> None:
        self.model = model
        self.record = record
        self._started = time.perf_counter()

    def _head(self) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        return {"model": self.model, "created_at": now}

    def chunk(self, frame: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The Ollama frames for one streamed chunk."""
        before_text, before_thinking = len(self.record.text_parts), len(self.record.thinking_parts)
        self.record.read_openai(frame)
        text = "".join(self.record.text_parts[before_text:])
        thinking = "".join(self.record.thinking_parts[before_thinking:])
        if not text and not thinking:
            return []
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking:
            message["thinking"] = thinking
        return [{**self._head(), "message": message, "done": False}]

    def end(self) -> list[dict[str, Any]]:
        """The frames that close the stream: the tool calls, whole, then the done frame."""
        self.record.end_of_openai_stream()
        frames = []
        if self.record.tool_calls:
            frames.append({**self._head(), "message": {
                "role": "assistant", "content": "",
                "tool_calls": render_tool_calls(self.record.tool_calls, "ollama")}, "done": False})
        frames.append({**self._head(), "message": {"role": "assistant", "content": ""},
                       **self._done()})
        return frames

    def whole(self, completion: Mapping[str, Any]) -> dict[str, Any]:
        """The Ollama reply for a whole chat.completion."""
        self.record.read_openai(completion)
        message: dict[str, Any] = {"role": "assistant", "content": self.record.text}
        if self.record.thinking_parts:
            message["thinking"] = "".join(self.record.thinking_parts)
        if self.record.tool_calls:
            message["tool_calls"] = render_tool_calls(self.record.tool_calls, "ollama")
        return {**self._head(), "message": message, **self._done()}

    def _done(self) -> dict[str, Any]:
        reason = self.record.done_reason or "stop"
        return {"done": True, "done_reason": _DONE_REASONS.get(reason, reason),
                "total_duration": int((time.perf_counter() - self._started) * 1e9),
                "load_duration": 0, "prompt_eval_count": self.record.prompt_eval_count or 0,
                "prompt_eval_duration": 0, "eval_count": self.record.eval_count or 0,
                "eval_duration": 0}
