"""How a model server takes a request for JSON: a ladder, learned once per server and model.

Servers that speak the same API accept different things (each server's behaviour, and
where it was learned, is in tests/fake_ollama.py's ENGINES): Ollama 0.5 and later take a
JSON schema as `format`, older ones only "json"; llama.cpp's server takes `response_format`
json_schema and json_object, its older builds json_object only; llama-cpp-python's server
only json_object; vLLM both; LM Studio json_schema and never json_object. So Hilo asks
for JSON one rung of a ladder at a time:

- "schema": the JSON schema itself (Ollama's `format`, `response_format` json_schema);
- "object": any JSON object (`format: "json"`, `response_format` json_object), with the
  schema written into the question;
- "instruction": no format field; the schema in the question, the reply read by a
  tolerant parser (app.learn.model_output.parse_json_leniently).

A server's refusal of a rung (an HTTP error that names the format) moves that server and
model one rung down at once, and for good: the refused request generated nothing. With a
Writer, the rung is kept in the memory database (model_json_modes), so a restarted
worker starts where the last one ended instead of being refused again.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from app.db import connect_readonly
from app.log import get_logger
from app.model.errors import ModelError, ModelHTTPError
from app.sanitize import redact_secrets
from app.timeutil import utc_now
from app.writer import Writer

__all__ = ["log", "LADDER", "JsonSchema", "REASON_CHARS", "refuses_format", "server_key",
           "JsonModes", "with_schema", "ollama_format", "openai_format"]

log = get_logger(__name__)

LADDER = ("schema", "object", "instruction")
JsonSchema = Mapping[str, Any] | str  # a JSON schema, or "json" for any JSON value
REASON_CHARS = 300
# A refusal names what it refused: OpenAI's response_format or its types, Ollama's format,
# or the schema a server could not turn into a grammar.
_NAMES_THE_FORMAT = re.compile(r"response_format|json_schema|json_object|\bformat\b|schema",
                               re.IGNORECASE)


def refuses_format(error: ModelError) -> bool:
    """Whether `error` is a server refusing how JSON was asked for. Servers answer 400,
    422 or, where a validation error escapes their handler, 500."""
    return (isinstance(error, ModelHTTPError) and error.status in (400, 422, 500)
            and bool(_NAMES_THE_FORMAT.search(error.server_message)))


def server_key(url: str) -> str:
    """A server as the table names it: its URL without a user name or password."""
    parts = urlsplit(url.rstrip("/"))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class JsonModes:
    """The rung each (server, model) is on; "schema" until a server refuses it.
    Safe to share between threads."""

    def __init__(self, writer: Writer | None = None) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._modes: dict[tuple[str, str], str] = {}
        if writer is not None:
            con = connect_readonly(writer.path)
            try:
                for server, model, mode in con.execute(
                        "SELECT server, model, mode FROM model_json_modes"):
                    if mode in LADDER:
                        self._modes[(server, model)] = mode
            finally:
                con.close()

    def mode(self, url: str, model: str) -> str:
        with self._lock:
            return self._modes.get((server_key(url), model), LADDER[0])

    def refused(self, url: str, model: str, mode: str, error: ModelError) -> bool:
        """Move (url, model) below `mode` when `error` refuses it; False when it is not
        such a refusal, or no rung is left below."""
        if not refuses_format(error) or mode == LADDER[-1]:
            return False
        lower = LADDER[LADDER.index(mode) + 1]
        key = (server_key(url), model)
        with self._lock:
            if LADDER.index(self._modes.get(key, LADDER[0])) >= LADDER.index(lower):
                return True  # another call learned it meanwhile
            self._modes[key] = lower
        reason = redact_secrets(getattr(error, "server_message", str(error))).text[:REASON_CHARS]
        log.warning("model.json_mode_learned", server=key[0], model=model, refused=mode,
                    mode=lower, reason=reason)
        if self._writer is not None:
            self._writer.submit(lambda con: con.execute(
                "INSERT INTO model_json_modes (server, model, mode, reason, learned_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (server, model) DO UPDATE SET "
                "mode = excluded.mode, reason = excluded.reason, learned_at = excluded.learned_at",
                (*key, lower, reason, utc_now())))
        return True


def with_schema(question: str, schema: JsonSchema, mode: str) -> str:
    """The question as `mode` asks it: below "schema", the schema is in the text."""
    if mode == "schema":
        return question
    if isinstance(schema, str):
        return f"{question}\n\nAnswer with one JSON object only."
    return (f"{question}\n\nAnswer with one JSON object only, matching this JSON schema:\n"
            f"{json.dumps(schema, separators=(',', ':'))}")


def ollama_format(schema: JsonSchema, mode: str) -> dict[str, Any]:
    """Ollama's `format` field for `mode` (none for "instruction")."""
    if mode == "instruction":
        return {}
    return {"format": schema if mode == "schema" else "json"}


def openai_format(schema: JsonSchema, mode: str) -> dict[str, Any]:
    """The OpenAI `response_format` field for `mode` (none for "instruction")."""
    if mode == "instruction":
        return {}
    if mode == "object" or isinstance(schema, str):
        return {"response_format": {"type": "json_object"}}
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "reply", "schema": dict(schema)}}}
