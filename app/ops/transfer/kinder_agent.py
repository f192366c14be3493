"""Import of a kinder-agent memory database (the Bash REPL Hilo grew out of).

Tables messages, context_cards, profile, facts and diary (see
tests/fixtures/kinder_agent.py); column names vary between versions, so each is found
among its usual spellings. Reading is a few named steps: the messages, the cards, the
link from each compacted message to its card (nothing but the session and the times
links them), the span of each session, then one record per row.
"""

from __future__ import annotations

import hashlib
import json
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import apsw

from app.config import Config
from app.db import connect_readonly
from app.fts import terms
from app.memory import CATEGORIES, InvalidMemory
from app.ops.transfer.importer import IMPORT_NAMESPACE, store_records
from app.ops.transfer.records import (
    ImportReport,
    Problem,
    TransferError,
    check_user,
    clean_text,
    memory_key,
    record_time,
)
from app.ops.transfer.user_records import rows

__all__ = ["KINDER_ROLES", "KINDER_CATEGORIES", "KINDER_SESSION", "SessionSpans",
           "read_kinder_agent", "import_kinder_agent"]

KINDER_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
                "bot": "assistant", "model": "assistant", "system": "system", "tool": "tool"}
KINDER_CATEGORIES = {"preferences": "preference", "decisions": "decision", "solutions": "solution",
                     "fix": "solution", "facts": "fact", "conversations": "conversation"}
KINDER_SESSION = "kinder-agent"  # for rows without a session
_TIME_COLUMNS = ("created_at", "timestamp", "ts", "time", "date", "updated_at")

# Session id → [first, last] time of its messages.
SessionSpans = dict[str, list[str | None]]


def _columns(con: apsw.Connection, table: str) -> list[str]:
    return [row[1] for row in con.execute(f'PRAGMA table_info("{table}")')]


def _pick(columns: list[str], *names: str) -> str | None:
    lowered = {c.lower(): c for c in columns}
    return next((lowered[n] for n in names if n in lowered), None)


def _select(con: apsw.Connection, table: str, wanted: dict[str, tuple[str, ...]],
            order: tuple[str, ...] = ()) -> Iterator[dict]:
    """Rows of `table` as {our name: value}, for whichever candidate column exists."""
    columns = _columns(con, table)
    chosen = {ours: _pick(columns, *names) for ours, names in wanted.items()}
    parts = [f'"{col}" AS {ours}' if col else f"NULL AS {ours}" for ours, col in chosen.items()]
    sort = [f'"{chosen[o]}"' for o in order if chosen.get(o)] or ["rowid"]
    yield from rows(con, f'SELECT rowid AS _rowid, {", ".join(parts)} FROM "{table}" '
                    f'ORDER BY {", ".join(sort)}, rowid', ())


def _kinder_key(content: str, category: str, taken: dict[tuple[str, str], str]) -> str:
    """A short, stable key for a free-text fact: its first content words."""
    base = " ".join(terms(content, min_length=3)[:5]) or " ".join(content.split())[:60].casefold()
    key, n = base, 1
    while taken.get((category, key), content) != content:
        n += 1
        key = f"{base} {n}"
    taken[(category, key)] = content
    return key


# -- the steps ------------------------------------------------------------------------------


def _skipped(where: str, exc: ValueError) -> Problem:
    """A row that cannot be imported (a time that does not parse, an empty key)."""
    return Problem(where, f"{exc}, skipped")


def _message_uuid(m: dict) -> str:
    """Stable across imports: the message's session, id, time and content."""
    content = m["content"]
    digest = hashlib.sha256(content.encode("utf-8", "replace")
                            if isinstance(content, str) else content).hexdigest()[:16]
    return str(uuidlib.uuid5(IMPORT_NAMESPACE, "kinder-agent\x1f" + "\x1f".join(
        str(x) for x in (m["session_id"], m["id"] or m["_rowid"], m["at"], digest))))


def _read_messages(con: apsw.Connection) -> tuple[list[dict], list[Problem]]:
    messages, problems = [], []
    for m in _select(con, "messages", {
            "id": ("id", "message_id"), "session_id": ("session_id", "session", "conversation_id"),
            "role": ("role",), "content": ("content", "message", "text"),
            "compacted": ("compacted", "is_compacted"), "importance": ("importance",),
            "at": _TIME_COLUMNS}, order=("at", "id")):
        role = KINDER_ROLES.get(str(m["role"] or "").strip().lower())
        if role is None or m["content"] is None:
            problems.append(Problem(f"messages row {m['_rowid']}",
                                    f"role {m['role']!r} or content missing, skipped"))
            continue
        try:
            m["at"] = record_time(m["at"])
        except ValueError as exc:
            problems.append(_skipped(f"messages row {m['_rowid']}", exc))
            continue
        m["role"] = role
        m["session_id"] = str(m["session_id"] or KINDER_SESSION)
        m["content"] = m["content"] if isinstance(m["content"], (str, bytes)) else str(m["content"])
        m["uuid"] = _message_uuid(m)
        messages.append(m)
    return messages, problems


