"""Conversation events: the front-end's only write, sanitised before it is stored.

`prepare_event` turns whatever a client sent into storable text — valid UTF-8, no NUL
bytes, secrets redacted, truncated to the size cap with a visible marker — and
`append_event` stores it through the writer in one transaction with its session row.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import apsw

from app.config import Config
from app.errors import InvalidInput
from app.sanitize import redact_secrets
from app.timeutil import to_rfc3339, utc_now
from app.writer import Writer

ROLES = ("user", "assistant", "tool", "system")
MAX_ID_LENGTH = 200
# A message with more control or undecodable characters than this share is not text a
# person wrote; short messages are always kept as (cleaned) text.
BINARY_CONTROL_SHARE = 0.30
BINARY_MIN_LENGTH = 64


class InvalidEvent(InvalidInput, ValueError):
    """The event cannot be stored as given; str() says which field and why."""

    code = "invalid_event"


@dataclass(frozen=True)
class Event:
    id: int
    uuid: str
    user_id: str
    session_id: str
    role: str
    content: str
    created_at: str
    importance: float
    original_length: int | None = None
    redactions: tuple[str, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_calls_json: str | None = None
    compacted: bool = False
    card_id: int | None = None


@dataclass(frozen=True)
class PreparedEvent:
    """An event ready to insert: validated, sanitised, with its uuid and time fixed."""

    uuid: str
    user_id: str
    session_id: str
    role: str
    content: str
    created_at: str
    importance: float
    original_length: int | None
    redactions: tuple[str, ...]
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_calls_json: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _check_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEvent(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        raise InvalidEvent(f"{name} must be at most {MAX_ID_LENGTH} printable characters")
    return value


def _looks_binary(text: str) -> bool:
    if len(text) < BINARY_MIN_LENGTH:
        return False
    controls = sum(1 for ch in text if ch < " " and ch not in "\n\r\t") + text.count("\ufffd")
    return controls / len(text) > BINARY_CONTROL_SHARE


def normalize_text(content: str | bytes) -> str:
    """Valid UTF-8 text without NUL bytes; binary payloads become a short marker."""
    if isinstance(content, bytes):
        size = len(content)
        text = content.decode("utf-8", errors="replace")
        if _looks_binary(text):
            return f"[binary content omitted: {size} bytes]"
    elif isinstance(content, str):
        # Lone surrogates (from surrogateescape'd input) cannot be encoded as UTF-8.
        text = content.encode("utf-8", errors="replace").decode("utf-8")
        if _looks_binary(text):
            return f"[binary content omitted: {len(content)} characters]"
    else:
        raise InvalidEvent(f"content must be text, got {type(content).__name__}")
    return text.replace("\x00", "")


def truncate(text: str, max_chars: int, original_length: int) -> str:
    """Cut to max_chars, ending with a marker that gives the original length."""
    if original_length <= max_chars:
        return text
    marker = f"\n[… truncated by Hilo: {original_length} characters in all]"
    return text[: max(0, max_chars - len(marker))] + marker


def prepare_event(
    config: Config,
    user_id: str,
    session_id: str,
    role: str,
    content: str | bytes,
    *,
    tool_call_id: str | None = None,
    tool_name: str | None = None,
    tool_calls: Any = None,
    created_at: datetime | str | None = None,
    importance: float | None = None,
) -> PreparedEvent:
    _check_id("user_id", user_id)
    _check_id("session_id", session_id)
    if role not in ROLES:
        raise InvalidEvent(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if importance is None:
        importance = getattr(config.importance, role)
    if not 0 <= importance <= 1:
        raise InvalidEvent(f"importance must be between 0 and 1, got {importance}")

    text = normalize_text(content)
    length = len(text)
    cap = config.memory.max_message_chars
    # Redact a margin past the cap so a secret straddling the cut is caught whole;
    # nothing beyond the margin can survive truncation, so it is never scanned.
    redacted = redact_secrets(text[: cap + 4096])
    text = truncate(redacted.text, cap, length)
    original_length = length if length > cap else None

    if isinstance(created_at, datetime):
        created_at = to_rfc3339(created_at)
    tool_calls_json = None
    if tool_calls is not None:
        try:
            tool_calls_json = redact_secrets(json.dumps(tool_calls, ensure_ascii=False)).text
        except (TypeError, ValueError) as exc:
            raise InvalidEvent(f"tool_calls must be JSON-serialisable: {exc}") from None
    return PreparedEvent(
        uuid=str(uuidlib.uuid4()),
        user_id=user_id,
        session_id=session_id,
        role=role,
        content=text,
        created_at=created_at or utc_now(),
        importance=float(importance),
        original_length=original_length,
        redactions=redacted.kinds,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        tool_calls_json=tool_calls_json,
    )


def insert_event(con: apsw.Connection, event: PreparedEvent) -> Event:
    """The write itself: the session row and the event, inside the caller's transaction."""
    con.execute(
        "INSERT INTO sessions (user_id, id, started_at, last_event_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (user_id, id) DO UPDATE SET last_event_at = "
        "max(last_event_at, excluded.last_event_at), ended_at = NULL",
        (event.user_id, event.session_id, event.created_at, event.created_at),
    )
    con.execute(
        "INSERT INTO events (uuid, user_id, session_id, role, content, original_length, "
        "tool_call_id, tool_name, tool_calls_json, created_at, importance) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            event.uuid, event.user_id, event.session_id, event.role, event.content,
            event.original_length, event.tool_call_id, event.tool_name,
            event.tool_calls_json, event.created_at, event.importance,
        ),
    )
    return Event(
        id=con.last_insert_rowid(),
        uuid=event.uuid,
        user_id=event.user_id,
        session_id=event.session_id,
        role=event.role,
        content=event.content,
        created_at=event.created_at,
        importance=event.importance,
        original_length=event.original_length,
        redactions=event.redactions,
        tool_call_id=event.tool_call_id,
        tool_name=event.tool_name,
        tool_calls_json=event.tool_calls_json,
    )


