"""Ollama's and OpenAI's chat messages: reading them, and what Hilo keeps of a chat.

Hilo relays a client's chat request in the client's own API, changing only its
messages, and reads the reply on the side to store it. This module knows both shapes:
a message's text, images and tool calls; a stored event rendered back as a message;
the client's request (ClientChat); the pieces of a reply (text, thinking, tool calls,
counts) gathered from its stream (ReplyRecord); and a chat as the server received it
(SentChat). Translating between the two APIs is app/model/translate.py.

Tool calls are stored in one neutral shape, a list of
`{"id": str | None, "name": str, "arguments": <JSON value>}`, and rendered per API:
Ollama's `{"function": {"name", "arguments": {...}}}`, OpenAI's `{"id", "type":
"function", "function": {"name", "arguments": "<JSON text>"}}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.events import Event, InvalidEvent
from app.model.usage import EngineTime, engine_time
from app.sanitize import clean_text

Message = Mapping[str, Any]  # {"role": "user" | "assistant" | "system" | "tool", "content": str}
# Tools offered to the model, in the chat APIs' shape (Ollama takes OpenAI's):
# {"type": "function", "function": {"name", "description", "parameters": <JSON schema>}}
ToolSpec = Mapping[str, Any]

APIS = ("ollama", "openai")
SYSTEM_ROLES = ("system", "developer")
# Roles that are the conversation itself (OpenAI's legacy "function" is a tool result).
CONVERSATION_ROLES = ("user", "assistant", "tool", "function")


# ----------------------------------------------------------------------------- messages


def message_text(message: Mapping[str, Any] | None) -> str:
    """A message's text, cleaned (lone surrogates, NUL bytes: app.sanitize.clean_text);
    of OpenAI's content parts, the text parts. A text part whose `text` is not a string
    is refused (InvalidEvent), never stored as a Python repr."""
    content = (message or {}).get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, list):
        texts = [part.get("text", "") for part in content
                 if isinstance(part, Mapping) and part.get("type", "text") == "text"]
        if not all(isinstance(text, str) for text in texts):
            raise InvalidEvent('the "text" of a text content part must be a string')
        return clean_text("".join(texts))
    raise InvalidEvent("a message's content must be a string or a list of content parts")


def image_count(message: Mapping[str, Any]) -> int:
    """Images a message carries: Ollama's `images`, OpenAI's image_url parts."""
    count = len(message.get("images") or [])
    content = message.get("content")
    if isinstance(content, list):
        count += sum(1 for part in content
                     if isinstance(part, Mapping) and part.get("type") in ("image_url", "image"))
    return count


# Documents a client's search found, quoted into a message, recognised by the structure
# RAG templates give them (tests/fixtures/rag.py holds each form): Open WebUI's
# (DEFAULT_RAG_TEMPLATE in its config.py) wraps them in <context>, each a <source id=…> (or
# in 0.5 a <source_id> and <source_context>), in the user's message or the system message
# with RAG_SYSTEM_CONTEXT; others use <documents>/<document>, AnythingLLM "[CONTEXT n]:",
# LlamaIndex's and LangChain's templates their opening sentence. An opening tag is
# enough: a template edited, or a message cut short, may never close it.
_RETRIEVED_DOCUMENTS = re.compile(
    r"<\s*(?:context|sources?|source_id|source_context|documents?|document_content"
    r"|search_results?)\b[^<>]*>"
    r"|^\s*\[CONTEXT \d+\]:"
    r"|^\s*Context information is below\b"
    r"|\bUse the following (?:pieces of retrieved )?context\b"
    r"|\bRespond to the user query using the provided context\b",
    re.IGNORECASE | re.MULTILINE)


def quotes_retrieved_documents(message: Mapping[str, Any]) -> bool:
    """Whether the message quotes documents a client retrieved: text no person at this
    machine wrote, content from outside (app/events.py) though it came in a user's turn."""
    return _RETRIEVED_DOCUMENTS.search(message_text(message)) is not None


def text_to_store(message: Mapping[str, Any]) -> str:
    """What Hilo stores of a message: its text, and a note of the images it carried."""
    text = message_text(message)
    images = image_count(message)
    if images:
        note = f"[{images} image{'s' if images > 1 else ''} attached]"
        text = f"{text} {note}" if text else note
    return text


def is_conversation(message: Mapping[str, Any]) -> bool:
    return message.get("role") in CONVERSATION_ROLES


def stored_role(message: Mapping[str, Any]) -> str:
    role = str(message.get("role"))
    return "tool" if role == "function" else role


def with_text_appended(message: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The message with `text` after its own, whatever shape its content has."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": text}]}
    return {**message, "content": (content or "") + text}


def with_text_prepended(message: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The message with `text` before its own, whatever shape its content has."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": text}, *content]}
    return {**message, "content": text + (content or "")}


# ----------------------------------------------------------------------------- tool calls


