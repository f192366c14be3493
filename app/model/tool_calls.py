"""Tool calls in one neutral shape, and rendered per API.

Stored as a list of
`{"id": str | None, "name": str, "arguments": <JSON value>}`, and rendered per API:
Ollama's `{"function": {"name", "arguments": {...}}}`, OpenAI's `{"id", "type":
"function", "function": {"name", "arguments": "<JSON text>"}}`; stored events are
rendered back as messages with their calls and results (events_as_messages).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.events import Event

__all__ = ["json_arguments", "tool_calls_of", "stored_tool_calls", "text_with_tool_calls",
           "render_tool_calls", "tool_name_of", "events_as_messages"]


def json_arguments(value: Any) -> Any:
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
                      "arguments": json_arguments(function.get("arguments"))})
    if not calls and isinstance(message.get("function_call"), Mapping):  # OpenAI's legacy field
        function = message["function_call"]
        calls.append({"id": None, "name": str(function.get("name") or ""),
                      "arguments": json_arguments(function.get("arguments"))})
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
            parsed = json_arguments(arguments)  # Ollama takes an object, nothing else
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


