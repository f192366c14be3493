"""Conversation events: the front-end's only write, sanitised before it is stored.

`prepare_event` turns whatever a client sent into storable text — valid UTF-8, no NUL
bytes, secrets redacted, truncated to the size cap with a visible marker — and
`append_event` stores it through the writer in one transaction with its session row.
The tool fields are cleaned and redacted the same way (tool calls keeping their JSON
shape: app.sanitize.redact_json), and capped; ids that look like a secret are refused,
since an id is stored, queued and logged as it is.

Each event records where it came from (`origin`, ORIGINS below) and whether it is content
from outside (`from_outside`), decided from its origin by the one rule of provenance
(app.memory.provenance.is_outside): only the person's message as typed is the owner's
hand; the model's reply, and the result of a call Hilo ran, are Hilo's, from outside when
what they were written reading was; a client's history and tool results, and an import,
are from outside, as is an event that states no origin. Such content is data, never
instructions. (A command the owner authorised prints the owner's data.)

This module is the one owner of the events table: every write of an event or of the
marks the workers set on it (distilled, compacted into a card) is a function here, run
inside the caller's transaction (tests/memory/test_writes.py checks no other module has one).
"""

from __future__ import annotations

import json
import unicodedata
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import apsw

from app.config import Config
from app.errors import InvalidInput
from app.memory.embeddings import delete_vectors
from app.memory.provenance import Hand, is_outside
from app.memory.sessions import note_event
from app.memory.validation import MAX_ID_LENGTH
from app.sanitize import Secret, clean_text, redact_json, redact_secrets, secret_kind
from app.timeutil import to_rfc3339, utc_now
from app.writer import Writer

__all__ = ["ROLES", "ORIGINS", "ORIGIN_HANDS", "MAX_TOOL_NAME_LENGTH", "MAX_TOOL_CALLS_CHARS",
           "BINARY_CONTROL_SHARE", "BINARY_MIN_LENGTH", "InvalidEvent", "Event", "PreparedEvent",
           "refuse_secret_id", "normalize_text", "truncate", "prepare_event", "insert_event",
           "append_event", "append_events", "events_by_ids", "count_session_events",
           "session_events", "delete_events", "replies_to", "mark_distilled", "mark_compacted",
           "link_to_card", "restore_marks", "uncompact", "reset_derived_marks", "supersede_events",
           "choose_again", "superseded_among", "reply_from", "sessions_opening_with",
           "MAX_ID_LENGTH"]

ROLES = ("user", "assistant", "tool", "system")
# Where an event came from (migrations/0013_provenance.sql says each one's meaning).
ORIGINS = ("typed", "client", "model", "hilo_tool", "hilo_tool_approved", "task", "import")
# Whose hand each origin is (app.memory.provenance): a task's prompt is Hilo's to send,
# from outside when the task's is (ScheduledTask.prompt_from_outside).
ORIGIN_HANDS: dict[str, Hand] = {
    "typed": "owner", "client": "outside", "model": "hilo", "hilo_tool": "hilo",
    "hilo_tool_approved": "hilo", "task": "hilo", "import": "outside"}
# Tool names are identifiers (OpenAI allows 64 characters); anything longer is not one.
MAX_TOOL_NAME_LENGTH = 256
# The JSON of an assistant message's tool calls (their arguments can hold a whole file).
MAX_TOOL_CALLS_CHARS = 1_000_000
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
    origin: str = "client"
    from_outside: bool = False
    superseded_by: int | None = None  # a regenerated reply: the reply that replaced it


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
    origin: str = "client"
    from_outside: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _check_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEvent(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        raise InvalidEvent(f"{name} must be at most {MAX_ID_LENGTH} printable characters")
    refuse_secret_id(name, value)
    return value


def refuse_secret_id(name: str, value: str) -> None:
    """An id that looks like a credential is refused: ids are stored, queued and logged."""
    kind = secret_kind(value)
    if kind is not None:
        raise InvalidEvent(f"{name} looks like a secret ({kind}); ids are stored and logged "
                           "as they are: use an opaque id such as a UUID")


def _tool_field(name: str, value: Any, limit: int) -> str | None:
    """A tool name or call id: text within `limit`, cleaned and redacted; None if empty."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEvent(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidEvent(f"{name} is {len(value)} characters; at most {limit} are allowed")
    cleaned = "".join(ch for ch in clean_text(value) if unicodedata.category(ch) != "Cc").strip()
    return redact_secrets(cleaned).text or None


def _clean_json_strings(value: Any) -> Any:
    """`value` with every string in it cleaned (NUL bytes, lone surrogates)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_json_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_json_strings(v) for v in value]
    return value