def _read_cards(con: apsw.Connection) -> tuple[list[dict], list[Problem]]:
    cards, problems = [], []
    for c in _select(con, "context_cards", {
            "id": ("id", "card_id"), "session_id": ("session_id", "session"),
            "summary": ("summary", "content", "text"), "keywords": ("keywords", "tags"),
            "at": ("created_at", "timestamp", "ts", "time", "date")}, order=("at", "id")):
        try:
            c["at"] = record_time(c["at"])
        except ValueError as exc:
            problems.append(_skipped(f"context_cards row {c['_rowid']}", exc))
            continue
        c["id"] = c["id"] if c["id"] is not None else f"row{c['_rowid']}"
        cards.append(c)
    return cards, problems


def _link_compacted_messages(messages: list[dict], cards: list[dict]) -> dict[str, Any]:
    """Message uuid → id of the first card of its session made at or after it
    (compaction took the oldest chunk of a session and wrote its card)."""
    by_session: dict[str, list[dict]] = defaultdict(list)
    for c in cards:
        if c["session_id"] is not None and c["at"] is not None:
            by_session[str(c["session_id"])].append(c)
    links: dict[str, Any] = {}
    for m in messages:
        if not m["compacted"] or m["at"] is None:
            continue
        card = next((c for c in by_session.get(m["session_id"], []) if c["at"] >= m["at"]), None)
        if card is not None:
            links[m["uuid"]] = card["id"]
    return links


def _session_spans(messages: list[dict]) -> SessionSpans:
    spans: SessionSpans = {}
    for m in messages:
        span = spans.setdefault(m["session_id"], [m["at"], m["at"]])
        if m["at"]:
            span[0] = min(filter(None, (span[0], m["at"])))
            span[1] = max(filter(None, (span[1], m["at"])))
    return spans


def _session_records(spans: SessionSpans) -> Iterator[dict]:
    for session_id, (first, last) in spans.items():
        # A conversation in the old REPL's history is over.
        yield {"type": "session", "id": session_id, "started_at": first, "last_event_at": last,
               "ended_at": last, "_where": f"session {session_id}"}


def _event_records(messages: list[dict], links: dict[str, Any]) -> Iterator[dict]:
    for m in messages:
        # Imported messages count as distilled: the REPL had already extracted their facts.
        yield {"type": "event", "uuid": m["uuid"], "session_id": m["session_id"],
               "role": m["role"], "content": m["content"], "created_at": m["at"],
               "importance": m["importance"], "compacted": bool(m["compacted"]),
               "card": links.get(m["uuid"]), "distilled_at": m["at"],
               "_where": f"messages row {m['_rowid']}"}


def _card_keywords(keywords: Any) -> Any:
    """Keywords as Hilo keeps them, "a, b, c"; some versions stored a JSON list."""
    keywords = keywords or ""
    if isinstance(keywords, str) and keywords.strip().startswith("["):
        try:
            return ", ".join(str(k) for k in json.loads(keywords))
        except json.JSONDecodeError:
            pass
    return keywords


def _card_records(cards: list[dict], links: dict[str, Any]) -> Iterator[dict]:
    card_events: dict[Any, list[str]] = defaultdict(list)
    for uuid, card_id in links.items():
        card_events[card_id].append(uuid)
    for c in cards:
        linked = card_events.get(c["id"], [])
        yield {"type": "card", "id": c["id"], "session_id": c["session_id"],
               "summary": c["summary"], "keywords": _card_keywords(c["keywords"]),
               "created_at": c["at"],
               "first_event_uuid": linked[0] if linked else None,
               "last_event_uuid": linked[-1] if linked else None,
               "event_count": len(linked), "importance": 0.5,
               "_where": f"context_cards row {c['_rowid']}"}


def _profile_records(con: apsw.Connection) -> Iterator[dict | Problem]:
    for p in _select(con, "profile", {"key": ("key", "name", "attribute"),
                                      "value": ("value", "content"),
                                      "at": ("updated_at", "created_at", "timestamp")},
                     order=("key",)):
        where = f"profile row {p['_rowid']}"
        try:
            at = record_time(p["at"])
        except ValueError as exc:
            yield _skipped(where, exc)
            continue
        yield {"type": "profile", "key": p["key"], "value": p["value"], "source": "agent",
               "updated_at": at, "_where": where}


