"""The compiled memory layers: profile, facts, context cards, diary — reads and writes.

Writes are functions of a connection, run inside the writer's transaction
(`writer.submit(lambda con: upsert_fact(con, ...))`), and every change to a profile key
or a fact is recorded in `memory_log` with its old and new value, source event and
worker. Facts are never overwritten: a changed value supersedes the current row, which
is kept; a fact or profile key the user deleted is tombstoned and no worker re-creates
it. Reads take any connection (the front-end uses read-only ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import apsw

from app.timeutil import utc_now

CATEGORIES = ("fact", "decision", "solution", "preference", "conversation")
SOURCES = ("agent", "user")

WriteAction = Literal["insert", "update", "supersede", "unchanged", "tombstoned"]


class InvalidMemory(ValueError):
    """A memory edit that cannot be stored as given; str() says why."""


@dataclass(frozen=True)
class ProfileEntry:
    key: str
    value: str
    source: str
    updated_at: str
    source_event_id: int | None = None


@dataclass(frozen=True)
class Fact:
    id: int
    user_id: str
    category: str
    key: str
    value: str
    source: str
    created_at: str
    updated_at: str
    importance: float
    source_event_id: int | None = None
    superseded_at: str | None = None
    deleted_at: str | None = None
    access_count: int = 0

    @property
    def date(self) -> str:
        """The day the fact was last stated, as shown in the context."""
        return self.updated_at[:10]


@dataclass(frozen=True)
class Card:
    id: int
    user_id: str
    session_id: str | None
    summary: str
    keywords: str
    created_at: str
    first_event_id: int | None
    last_event_id: int | None
    level: int = 0
    is_extractive: bool = False


@dataclass(frozen=True)
class DiaryEntry:
    id: int
    session_id: str
    entry: str
    created_at: str
    is_extractive: bool = False


@dataclass(frozen=True)
class FactWrite:
    action: WriteAction
    fact_id: int | None


def _normalise_value(value: str) -> str:
    return " ".join(value.split()).casefold()


def _log(con: apsw.Connection, user_id: str, kind: str, owner_id: str | int, action: str,
         old: str | None, new: str | None, worker: str, source_event_id: int | None,
         now: str) -> None:
    con.execute(
        "INSERT INTO memory_log (user_id, owner_kind, owner_id, action, old_value, new_value, "
        "source_event_id, worker, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user_id, kind, str(owner_id), action, old, new, source_event_id, worker, now),
    )


def _check_text(name: str, value: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidMemory(f"{name} must be non-empty text")
    value = " ".join(value.split()) if name != "value" else value.strip()
    if len(value) > limit:
        raise InvalidMemory(f"{name} is {len(value)} characters; at most {limit} are allowed")
    return value


# -- profile -------------------------------------------------------------------------------


def set_profile(
    con: apsw.Connection,
    user_id: str,
    key: str,
    value: str,
    *,
    source: str,
    worker: str,
    source_event_id: int | None = None,
) -> WriteAction:
    """Upsert one profile key. A key the user deleted is not re-created by a worker."""
    key = _check_text("key", key, 100).casefold()
    value = _check_text("value", value, 2000)
    now = utc_now()
    row = con.execute(
        "SELECT value, deleted_at FROM profile WHERE user_id = ? AND key = ?", (user_id, key)
    ).fetchone()
    if row is None:
        con.execute(
            "INSERT INTO profile (user_id, key, value, source, source_event_id, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (user_id, key, value, source, source_event_id, now, now),
        )
        _log(con, user_id, "profile", key, "insert", None, value, worker, source_event_id, now)
        return "insert"
    old_value, deleted_at = row
    if deleted_at is not None and source != "user":
        return "tombstoned"
    if deleted_at is None and _normalise_value(old_value) == _normalise_value(value):
        return "unchanged"
    con.execute(
        "UPDATE profile SET value = ?, source = ?, source_event_id = ?, updated_at = ?, "
        "deleted_at = NULL WHERE user_id = ? AND key = ?",
        (value, source, source_event_id, now, user_id, key),
    )
    action = "restore" if deleted_at is not None else "update"
    _log(con, user_id, "profile", key, action, None if deleted_at else old_value, value,
         worker, source_event_id, now)
    return "update"


def delete_profile(con: apsw.Connection, user_id: str, key: str, *, worker: str = "user") -> bool:
    """Tombstone a profile key; returns False when there was nothing to delete."""
    key = key.strip().casefold()
    now = utc_now()
    row = con.execute(
        "SELECT value FROM profile WHERE user_id = ? AND key = ? AND deleted_at IS NULL",
        (user_id, key),
    ).fetchone()
    if row is None:
        return False
    con.execute("UPDATE profile SET deleted_at = ?, updated_at = ? WHERE user_id = ? AND key = ?",
                (now, now, user_id, key))
    _log(con, user_id, "profile", key, "delete", row[0], None, worker, None, now)
    return True


def list_profile(con: apsw.Connection, user_id: str) -> list[ProfileEntry]:
    return [
        ProfileEntry(*row)
        for row in con.execute(
            "SELECT key, value, source, updated_at, source_event_id FROM profile "
            "WHERE user_id = ? AND deleted_at IS NULL ORDER BY key",
            (user_id,),
        )
    ]


def profile_as_of(con: apsw.Connection, user_id: str, when: str) -> dict[str, str]:
    """What the profile said at time `when` (RFC 3339), replayed from memory_log."""
    state: dict[str, str] = {}
    for key, action, new_value in con.execute(
        "SELECT owner_id, action, new_value FROM memory_log WHERE user_id = ? AND "
        "owner_kind = 'profile' AND created_at <= ? ORDER BY id",
        (user_id, when),
    ):
        if action == "delete":
            state.pop(key, None)
        else:
            state[key] = new_value
    return dict(sorted(state.items()))


# -- facts ---------------------------------------------------------------------------------

_FACT_COLUMNS = (
    "id, user_id, category, key, value, source, created_at, updated_at, importance, "
    "source_event_id, superseded_at, deleted_at, access_count"
)


def _fact(row: tuple) -> Fact:
    return Fact(*row)


def current_fact(con: apsw.Connection, user_id: str, category: str, key: str) -> Fact | None:
    row = con.execute(
        f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? AND category = ? AND key = ? "
        "AND superseded_at IS NULL",
        (user_id, category, key),
    ).fetchone()
    return _fact(row) if row else None


def upsert_fact(
    con: apsw.Connection,
    user_id: str,
    category: str,
    key: str,
    value: str,
    *,
    source: str,
    worker: str,
    source_event_id: int | None = None,
    importance: float = 0.5,
) -> FactWrite:
    """One current fact per (user, category, key).

    Same value → unchanged; a new value supersedes the current row (kept, with
    superseded_at and superseded_by); a tombstoned key is left alone unless the user
    sets it again.
    """
    if category not in CATEGORIES:
        raise InvalidMemory(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    if source not in SOURCES:
        raise InvalidMemory(f"source must be agent or user, got {source!r}")
    key = _check_text("key", key, 200).casefold()
    value = _check_text("value", value, 2000)
    importance = min(1.0, max(0.0, float(importance)))
    now = utc_now()
    current = current_fact(con, user_id, category, key)
    if current is not None:
        if current.deleted_at is not None and source != "user":
            return FactWrite("tombstoned", None)
        if current.deleted_at is None and _normalise_value(current.value) == _normalise_value(value):
            con.execute("UPDATE facts SET updated_at = ?, importance = max(importance, ?) "
                        "WHERE id = ?", (now, importance, current.id))
            return FactWrite("unchanged", current.id)
        con.execute("UPDATE facts SET superseded_at = ? WHERE id = ?", (now, current.id))
    con.execute(
        "INSERT INTO facts (user_id, category, key, value, source, source_event_id, created_at, "
        "updated_at, importance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user_id, category, key, value, source, source_event_id, now, now, importance),
    )
    fact_id = con.last_insert_rowid()
    if current is None:
        _log(con, user_id, "fact", fact_id, "insert", None, value, worker, source_event_id, now)
        return FactWrite("insert", fact_id)
    con.execute("UPDATE facts SET superseded_by = ? WHERE id = ?", (fact_id, current.id))
    old = None if current.deleted_at else current.value
    _log(con, user_id, "fact", fact_id, "supersede", old, value, worker, source_event_id, now)
    return FactWrite("supersede", fact_id)


def delete_fact(con: apsw.Connection, user_id: str, fact_id: int, *, worker: str = "user") -> bool:
    """Tombstone a current fact. Returns False when the user has no such current fact."""
    row = con.execute(
        "SELECT value FROM facts WHERE id = ? AND user_id = ? AND superseded_at IS NULL "
        "AND deleted_at IS NULL",
        (fact_id, user_id),
    ).fetchone()
    if row is None:
        return False
    now = utc_now()
    con.execute("UPDATE facts SET deleted_at = ?, updated_at = ? WHERE id = ?", (now, now, fact_id))
    _log(con, user_id, "fact", fact_id, "delete", row[0], None, worker, None, now)
    return True


def get_fact(con: apsw.Connection, user_id: str, fact_id: int) -> Fact | None:
    row = con.execute(f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ? AND user_id = ?",
                      (fact_id, user_id)).fetchone()
    return _fact(row) if row else None


def list_facts(
    con: apsw.Connection,
    user_id: str,
    *,
    category: str | None = None,
    limit: int | None = None,
    include_history: bool = False,
) -> list[Fact]:
    """Current facts (or every version, with include_history), most recent first."""
    where = ["user_id = ?"]
    params: list = [user_id]
    if not include_history:
        where.append("superseded_at IS NULL AND deleted_at IS NULL")
    if category:
        where.append("category = ?")
        params.append(category)
    sql = f"SELECT {_FACT_COLUMNS} FROM facts WHERE {' AND '.join(where)} ORDER BY updated_at DESC, id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [_fact(row) for row in con.execute(sql, params)]


def facts_by_ids(con: apsw.Connection, user_id: str, ids: list[int]) -> list[Fact]:
    """Current facts with these ids, in the order given."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    found = {
        row[0]: _fact(row)
        for row in con.execute(
            # "+user_id": look rows up by id; the user index would walk all their facts.
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE +user_id = ? AND id IN ({marks}) "
            "AND superseded_at IS NULL AND deleted_at IS NULL",
            (user_id, *ids),
        )
    }
    return [found[i] for i in ids if i in found]