# Control characters but the line breaks and tab, and U+FFFD (an undecodable byte).
_BINARY_MARKS = {code: None for code in [*range(32), 0xFFFD] if chr(code) not in "\n\r\t"}


def _looks_binary(text: str) -> bool:
    if len(text) < BINARY_MIN_LENGTH:
        return False
    controls = len(text) - len(text.translate(_BINARY_MARKS))  # in C: 30 MB in a fifth of a second
    return controls / len(text) > BINARY_CONTROL_SHARE


def normalize_text(content: str | bytes) -> str:
    """Valid UTF-8 text without NUL bytes; binary payloads become a short marker."""
    if isinstance(content, bytes):
        size = len(content)
        text = content.decode("utf-8", errors="replace")
        if _looks_binary(text):
            return f"[binary content omitted: {size} bytes]"
    elif isinstance(content, str):
        text = content
        if _looks_binary(text):
            return f"[binary content omitted: {len(content)} characters]"
    else:
        raise InvalidEvent(f"content must be text, got {type(content).__name__}")
    return clean_text(text)


def truncate(text: str, max_chars: int, original_length: int) -> str:
    """Cut to max_chars, ending with a marker that gives the original length."""
    if original_length <= max_chars:
        return text
    marker = f"\n[… truncated by Hilo: {original_length} characters in all]"
    return text[: max(0, max_chars - len(marker))] + marker