def _fact_category(value: Any) -> str:
    category = str(value or "fact").strip().casefold()
    category = KINDER_CATEGORIES.get(category, category)
    return category if category in CATEGORIES else "fact"


def _fact_records(con: apsw.Connection) -> Iterator[dict | Problem]:
    taken: dict[tuple[str, str], str] = {}
    for f in _select(con, "facts", {"id": ("id",), "key": ("key", "subject"),
                                    "content": ("content", "fact", "text", "value"),
                                    "category": ("category", "type", "kind"),
                                    "importance": ("importance",), "at": _TIME_COLUMNS},
                     order=("at", "id")):
        where = f"facts row {f['_rowid']}"
        content = clean_text(f["content"])
        if not content:
            yield Problem(where, "empty fact, skipped")
            continue
        try:
            at = record_time(f["at"])
        except ValueError as exc:
            yield _skipped(where, exc)
            continue
        category = _fact_category(f["category"])
        try:
            key = memory_key(f["key"], "fact") if f["key"] else _kinder_key(content, category, taken)
        except InvalidMemory as exc:
            yield _skipped(where, exc)
            continue
        yield {"type": "fact", "id": f["id"], "category": category, "key": key,
               "value": content, "source": "agent", "created_at": at, "updated_at": at,
               "importance": 0.5 if f["importance"] is None else f["importance"],
               "_where": where}


def _diary_time(value: Any, session_last: str | None) -> str | None:
    """A date-only diary entry was written when its session ended, if that was that day."""
    at = record_time(value)
    if at is None:
        return session_last
    date_only = (isinstance(value, date) and not isinstance(value, datetime)) or (
        isinstance(value, str) and len(value.strip()) == 10)
    if date_only and session_last and session_last[:10] == at[:10]:
        return session_last
    return at


def _diary_records(con: apsw.Connection, spans: SessionSpans) -> Iterator[dict | Problem]:
    last_event = {sid: span[1] for sid, span in spans.items()}
    for d in _select(con, "diary", {"id": ("id",), "session_id": ("session_id", "session"),
                                    "entry": ("entry", "content", "summary", "text"),
                                    "at": ("created_at", "timestamp", "date", "day")},
                     order=("at", "id")):
        where = f"diary row {d['_rowid']}"
        session_id = str(d["session_id"]) if d["session_id"] else f"kinder-diary-{d['_rowid']}"
        try:
            at = _diary_time(d["at"], last_event.get(session_id))
        except ValueError as exc:
            yield _skipped(where, exc)
            continue
        yield {"type": "diary", "session_id": session_id, "entry": d["entry"],
               "created_at": at, "_where": where}


# -- the reader and the import ----------------------------------------------------------------


def read_kinder_agent(db_path: Path) -> Iterator[dict | Problem]:
    """Records from a kinder-agent memory database.

    Compacted messages are linked to the card of their session created at or after them;
    messages, facts and cards keep their dates. Imported messages count as distilled
    (the REPL had already extracted their facts); `hilo rebuild --all` redoes it.
    """
    con = connect_readonly(Path(db_path))
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "messages" not in tables:
            raise TransferError(f"{db_path} has no messages table: is it a kinder-agent database?")
        messages, problems = _read_messages(con)
        yield from problems
        cards, problems = _read_cards(con) if "context_cards" in tables else ([], [])
        yield from problems
        links = _link_compacted_messages(messages, cards)
        spans = _session_spans(messages)
        yield from _session_records(spans)
        yield from _event_records(messages, links)
        yield from _card_records(cards, links)
        if "profile" in tables:
            yield from _profile_records(con)
        if "facts" in tables:
            yield from _fact_records(con)
        if "diary" in tables:
            yield from _diary_records(con, spans)
    finally:
        con.close()


def import_kinder_agent(config: Config, db_path: Path, user_id: str) -> ImportReport:
    """Import a kinder-agent memory database into user_id's memory (idempotent).

    Messages become events (sanitised by prepare_event) in their sessions, with their
    dates and compaction state; cards, profile, facts and diary follow. Facts and profile
    keys count as the agent's (source 'agent').
    """
    check_user(user_id)
    db_path = Path(db_path).expanduser()
    if not db_path.is_file():
        raise TransferError(f"{db_path} does not exist: pass the kinder-agent memory database")
    report = ImportReport(db_path, user_id, "kinder-agent")
    try:
        return store_records(config, user_id, read_kinder_agent(db_path), report)
    except apsw.NotADBError:
        raise TransferError(f"{db_path} is not a SQLite database") from None