def facts_as_of(con: apsw.Connection, user_id: str, when: str) -> list[Fact]:
    """The facts that were current at time `when` (RFC 3339)."""
    return [
        _fact(row)
        for row in con.execute(
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? AND created_at <= ? "
            "AND (superseded_at IS NULL OR superseded_at > ?) "
            "AND (deleted_at IS NULL OR deleted_at > ?) ORDER BY category, key",
            (user_id, when, when, when),
        )
    ]


def fact_history(con: apsw.Connection, user_id: str, fact_id: int) -> list[dict]:
    """Why do you know that: every logged change to this fact's (category, key)."""
    fact = get_fact(con, user_id, fact_id)
    if fact is None:
        return []
    ids = [str(r[0]) for r in con.execute(
        "SELECT id FROM facts WHERE user_id = ? AND category = ? AND key = ?",
        (user_id, fact.category, fact.key))]
    marks = ",".join("?" * len(ids))
    cols = ("owner_id", "action", "old_value", "new_value", "source_event_id", "worker",
            "created_at")
    return [dict(zip(cols, row)) for row in con.execute(
        f"SELECT {', '.join(cols)} FROM memory_log WHERE user_id = ? AND owner_kind = 'fact' "
        f"AND owner_id IN ({marks}) ORDER BY id", (user_id, *ids))]


