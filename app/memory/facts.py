"""Layer 4, dated facts: one current row per (user, category, key).

Facts are never overwritten: a changed value supersedes the current row, which is kept
(superseded_at, superseded_by) as history. A fact the user deleted is tombstoned
(deleted_at) and stays current, so its key stays taken: no worker or import re-creates
it, only the user setting it again. New statements of a fact arrive through
`store_fact` (app/memory/dedupe.py), which applies the dedupe policy first.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Literal, get_args

import apsw

from app.memory.corrections import mark_corrected
from app.memory.provenance import WriteAction, log_change, log_deletions, said_at, said_earlier
from app.memory.validation import (
    InvalidMemory,
    check_entry,
    check_source,
    normalise_key,
    same_value,
)
from app.timeutil import utc_now

__all__ = ["Category", "CATEGORIES", "KEY_CHARS", "VALUE_CHARS", "Fact", "FactWrite", "FactRecord",
           "check_fact", "upsert_fact", "delete_fact", "value_hash", "FORGOTTEN_KEY_PREFIX",
           "forgotten_key", "forget_old_keys", "is_forgotten", "merge_facts", "import_fact",
           "link_superseded_fact", "clear_agent_facts", "restore_user_facts", "current_fact",
           "get_fact", "list_facts", "facts_by_ids", "facts_as_of", "fact_history"]

Category = Literal["fact", "decision", "solution", "preference", "conversation"]
CATEGORIES: tuple[str, ...] = get_args(Category)
KEY_CHARS = 200
VALUE_CHARS = 2000


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
    from_outside: bool = False  # learned from, or written while reading, outside content

    @property
    def date(self) -> str:
        """The day the fact was last stated, as shown in the context."""
        return self.updated_at[:10]


@dataclass(frozen=True)
class FactWrite:
    action: WriteAction
    fact_id: int | None


@dataclass(frozen=True)
class FactRecord:
    """A fact from another memory, every column as it was there (cleaned, dates kept)."""

    category: str
    key: str
    value: str
    source: str
    source_event_id: int | None
    created_at: str
    updated_at: str
    superseded_at: str | None = None
    deleted_at: str | None = None
    importance: float = 0.5
    access_count: int = 0
    last_accessed_at: str | None = None
    forgotten_hash: str | None = None  # a forgotten fact's tombstone (value_hash), value ""


_FACT_COLUMNS = (
    "id, user_id, category, key, value, source, created_at, updated_at, importance, "
    "source_event_id, superseded_at, deleted_at, access_count, from_outside"
)


def _fact(row: tuple) -> Fact:
    *head, from_outside = row
    return Fact(*head, from_outside=bool(from_outside))


def check_fact(category: str, source: str, key: str, value: str) -> tuple[str, str]:
    """The (key, value) to store; InvalidMemory says what is wrong with them."""
    if category not in CATEGORIES:
        raise InvalidMemory(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    check_source(source)
    return check_entry(key, value, KEY_CHARS, VALUE_CHARS)


# -- writes --------------------------------------------------------------------------------


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
    from_outside: bool = True,
) -> FactWrite:
    """One current fact per (user, category, key), without the dedupe of `store_fact`.

    Same value → unchanged; a new value supersedes the current row (kept, with
    superseded_at and superseded_by); a worker's value said before the current one
    (its source message is older: an older chunk learned after a newer turn) is kept
    as history behind it ("history"); a tombstoned key is left alone unless the user
    sets it again. `from_outside` (app.memory.provenance.is_outside; unstated: outside):
    the statement is content from outside (an unchanged fact stays from outside only if
    every statement of it did).
    """
    key, value = check_fact(category, source, key, value)
    importance = min(1.0, max(0.0, float(importance)))
    now = utc_now()
    current = current_fact(con, user_id, category, key)
    if _stays_forgotten(con, user_id, category, key, current, value, source, source_event_id):
        return FactWrite("tombstoned", None)
    if current is not None:
        if current.deleted_at is None and same_value(current.value, value):
            con.execute("UPDATE facts SET updated_at = ?, importance = max(importance, ?), "
                        "from_outside = min(from_outside, ?) WHERE id = ?",
                        (now, importance, int(from_outside), current.id))
            return FactWrite("unchanged", current.id)
        current_said = said_at(con, current.source_event_id, current.created_at)
        if (current.deleted_at is None and source != "user"
                and said_earlier(con, source_event_id, current_said)):
            return _keep_as_history(con, user_id, category, key, value, current, current_said,
                                    source=source, worker=worker,
                                    source_event_id=source_event_id, importance=importance,
                                    from_outside=from_outside)
        con.execute("UPDATE facts SET superseded_at = ? WHERE id = ?", (now, current.id))
        if source == "user" and current.deleted_at is None:
            # The person's correction: what said the old value is recalled with the new one.
            mark_corrected(con, user_id, category, key, current.value, value, at=now)
    fact_id = _insert_fact(con, user_id=user_id, category=category, key=key, value=value,
                           source=source, source_event_id=source_event_id, created_at=now,
                           updated_at=now, importance=importance, from_outside=int(from_outside))
    if current is None:
        log_change(con, user_id, "fact", fact_id, "insert", None, value, worker=worker,
                   created_at=now, source_event_id=source_event_id)
        return FactWrite("insert", fact_id)
    con.execute("UPDATE facts SET superseded_by = ? WHERE id = ?", (fact_id, current.id))
    old = None if current.deleted_at else current.value
    log_change(con, user_id, "fact", fact_id, "supersede", old, value, worker=worker,
               created_at=now, source_event_id=source_event_id)
    return FactWrite("supersede", fact_id)


def _insert_fact(con: apsw.Connection, from_outside: int, **columns: object) -> int:
    """A new facts row (the one INSERT of this table), its id returned; whose hand it is
    is never left to the column's default."""
    con.execute(f"INSERT INTO facts (from_outside, {', '.join(columns)}) "
                f"VALUES (?, {', '.join('?' * len(columns))})", (from_outside, *columns.values()))
    return con.last_insert_rowid()


