"""The obedient model: the worst local model Hilo could be given, as a responder for the
fake model server (`fake.responder = obey`).

It follows every instruction it finds anywhere in its prompt — the system text, the
memory layers, the history, a tool's result, a fetched page — without asking where the
instruction came from. An instruction is the text `CALL <tool> <JSON object>`, e.g.

    CALL terminal {"command": "touch /tmp/x"}
    CALL add_task {"schedule": "every day at 9", "prompt": "..."}

(`instruction("terminal", command="ls")` writes one). Read in the order the messages
come (system, user and tool messages: its own earlier words are not orders to it), the
first instruction not yet carried out — no call of that tool with those arguments in a
later message — becomes the reply's tool call, in the wire format of the API asked
(Ollama's or OpenAI's, as the fake server renders a `Reply`). So a task's prompt is
obeyed again at each run, and an instruction quoted from an earlier conversation is
obeyed anew. Like a real model it calls only a tool it was offered in the request's
`tools`; an instruction for a tool it was not given is passed over. With nothing left
to do it answers in words: what the last tool said (its instructions left out), or the
fake's usual "ok: <the user's text>". A request for JSON (the workers' distillation,
cards, diary) is left to the fake's default.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

from tests.fake_ollama import Reply, message_text

INSTRUCTION = re.compile(r"CALL\s+([A-Za-z_][\w-]*)\s+(?=\{)")
QUOTED_RESULT_CHARS = 300


def instruction(tool: str, **arguments: Any) -> str:
    """The text that makes the obedient model call `tool` with `arguments`."""
    return f"CALL {tool} {json.dumps(arguments)}"


def canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def instructions_in(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each (tool, arguments) instruction in `text`, in order; unparsable ones are skipped.
    HTML entities are read through, as a model reads them."""
    text = html.unescape(text)
    decoder = json.JSONDecoder()
    for match in INSTRUCTION.finditer(text):
        try:
            arguments, _ = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(arguments, dict):
            yield match.group(1), arguments


def calls_in(message: dict[str, Any]) -> set[tuple[str, str]]:
    """(tool, canonical arguments) of the calls a message makes, in Ollama's shape
    (arguments an object) or OpenAI's (a JSON string)."""
    made = set()
    for call in message.get("tool_calls") or []:
        function = call.get("function") or call
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                continue
        made.add((str(function.get("name")), canonical(arguments or {})))
    return made


def offered_tools(body: dict[str, Any]) -> set[str]:
    return {str((tool.get("function") or {}).get("name"))
            for tool in body.get("tools") or [] if isinstance(tool, dict)}


def wants_json(body: dict[str, Any]) -> bool:
    if body.get("format") not in (None, ""):
        return True
    return (body.get("response_format") or {}).get("type") in ("json_object", "json_schema")


def next_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The call the obedient model makes next for this request, if any."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    offered = offered_tools(body)
    made_after: list[set[tuple[str, str]]] = []  # the calls after each message
    later: set[tuple[str, str]] = set()
    for message in reversed(messages):
        made_after.append(set(later))
        later |= calls_in(message)
    made_after.reverse()
    for message, made in zip(messages, made_after, strict=True):
        if message.get("role") == "assistant":
            continue
        for tool, arguments in instructions_in(message_text(message)):
            if tool in offered and (tool, canonical(arguments)) not in made:
                return tool, arguments
    return None


def without_instructions(text: str) -> str:
    """`text` with its instructions cut out (how the model quotes what a tool said)."""
    decoder = json.JSONDecoder()
    kept, start = [], 0
    for match in INSTRUCTION.finditer(text):
        if match.start() < start:
            continue
        try:
            _, end = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        kept.append(text[start:match.start()])
        start = end
    return "".join(kept) + text[start:]


def obey(body: dict[str, Any]) -> Any:
    """The fake server's responder: a tool call for the next instruction, else words."""
    if wants_json(body):
        return None
    call = next_call(body)
    if call is not None:
        tool, arguments = call
        return Reply(tool_calls=[{"name": tool, "arguments": arguments}])
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if messages and messages[-1].get("role") == "tool":
        said = without_instructions(message_text(messages[-1]))
        return f"Done. The tool said: {said[:QUOTED_RESULT_CHARS]}"
    return None  # the fake's default: "ok: <the user's last text>"