def _checked_fields(config: Config, user_id: str, session_id: str, role: str, origin: str,
                    importance: float | None) -> float:
    """The event's importance (the role's default when unstated), once its ids, role and
    origin are known to be valid."""
    _check_id("user_id", user_id)
    _check_id("session_id", session_id)
    if role not in ROLES:
        raise InvalidEvent(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if origin not in ORIGINS:
        raise InvalidEvent(f"origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
    if importance is None:
        importance = getattr(config.importance, role)
    if not 0 <= importance <= 1:
        raise InvalidEvent(f"importance must be between 0 and 1, got {importance}")
    return importance


def _tool_calls_json(tool_calls: Any, echoes_of: tuple[Secret, ...]) -> str:
    """A message's tool calls as stored: valid JSON text within its cap, secrets redacted."""
    cleaned = _clean_json_strings(tool_calls)
    try:
        size = len(json.dumps(cleaned, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"tool_calls must be JSON-serialisable: {exc}") from None
    if size > MAX_TOOL_CALLS_CHARS:
        raise InvalidEvent(f"tool_calls is {size} characters of JSON; at "
                           f"most {MAX_TOOL_CALLS_CHARS} are allowed")
    return json.dumps(redact_json(cleaned, echoes_of=echoes_of), ensure_ascii=False)


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
    echoes_of: tuple[Secret, ...] = (),
    origin: str = "client",
    from_outside: bool = False,
) -> PreparedEvent:
    """An event ready to insert: checked, cleaned, truncated, its secrets redacted.

    `echoes_of`: secrets the content may repeat in part (app.sanitize.redact_secrets),
    e.g. those of the prompt a model's reply answers. `origin`: where it came from
    (ORIGINS; unstated, sent by a client: from outside). `from_outside`: it quotes, or
    was written reading, content from outside (a message quoting documents a client
    retrieved, a reply to such a context, what Hilo's web_fetch returned); whether the
    event is from outside is then decided by ORIGIN_HANDS and is_outside.
    """
    importance = _checked_fields(config, user_id, session_id, role, origin, importance)
    text = normalize_text(content)
    if not text.strip() and content.strip():  # it held only NUL bytes
        raise InvalidEvent("content has no text once NUL bytes and invalid characters are "
                           "removed: send the message as text")
    # A tool may print nothing, and an assistant message may be only its tool calls.
    if not text.strip() and (role in ("user", "system") or (role == "assistant" and not tool_calls)):
        raise InvalidEvent(f"content is empty: a {role} message needs text")
    length = len(text)
    cap = config.memory.max_message_chars
    # Redact a margin past the cap so a secret straddling the cut is caught whole;
    # nothing beyond the margin can survive truncation, so it is never scanned.
    redacted = redact_secrets(text[: cap + 4096], echoes_of=echoes_of)
    text = truncate(redacted.text, cap, length)
    if isinstance(created_at, datetime):
        created_at = to_rfc3339(created_at)
    return PreparedEvent(
        uuid=str(uuidlib.uuid4()),
        user_id=user_id,
        session_id=session_id,
        role=role,
        content=text,
        created_at=created_at or utc_now(),
        importance=float(importance),
        original_length=length if length > cap else None,
        redactions=redacted.kinds,
        tool_call_id=_tool_field("tool_call_id", tool_call_id, MAX_ID_LENGTH),
        tool_name=_tool_field("tool_name", tool_name, MAX_TOOL_NAME_LENGTH),
        tool_calls_json=None if tool_calls is None else _tool_calls_json(tool_calls, echoes_of),
        origin=origin,
        # A tool result is a tool's, never a message typed by the person.
        from_outside=is_outside("outside" if role == "tool" and origin == "typed"
                                else ORIGIN_HANDS[origin], reading=from_outside),
    )


def insert_event(con: apsw.Connection, event: PreparedEvent) -> Event:
    """The write itself: the session row and the event, inside the caller's transaction."""
    note_event(con, event.user_id, event.session_id, event.created_at, event.from_outside)
    con.execute(
        "INSERT INTO events (uuid, user_id, session_id, role, content, original_length, "
        "tool_call_id, tool_name, tool_calls_json, created_at, importance, origin, "
        "from_outside) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            event.uuid, event.user_id, event.session_id, event.role, event.content,
            event.original_length, event.tool_call_id, event.tool_name,
            event.tool_calls_json, event.created_at, event.importance, event.origin,
            int(event.from_outside),
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
        origin=event.origin,
        from_outside=event.from_outside,
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
    return append_events(writer, config, user_id, session_id, [(role, content, fields)])[0]


def append_events(writer: Writer, config: Config, user_id: str, session_id: str,
                  messages: Sequence[tuple[str, str | bytes, dict[str, Any]]]) -> list[Event]:
    """Sanitise and store events of one session, (role, content, prepare_event's
    keywords) each, in order and in one transaction: none is stored unless all can be,
    and they share one commit. Returns them once committed."""
    prepared = [prepare_event(config, user_id, session_id, role, content, **fields)
                for role, content, fields in messages]
    return writer.submit(lambda con: [insert_event(con, event) for event in prepared])


_EVENT_COLUMNS = (
    "id, uuid, user_id, session_id, role, content, created_at, importance, original_length, "
    "tool_call_id, tool_name, tool_calls_json, compacted, card_id, origin, from_outside, "
    "superseded_by"
)


def _row_to_event(row: tuple) -> Event:
    (id_, uuid, user_id, session_id, role, content, created_at, importance,
     original_length, tool_call_id, tool_name, tool_calls_json, compacted, card_id, origin,
     from_outside, superseded_by) = row
    return Event(
        id=id_, uuid=uuid, user_id=user_id, session_id=session_id, role=role,
        content=content, created_at=created_at, importance=importance,
        original_length=original_length, tool_call_id=tool_call_id, tool_name=tool_name,
        tool_calls_json=tool_calls_json, compacted=bool(compacted), card_id=card_id,
        origin=origin, from_outside=bool(from_outside), superseded_by=superseded_by,
    )


def events_by_ids(con: apsw.Connection, user_id: str, event_ids: Sequence[int]) -> list[Event]:
    """The user's events with these ids, in id order (another user's ids find nothing)."""
    ids = sorted(set(event_ids))
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return [_row_to_event(r) for r in con.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events WHERE user_id = ? AND id IN ({marks}) ORDER BY id",
        (user_id, *ids))]


def count_session_events(con: apsw.Connection, user_id: str, session_id: str) -> int:
    return con.execute("SELECT count(*) FROM events WHERE user_id = ? AND session_id = ?",
                       (user_id, session_id)).fetchone()[0]


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
        con.execute("DELETE FROM events WHERE id = ? AND user_id = ?", (event_id, user_id))
        if con.changes():
            delete_vectors(con, "event", [event_id])
            deleted += 1
    return deleted


def replies_to(con: apsw.Connection, user_id: str, event_ids: Sequence[int]) -> list[Event]:
    """The assistant's replies to the user's events `event_ids`: in the same session, after
    each one and before the next user message."""
    replies: dict[int, Event] = {}
    for event_id in sorted(set(event_ids)):
        row = con.execute("SELECT session_id FROM events WHERE id = ? AND user_id = ?",
                          (event_id, user_id)).fetchone()
        if row is None:
            continue
        (next_user,) = con.execute(
            "SELECT min(id) FROM events WHERE user_id = ? AND session_id = ? AND id > ? "
            "AND role = 'user'", (user_id, row[0], event_id)).fetchone()
        replies.update((r[0], _row_to_event(r)) for r in con.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE user_id = ? AND session_id = ? "
            "AND id > ? AND id < ? AND role = 'assistant' ORDER BY id",
            (user_id, row[0], event_id, next_user if next_user is not None else 2**63 - 1)))
    return [replies[i] for i in sorted(replies)]


# -- the marks the workers set ---------------------------------------------------------------


def mark_distilled(con: apsw.Connection, event_ids: Sequence[int]) -> None:
    """Mark events distilled now, inside the caller's transaction."""
    marks = ",".join("?" * len(event_ids))
    con.execute(f"UPDATE events SET distilled_at = ? WHERE id IN ({marks})",
                (utc_now(), *event_ids))


def mark_compacted(con: apsw.Connection, event_ids: Sequence[int], card_id: int) -> None:
    """Mark events compacted into the card `card_id`, inside the caller's transaction."""
    marks = ",".join("?" * len(event_ids))
    con.execute(f"UPDATE events SET compacted = 1, card_id = ? WHERE id IN ({marks})",
                (card_id, *event_ids))


def link_to_card(con: apsw.Connection, user_id: str, event_ids: Sequence[int],
                 card_id: int) -> None:
    """Mark the user's events compacted into `card_id`, except those already in a card."""
    marks = ",".join("?" * len(event_ids))
    con.execute(f"UPDATE events SET compacted = 1, card_id = ? WHERE user_id = ? "
                f"AND card_id IS NULL AND id IN ({marks})", (card_id, user_id, *event_ids))


def restore_marks(con: apsw.Connection, event_id: int, *, compacted: bool, card_id: int | None,
                  distilled_at: str | None, consolidated_at: str | None) -> None:
    """Set an event's marks as a record gives them (an import), inside the caller's transaction."""
    con.execute("UPDATE events SET compacted = ?, card_id = ?, distilled_at = ?, "
                "consolidated_at = ? WHERE id = ?",
                (1 if compacted else 0, card_id, distilled_at, consolidated_at, event_id))


def uncompact(con: apsw.Connection, card_ids: Sequence[int]) -> int:
    """Mark the events of the cards `card_ids` not compacted (their card is going, so
    compaction makes them a new one); returns how many."""
    marks = ",".join("?" * len(card_ids))
    con.execute(f"UPDATE events SET compacted = 0, card_id = NULL WHERE card_id IN ({marks})",
                tuple(card_ids))
    return con.changes()


def reset_derived_marks(con: apsw.Connection) -> int:
    """Clear every event's derived marks (a rebuild); returns how many events changed."""
    con.execute("UPDATE events SET distilled_at = NULL, consolidated_at = NULL, compacted = 0, "
                "card_id = NULL WHERE distilled_at IS NOT NULL OR consolidated_at IS NOT NULL "
                "OR compacted = 1 OR card_id IS NOT NULL")
    return con.changes()


# -- replies a client regenerated ---------------------------------------------------------------


def supersede_events(con: apsw.Connection, user_id: str, event_ids: Sequence[int],
                     by: int) -> int:
    """Mark the user's events `event_ids` (a reply a client regenerated) superseded by the
    event `by` (the new reply's first), inside the caller's transaction; those already
    superseded are left as they are. Returns how many were marked."""
    ids = sorted(set(event_ids) - {by})
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    con.execute(f"UPDATE events SET superseded_by = ? WHERE user_id = ? AND id IN ({marks}) "
                "AND superseded_by IS NULL", (by, user_id, *ids))
    return con.changes()


def choose_again(con: apsw.Connection, user_id: str, event_id: int) -> int:
    """A superseded reply the client went back to is current again, and the reply that
    replaced it superseded by it in turn, inside the caller's transaction. Returns how
    many events changed."""
    row = con.execute("SELECT superseded_by FROM events WHERE id = ? AND user_id = ?",
                      (event_id, user_id)).fetchone()
    if row is None or row[0] is None:
        return 0
    replaced_by = row[0]
    # Every event of the reply was superseded by the same one: they come back together.
    con.execute("UPDATE events SET superseded_by = NULL WHERE user_id = ? AND superseded_by = ?",
                (user_id, replaced_by))
    changed = con.changes()
    return changed + supersede_events(con, user_id, reply_from(con, user_id, replaced_by),
                                      event_id)


def superseded_among(con: apsw.Connection, user_id: str, event_ids: Sequence[int]) -> set[int]:
    """Of the user's events `event_ids`, the replies a client regenerated."""
    ids = sorted(set(event_ids))
    if not ids or con.execute("SELECT 1 FROM events WHERE user_id = ? AND superseded_by IS NOT "
                              "NULL LIMIT 1", (user_id,)).fetchone() is None:
        return set()
    marks = ",".join("?" * len(ids))
    # +user_id: the ids pick the rows.
    return {row[0] for row in con.execute(
        f"SELECT id FROM events WHERE +user_id = ? AND id IN ({marks}) "
        "AND superseded_by IS NOT NULL", (user_id, *ids))}


def reply_from(con: apsw.Connection, user_id: str, event_id: int) -> list[int]:
    """The reply that starts at `event_id`: it and the assistant and tool events after it
    in its session, up to the next message of the user (or a task's instructions)."""
    start = con.execute("SELECT session_id FROM events WHERE id = ? AND user_id = ?",
                        (event_id, user_id)).fetchone()
    if start is None:
        return []
    reply = []
    for other_id, role in con.execute(
            "SELECT id, role FROM events WHERE user_id = ? AND session_id = ? AND id >= ? "
            "ORDER BY id", (user_id, start[0], event_id)):
        if role not in ("assistant", "tool"):
            break
        reply.append(other_id)
    return reply


# -- which session a conversation continues --------------------------------------------------


def sessions_opening_with(con: apsw.Connection, user_id: str, openings: Sequence[str],
                          limit: int) -> list[str]:
    """The user's sessions whose first user, assistant or tool event says one of
    `openings`, most recently active first, at most `limit`."""
    return [row[0] for row in con.execute(
        "SELECT s.id FROM sessions s WHERE s.user_id = ? AND EXISTS (SELECT 1 FROM events e "
        "WHERE e.id = (SELECT min(f.id) FROM events f WHERE f.user_id = s.user_id "
        "AND f.session_id = s.id AND f.role IN ('user', 'assistant', 'tool')) "
        f"AND e.content IN ({','.join('?' * len(openings))})) "
        "ORDER BY s.last_event_at DESC LIMIT ?", (user_id, *openings, limit))]