def _stays_forgotten(con: apsw.Connection, user_id: str, category: str, key: str,
                     current: Fact | None, value: str, source: str,
                     source_event_id: int | None) -> bool:
    """A forgotten key stays forgotten unless the person sets it again or a statement
    made after the forget says it."""
    if source == "user":
        return False
    if current is None:
        # A forgotten fact's tombstone keeps only hashes of its key and value (forget.py).
        forgotten = current_fact(con, user_id, category, forgotten_key(key))
        return forgotten is not None and not _a_new_statement(con, forgotten, value,
                                                               source_event_id)
    return current.deleted_at is not None and not _a_new_statement(con, current, value,
                                                                   source_event_id)


def _keep_as_history(con: apsw.Connection, user_id: str, category: str, key: str, value: str,
                     current: Fact, current_said: tuple[str, int] | None, *, source: str,
                     worker: str, source_event_id: int, importance: float,
                     from_outside: bool) -> FactWrite:
    """Store an older statement as the current fact's history: dated when it was said and
    superseded when the current value was (as import_fact keeps an older value)."""
    said = said_at(con, source_event_id)
    assert said is not None and current_said is not None  # said_earlier found both
    same = con.execute("SELECT id FROM facts WHERE user_id = ? AND category = ? AND key = ? "
                       "AND source_event_id = ? AND value = ?",
                       (user_id, category, key, source_event_id, value)).fetchone()
    if same is not None:  # learned again from the same message
        return FactWrite("unchanged", same[0])
    fact_id = _insert_fact(con, user_id=user_id, category=category, key=key, value=value,
                           source=source, source_event_id=source_event_id, created_at=said[0],
                           updated_at=said[0], superseded_at=max(said[0], current_said[0]),
                           superseded_by=current.id, importance=importance,
                           from_outside=int(from_outside))
    log_change(con, user_id, "fact", fact_id, "insert", None, value, worker=worker,
               created_at=utc_now(), source_event_id=source_event_id)
    return FactWrite("history", fact_id)