def append_event(
    writer: Writer,
    config: Config,
    user_id: str,
    session_id: str,
    role: str,
    content: str | bytes,
    **fields: Any,
) -> Event:
    """Sanitise and store one event; returns it once it is committed."""
    prepared = prepare_event(config, user_id, session_id, role, content, **fields)
    return writer.submit(lambda con: insert_event(con, prepared))


_EVENT_COLUMNS = (
    "id, uuid, user_id, session_id, role, content, created_at, importance, original_length, "
    "tool_call_id, tool_name, tool_calls_json, compacted, card_id"
)


def _row_to_event(row: tuple) -> Event:
    (id_, uuid, user_id, session_id, role, content, created_at, importance,
     original_length, tool_call_id, tool_name, tool_calls_json, compacted, card_id) = row
    return Event(
        id=id_, uuid=uuid, user_id=user_id, session_id=session_id, role=role,
        content=content, created_at=created_at, importance=importance,
        original_length=original_length, tool_call_id=tool_call_id, tool_name=tool_name,
        tool_calls_json=tool_calls_json, compacted=bool(compacted), card_id=card_id,
    )


def session_events(
    con: apsw.Connection,
    user_id: str,
    session_id: str,
    *,
    limit: int | None = None,
    include_compacted: bool = True,
) -> list[Event]:
    """A session's events in order; with a limit, the most recent `limit` of them."""
    where = "user_id = ? AND session_id = ?" + ("" if include_compacted else " AND compacted = 0")
    sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY id DESC"
    params: tuple = (user_id, session_id)
    if limit is not None:
        sql += " LIMIT ?"
        params += (limit,)
    return [_row_to_event(r) for r in reversed(list(con.execute(sql, params)))]


def delete_events(con: apsw.Connection, user_id: str, event_ids: list[int]) -> int:
    """Delete the user's events `event_ids` for good, with their vectors (their FTS rows go
    by trigger; facts and profile keys that cite them keep the fact, not the link).
    Run inside the writer's transaction. Returns how many were deleted."""
    deleted = 0
    for event_id in sorted(set(event_ids)):
        con.execute("DELETE FROM embeddings WHERE owner_kind = 'event' AND owner_id = ? "
                    "AND user_id = ?", (event_id, user_id))
        con.execute("DELETE FROM events WHERE id = ? AND user_id = ?", (event_id, user_id))
        deleted += con.changes()
    return deleted