# -- cards and diary -------------------------------------------------------------------------

_CARD_COLUMNS = ("id, user_id, session_id, summary, keywords, created_at, first_event_id, "
                 "last_event_id, level, is_extractive")


def _card(row: tuple) -> Card:
    *head, is_extractive = row
    return Card(*head, is_extractive=bool(is_extractive))


def list_cards(con: apsw.Connection, user_id: str, *, limit: int | None = None) -> list[Card]:
    """Cards not folded into a higher-level card, most recent first."""
    sql = (f"SELECT {_CARD_COLUMNS} FROM context_cards WHERE user_id = ? AND folded_into IS NULL "
           "ORDER BY created_at DESC, id DESC")
    params: tuple = (user_id,)
    if limit is not None:
        sql += " LIMIT ?"
        params += (limit,)
    return [_card(row) for row in con.execute(sql, params)]


def cards_by_ids(con: apsw.Connection, user_id: str, ids: list[int]) -> list[Card]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    found = {row[0]: _card(row) for row in con.execute(
        f"SELECT {_CARD_COLUMNS} FROM context_cards WHERE +user_id = ? AND id IN ({marks})",
        (user_id, *ids))}
    return [found[i] for i in ids if i in found]


def last_diary(con: apsw.Connection, user_id: str, *, exclude_session: str | None = None,
               limit: int = 1) -> list[DiaryEntry]:
    return [
        DiaryEntry(row[0], row[1], row[2], row[3], bool(row[4]))
        for row in con.execute(
            "SELECT id, session_id, entry, created_at, is_extractive FROM diary "
            "WHERE user_id = ? AND session_id IS NOT ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (user_id, exclude_session, limit),
        )
    ]


@dataclass(frozen=True)
class SessionInfo:
    id: str
    started_at: str
    last_event_at: str
    ended_at: str | None
    events: int


def list_sessions(con: apsw.Connection, user_id: str, *, limit: int = 100) -> list[SessionInfo]:
    return [
        SessionInfo(*row)
        for row in con.execute(
            "SELECT s.id, s.started_at, s.last_event_at, s.ended_at, "
            "(SELECT count(*) FROM events e WHERE e.user_id = s.user_id AND e.session_id = s.id) "
            "FROM sessions s WHERE s.user_id = ? ORDER BY s.last_event_at DESC LIMIT ?",
            (user_id, limit),
        )
    ]


def end_session(con: apsw.Connection, user_id: str, session_id: str) -> bool:
    """Mark a session ended (its diary is then due). False if unknown or already ended."""
    con.execute("UPDATE sessions SET ended_at = ? WHERE user_id = ? AND id = ? AND ended_at IS NULL",
                (utc_now(), user_id, session_id))
    return con.changes() > 0