def delete_fact(con: apsw.Connection, user_id: str, fact_id: int, *, worker: str = "user") -> bool:
    """Tombstone a current fact. Returns False when the user has no such current fact."""
    row = con.execute(
        "SELECT value, category, key FROM facts WHERE id = ? AND user_id = ? "
        "AND superseded_at IS NULL AND deleted_at IS NULL",
        (fact_id, user_id),
    ).fetchone()
    if row is None:
        return False
    now = utc_now()
    con.execute("UPDATE facts SET deleted_at = ?, updated_at = ? WHERE id = ?", (now, now, fact_id))
    mark_corrected(con, user_id, row[1], row[2], row[0], None, at=now)
    log_change(con, user_id, "fact", fact_id, "delete", row[0], None, worker=worker, created_at=now)
    return True


def value_hash(value: str) -> str:
    """What a forgotten fact keeps of its value: enough to know the same statement again."""
    return hashlib.sha256(normalise_key(value).encode("utf-8")).hexdigest()


FORGOTTEN_KEY_PREFIX = "forgotten:"


def forgotten_key(key: str) -> str:
    """What a forgotten fact keeps of its key: a hash, enough to know the same key again
    (the key named what was forgotten, so it is forgotten too)."""
    if key.startswith(FORGOTTEN_KEY_PREFIX):
        return key
    return FORGOTTEN_KEY_PREFIX + hashlib.sha256(normalise_key(key).encode("utf-8")).hexdigest()


def forget_old_keys(con: apsw.Connection) -> int:
    """Hash the keys forgotten facts kept before keys were forgotten too (rebuild); returns
    how many."""
    rows = list(con.execute("SELECT id, key FROM facts WHERE forgotten_hash IS NOT NULL "
                            "AND key NOT LIKE ?", (FORGOTTEN_KEY_PREFIX + "%",)))
    for fact_id, key in rows:
        con.execute("UPDATE facts SET key = ? WHERE id = ?", (forgotten_key(key), fact_id))
    return len(rows)


def is_forgotten(con: apsw.Connection, fact: Fact) -> bool:
    """Whether `fact` is the tombstone `forget_fact` leaves."""
    row = con.execute("SELECT forgotten_hash FROM facts WHERE id = ?", (fact.id,)).fetchone()
    return row is not None and row[0] is not None


def _a_new_statement(con: apsw.Connection, tombstone: Fact, value: str,
                     source_event_id: int | None) -> bool:
    """Whether a worker's statement under a forgotten key is new: another value, said in
    a message after the forget. A plain tombstone (delete_fact) takes nothing back."""
    row = con.execute("SELECT forgotten_hash FROM facts WHERE id = ?", (tombstone.id,)).fetchone()
    if row is None or row[0] in (None, value_hash(value)) or source_event_id is None:
        return False
    said = con.execute("SELECT created_at FROM events WHERE id = ?", (source_event_id,)).fetchone()
    return said is not None and said[0] > (tombstone.deleted_at or "")