def _arguments(value: Any) -> Any:
    """Arguments as a JSON value; OpenAI sends them as JSON text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value  # a model's broken JSON is kept as it was said
    return value


def tool_calls_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls in the neutral shape (empty when it has none)."""
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") or {}
        calls.append({"id": call.get("id"), "name": str(function.get("name") or ""),
                      "arguments": _arguments(function.get("arguments"))})
    if not calls and isinstance(message.get("function_call"), Mapping):  # OpenAI's legacy field
        function = message["function_call"]
        calls.append({"id": None, "name": str(function.get("name") or ""),
                      "arguments": _arguments(function.get("arguments"))})
    return calls


def stored_tool_calls(tool_calls_json: str | None) -> list[dict[str, Any]]:
    """An event's stored tool calls (empty when it has none, or they do not parse)."""
    try:
        calls = json.loads(tool_calls_json) if tool_calls_json else []
    except ValueError:
        return []
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def text_with_tool_calls(content: str, tool_calls_json: str | None) -> str:
    """An event's content and, for an assistant's tool calls, what it called with what:
    how workers read a call (evidence of what happened, as the results that follow are)."""
    calls = stored_tool_calls(tool_calls_json)
    if not calls:
        return content
    said = "; ".join(f"{call.get('name')}({json.dumps(call.get('arguments'), ensure_ascii=False)})"
                     for call in calls)
    return f"{content} [called {said}]".strip()


def render_tool_calls(calls: Sequence[Mapping[str, Any]], api: str,
                      fallback_id: str = "call") -> list[dict[str, Any]]:
    """Neutral tool calls as `api` writes them; OpenAI's need an id, so one is made up
    from `fallback_id` when the call came without."""
    rendered = []
    for index, call in enumerate(calls):
        arguments = call.get("arguments")
        if api == "openai":
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            rendered.append({"id": call.get("id") or f"{fallback_id}_{index}", "type": "function",
                             "function": {"name": call.get("name"), "arguments": text}})
        else:
            parsed = _arguments(arguments)  # Ollama takes an object, nothing else
            entry: dict[str, Any] = {"function": {"name": call.get("name"),
                                                  "arguments": parsed if isinstance(parsed, dict) else {}}}
            if call.get("id"):
                entry["id"] = call["id"]
            rendered.append(entry)
    return rendered


def tool_name_of(message: Mapping[str, Any], earlier: Sequence[Mapping[str, Any]]) -> str | None:
    """The tool a tool result answers: Ollama names it; OpenAI gives the call's id, whose
    name is in the assistant message that made the call."""
    name = message.get("tool_name") or message.get("name")
    if name:
        return str(name)
    call_id = message.get("tool_call_id")
    if call_id:
        for previous in reversed(earlier):
            for call in tool_calls_of(previous):
                if call["id"] == call_id:
                    return call["name"] or None
    return None


def events_as_messages(events: Iterable[Event], api: str) -> list[dict[str, Any]]:
    """Stored events as `api`'s messages, tool calls and results included.

    A tool result whose call is not among the messages is left out: servers refuse a
    result that answers nothing (the window may have cut the call off).
    """
    messages: list[dict[str, Any]] = []
    open_calls: list[dict[str, Any]] = []  # OpenAI-rendered calls not yet answered
    for event in events:
        message: dict[str, Any] = {"role": event.role, "content": event.content}
        calls = stored_tool_calls(event.tool_calls_json)
        if event.role == "assistant" and calls:
            message["tool_calls"] = render_tool_calls(calls, api, f"call_{event.id}")
            open_calls = render_tool_calls(calls, "openai", f"call_{event.id}")
        elif event.role == "tool":
            answered = _answered_call(event, open_calls)
            if answered is None:
                continue
            open_calls.remove(answered)
            if api == "openai":
                message["tool_call_id"] = answered["id"]
            elif event.tool_name or answered["function"]["name"]:
                message["tool_name"] = event.tool_name or answered["function"]["name"]
        messages.append(message)
    return messages


def _answered_call(event: Event, open_calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    for call in open_calls:
        if event.tool_call_id and call["id"] == event.tool_call_id:
            return call
    for call in open_calls:
        if not event.tool_name or call["function"]["name"] == event.tool_name:
            return call
    return None


# ----------------------------------------------------------------------------- the client's request


@dataclass(frozen=True)
class ClientChat:
    """A client's own chat request, to be relayed with only its messages changed.

    `messages` are the client's messages Hilo sends on (its whole history, or its system
    messages and last message when the stored window is to go before that message);
    `query` is what the memory layers are retrieved for. `sent`: how many of `messages`
    the client sent (None: all); the rest are an agent turn's own calls and results, whose
    provenance their events carry (app/turn/agent.py). `events`: the stored events the
    client's messages are (app/api/conversation.py), whose provenance the turn reads.
    """

    api: str
    body: Mapping[str, Any]
    messages: list[dict[str, Any]]
    with_window: bool
    query: str
    sent: int | None = None
    events: tuple[Event, ...] = ()

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "")

    @property
    def num_ctx(self) -> int | None:
        """The context window the client asked for (Ollama's options.num_ctx)."""
        options = self.body.get("options")
        value = options.get("num_ctx") if isinstance(options, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# ----------------------------------------------------------------------------- replies


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
                                    "arguments": _arguments(call["arguments"])})
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
