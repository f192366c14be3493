"""The pieces of a reply, gathered from its stream as it passes (ReplyRecord: text,
thinking, tool calls, counts), and a chat as the server received it (SentChat).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.model.tool_calls import json_arguments, tool_calls_of
from app.model.usage import EngineTime, engine_time

__all__ = ["cached_tokens", "ReplyRecord", "SentChat"]


def cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """Of an OpenAI `usage`, the prompt tokens the server found in its cache."""
    details = usage.get("prompt_tokens_details")
    return details.get("cached_tokens") if isinstance(details, Mapping) else None


@dataclass
class ReplyRecord:
    """What Hilo keeps of a reply it relays, gathered from the frames as they pass."""

    text_parts: list[str] = field(default_factory=list)
    thinking_parts: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    prompt_cached_count: int | None = None
    eval_count: int | None = None
    engine: EngineTime | None = None  # the engine's own time, when the server reports it
    finished: bool = False
    media_type: str = "application/json"
    # OpenAI streams a call in pieces, by index: {index: {"id", "name", "arguments": text}}.
    _partial_calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def streaming(self) -> bool:
        return self.media_type.startswith(("application/x-ndjson", "text/event-stream"))

    def read_ollama(self, frame: Mapping[str, Any]) -> None:
        """One /api/chat frame (or the whole reply of a request that did not stream)."""
        message = frame.get("message") or {}
        if isinstance(message.get("content"), str) and message["content"]:
            self.text_parts.append(message["content"])
        if isinstance(message.get("thinking"), str) and message["thinking"]:
            self.thinking_parts.append(message["thinking"])
        self.tool_calls.extend(tool_calls_of(message))
        if frame.get("done"):
            self.finished = True
            self.done_reason = frame.get("done_reason") or self.done_reason
            self.prompt_eval_count = frame.get("prompt_eval_count")
            self.prompt_cached_count = frame.get("prompt_eval_cached_count")
            self.eval_count = frame.get("eval_count")
            self.engine = engine_time(frame)

    def read_openai(self, frame: Mapping[str, Any]) -> None:
        """One chat.completion.chunk, or a whole chat.completion."""
        self.engine = engine_time(frame) or self.engine
        usage = frame.get("usage")
        if isinstance(usage, Mapping):
            self.prompt_eval_count = usage.get("prompt_tokens")
            self.prompt_cached_count = cached_tokens(usage)
            self.eval_count = usage.get("completion_tokens")
        for choice in frame.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue  # with n > 1, the first choice is the one remembered
            whole = choice.get("message")
            part = whole if isinstance(whole, Mapping) else choice.get("delta") or {}
            if isinstance(part.get("content"), str) and part["content"]:
                self.text_parts.append(part["content"])
            thinking = part.get("reasoning") or part.get("reasoning_content")
            if isinstance(thinking, str) and thinking:
                self.thinking_parts.append(thinking)
            if isinstance(whole, Mapping):
                self.tool_calls.extend(tool_calls_of(whole))
            else:
                self._add_call_pieces(part.get("tool_calls") or [])
            if choice.get("finish_reason"):
                self.done_reason = choice["finish_reason"]
                if isinstance(whole, Mapping):
                    self.finished = True
        if frame.get("object") == "chat.completion":
            self.finished = True

    def end_of_openai_stream(self) -> None:
        """`data: [DONE]`: the streamed calls are whole."""
        self.finished = True
        for index in sorted(self._partial_calls):
            call = self._partial_calls[index]
            self.tool_calls.append({"id": call["id"], "name": call["name"],
                                    "arguments": json_arguments(call["arguments"])})
        self._partial_calls.clear()

    def _add_call_pieces(self, pieces: Sequence[Any]) -> None:
        for piece in pieces:
            if not isinstance(piece, Mapping):
                continue
            call = self._partial_calls.setdefault(int(piece.get("index") or 0),
                                                  {"id": None, "name": "", "arguments": ""})
            call["id"] = piece.get("id") or call["id"]
            function = piece.get("function") or {}
            call["name"] += function.get("name") or ""
            arguments = function.get("arguments")
            call["arguments"] += arguments if isinstance(arguments, str) else (
                json.dumps(arguments) if arguments is not None else "")


@dataclass(frozen=True)
class SentChat:
    """A chat request as a model server received it, and the reply it gave: what its KV
    cache holds afterwards, so a request that starts with the same messages is read
    anew only after them (app.model.client's ModelClient.continue_json)."""

    path: str  # the server's path: /api/chat, or an OpenAI-compatible /chat/completions
    body: Mapping[str, Any]
    reply: str