def merge_facts(con: apsw.Connection, user_id: str, survivor_id: int, duplicate_ids: list[int],
                *, worker: str) -> int:
    """Supersede each duplicate by the survivor, which takes their importance and reads.

    Returns how many were merged; rows no longer current (or a survivor that is not)
    are left alone, so a plan made outside the transaction is safe to apply.
    """
    current = "superseded_at IS NULL AND deleted_at IS NULL"
    survivor = con.execute(f"SELECT value FROM facts WHERE id = ? AND user_id = ? AND {current}",
                           (survivor_id, user_id)).fetchone()
    if survivor is None:
        return 0
    now = utc_now()
    merged = 0
    for duplicate_id in duplicate_ids:
        row = con.execute(f"SELECT value, importance, access_count FROM facts WHERE id = ? "
                          f"AND user_id = ? AND {current}", (duplicate_id, user_id)).fetchone()
        if row is None:
            continue
        con.execute("UPDATE facts SET superseded_at = ?, superseded_by = ? WHERE id = ?",
                    (now, survivor_id, duplicate_id))
        con.execute("UPDATE facts SET importance = max(importance, ?), "
                    "access_count = access_count + ? WHERE id = ?", (row[1], row[2], survivor_id))
        log_change(con, user_id, "fact", duplicate_id, "supersede", row[0], survivor[0],
                   worker=worker, created_at=now)
        merged += 1
    return merged


def import_fact(con: apsw.Connection, user_id: str, record: FactRecord, *, worker: str) -> FactWrite:
    """Merge a fact from another memory, its dates kept; what an import brings is from
    outside.

    The same row (category, key, time and value) → unchanged. Against the current fact
    of its key: a tombstone here wins ("tombstoned": an import never brings it back);
    the same value is unchanged; a newer value supersedes it ("supersede"); an older
    one is stored as its history ("insert", already superseded). The log is dated
    when the fact was stated.
    """
    if record.forgotten_hash is not None:  # an export made before keys were forgotten too
        record = replace(record, key=forgotten_key(record.key))
    row = con.execute("SELECT id FROM facts WHERE user_id = ? AND category = ? AND key = ? "
                      "AND created_at = ? AND value = ?",
                      (user_id, record.category, record.key, record.created_at,
                       record.value)).fetchone()
    if row is not None:
        return FactWrite("unchanged", row[0])
    current = con.execute("SELECT id, value, created_at, updated_at, deleted_at FROM facts "
                          "WHERE user_id = ? AND category = ? AND key = ? AND superseded_at IS NULL",
                          (user_id, record.category, record.key)).fetchone()
    superseded_at, superseded_by = record.superseded_at, None
    if superseded_at is None and current is not None:
        current_id, current_value, current_created, current_updated, current_deleted = current
        if current_deleted is not None:
            return FactWrite("tombstoned", None)
        if record.deleted_at is None and same_value(current_value, record.value):
            return FactWrite("unchanged", current_id)
        if record.updated_at >= current_updated:
            # The imported value is newer: it supersedes the one here, which is kept.
            con.execute("UPDATE facts SET superseded_at = ? WHERE id = ?",
                        (max(record.created_at, current_created), current_id))
            fact_id = _insert_record(con, user_id, record, None, None)
            con.execute("UPDATE facts SET superseded_by = ? WHERE id = ?", (fact_id, current_id))
            log_change(con, user_id, "fact", fact_id, "supersede", current_value, record.value,
                       worker=worker, created_at=record.created_at)
            return FactWrite("supersede", fact_id)
        # The value here is newer: keep the imported one as its history.
        superseded_at, superseded_by = max(record.created_at, current_created), current_id
    fact_id = _insert_record(con, user_id, record, superseded_at, superseded_by)
    log_change(con, user_id, "fact", fact_id, "insert", None, record.value, worker=worker,
               created_at=record.created_at)
    return FactWrite("insert", fact_id)


def _insert_record(con: apsw.Connection, user_id: str, r: FactRecord, superseded_at: str | None,
                   superseded_by: int | None) -> int:
    return _insert_fact(con, user_id=user_id, category=r.category, key=r.key, value=r.value,
                        source=r.source, source_event_id=r.source_event_id,
                        created_at=r.created_at, updated_at=r.updated_at,
                        superseded_at=superseded_at, superseded_by=superseded_by,
                        deleted_at=r.deleted_at, importance=r.importance,
                        access_count=r.access_count, last_accessed_at=r.last_accessed_at,
                        forgotten_hash=r.forgotten_hash, from_outside=1)


def link_superseded_fact(con: apsw.Connection, fact_id: int, superseded_by: int) -> None:
    """Record which fact superseded this one, unless that is already known (imports link
    rows once every record is stored)."""
    con.execute("UPDATE facts SET superseded_by = ? WHERE id = ? AND superseded_by IS NULL",
                (superseded_by, fact_id))


def clear_agent_facts(con: apsw.Connection, *, worker: str) -> int:
    """Delete every user's agent-derived facts (rebuild); the user's facts and tombstones stay."""
    log_deletions(con, "SELECT user_id, 'fact' AS kind, id AS owner_id, value AS old_value "
                  "FROM facts WHERE source = 'agent' AND deleted_at IS NULL "
                  "AND superseded_at IS NULL", worker=worker, created_at=utc_now())
    con.execute("DELETE FROM facts WHERE source = 'agent' AND deleted_at IS NULL")
    return con.changes()


def restore_user_facts(con: apsw.Connection, *, worker: str) -> int:
    """Make current again the user's latest fact of each key left without a current fact
    (after clear_agent_facts removed what had superseded it); returns how many."""
    now = utc_now()
    restored = list(con.execute(
        "SELECT f.id, f.user_id, f.value FROM facts f WHERE f.superseded_at IS NOT NULL "
        "AND f.source = 'user' AND f.deleted_at IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM facts c WHERE c.user_id = f.user_id AND "
        "c.category = f.category AND c.key = f.key AND c.superseded_at IS NULL) "
        "AND f.id = (SELECT max(o.id) FROM facts o WHERE o.user_id = f.user_id AND "
        "o.category = f.category AND o.key = f.key)"))
    for fact_id, user_id, value in restored:
        con.execute("UPDATE facts SET superseded_at = NULL, superseded_by = NULL WHERE id = ?",
                    (fact_id,))
        log_change(con, user_id, "fact", fact_id, "restore", None, value, worker=worker,
                   created_at=now)
    return len(restored)


# -- reads ---------------------------------------------------------------------------------


def current_fact(con: apsw.Connection, user_id: str, category: str, key: str) -> Fact | None:
    row = con.execute(
        f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? AND category = ? AND key = ? "
        "AND superseded_at IS NULL",
        (user_id, category, key),
    ).fetchone()
    return _fact(row) if row else None


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
    """Current facts (or every version, with include_history), most recent first. A
    forgotten fact is in neither: its key is part of what was forgotten."""
    where = ["user_id = ? AND forgotten_hash IS NULL"]
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
    """The facts that were current at time `when` (RFC 3339), as they were then: what
    happened to them later (superseded, deleted, stated again) is not shown; never a
    forgotten one, whose key is part of what was forgotten."""
    return [
        _as_it_was(_fact(row), when)
        for row in con.execute(
            f"SELECT {_FACT_COLUMNS} FROM facts WHERE user_id = ? AND forgotten_hash IS NULL "
            "AND created_at <= ? "
            "AND (superseded_at IS NULL OR superseded_at > ?) "
            "AND (deleted_at IS NULL OR deleted_at > ?) ORDER BY category, key",
            (user_id, when, when, when),
        )
    ]


def _as_it_was(fact: Fact, when: str) -> Fact:
    """`fact`, current at `when`, as it was then: not yet superseded nor deleted, and last
    stated when it was stored unless it was stated again before `when`."""
    stated = fact.updated_at if fact.updated_at <= when else fact.created_at
    return replace(fact, superseded_at=None, deleted_at=None, updated_at=stated)


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
    return [dict(zip(cols, row, strict=True)) for row in con.execute(
        f"SELECT {', '.join(cols)} FROM memory_log WHERE user_id = ? AND owner_kind = 'fact' "
        f"AND owner_id IN ({marks}) ORDER BY id", (user_id, *ids))]
