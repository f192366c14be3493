"""Provenance: whose hand each stored row and context layer is (`is_outside`, the one rule
of docs/trust.md, *The rules*), and each change to a profile key, fact, card or diary
entry (memory_log).

Every write path states its provenance through `is_outside`: a row is the owner's only
when the owner's own hand wrote it — the person's message as typed, the CLI at the
machine, the memory page signed in as that user — or Hilo made it from nothing but the
owner's; anything else, and a write that states nothing, is content from outside (the
schema's default too, migrations/0021_provenance_by_default.sql).

The write functions of this package record their change in memory_log in the same
transaction as the change itself, once per change, so the log and the rows never
disagree; nothing outside the package writes memory_log. "Why do you know that?",
`as_of` queries and undo all read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import apsw

__all__ = ["Hand", "HANDS", "is_outside", "WriteAction", "OwnerKind", "LoggedAction", "said_at",
           "said_earlier", "log_change", "log_deletions", "memory_generation", "retractions_since"]

# Whose hand a write is. "owner": the person's own (a message as typed, the CLI at the
# machine, the memory page signed in as them); "hilo": what Hilo makes (a model's reply,
# what learning derives, its own tools' results); "outside": anyone else's (a client's
# history, the HTTP memory API and MCP, an import, a web page, a client's tool).
Hand = Literal["owner", "hilo", "outside"]
HANDS: tuple[str, ...] = ("owner", "hilo", "outside")


def is_outside(hand: Hand | None = None, *, reading: Iterable[bool] | bool = ()) -> bool:
    """Whether what `hand` writes is content from outside: always for "outside" (and when
    no hand is stated); for the owner's hand and Hilo's, when anything it quotes, was
    made from or was written while reading (`reading`: each such item's own answer) is.
    """
    if hand not in ("owner", "hilo"):
        return True
    return reading if isinstance(reading, bool) else any(reading)


# What a write did, as the write functions report it to their callers.
# "history": a worker's statement older than the current value's, kept behind it.
WriteAction = Literal["insert", "update", "supersede", "unchanged", "tombstoned", "history"]
OwnerKind = Literal["profile", "fact", "card", "diary"]
# What memory_log records (its CHECK constraint).
LoggedAction = Literal["insert", "update", "supersede", "delete", "restore"]


def said_at(con: apsw.Connection, source_event_id: int | None,
            written_at: str | None = None) -> tuple[str, int] | None:
    """When a statement was made: its source message's (created_at, id), else (for a row
    with none, such as the user's own edit) when it was written; None when unknown."""
    if source_event_id is not None:
        row = con.execute("SELECT created_at, id FROM events WHERE id = ?",
                          (source_event_id,)).fetchone()
        if row is not None:
            return row[0], row[1]
    return (written_at, 2**63) if written_at is not None else None


def said_earlier(con: apsw.Connection, source_event_id: int | None,
                 current: tuple[str, int] | None) -> bool:
    """Whether a statement from `source_event_id` was made before the current value's
    (`current`, said_at): learning may reach an older chunk after a newer turn, and what
    was said first must not replace what was said since."""
    new = said_at(con, source_event_id) if source_event_id is not None else None
    return new is not None and current is not None and new < current


def log_change(con: apsw.Connection, user_id: str, kind: OwnerKind, owner_id: str | int,
               action: LoggedAction, old: str | None, new: str | None, *, worker: str,
               created_at: str, source_event_id: int | None = None) -> None:
    con.execute(
        "INSERT INTO memory_log (user_id, owner_kind, owner_id, action, old_value, new_value, "
        "source_event_id, worker, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user_id, kind, str(owner_id), action, old, new, source_event_id, worker, created_at),
    )


def log_deletions(con: apsw.Connection, rows: str, *, worker: str, created_at: str,
                  params: tuple = ()) -> None:
    """Log as deleted the rows `rows` (with `params`) selects as (user_id, kind, owner_id,
    old_value)."""
    # as_of queries replay memory_log, so a row cleared in bulk must be logged gone.
    con.execute(
        "INSERT INTO memory_log (user_id, owner_kind, owner_id, action, old_value, new_value, "
        f"worker, created_at) SELECT user_id, kind, owner_id, 'delete', old_value, NULL, ?, ? "
        f"FROM ({rows})", (worker, created_at, *params))


# A change that takes back or corrects what a prompt may already show: a delete or
# forget by anyone, a restore, and any change but an addition by the user. (A worker's
# new fact or newer value is news a later turn's recall finds; it retracts nothing.)
_RETRACTION = "(action IN ('delete', 'restore') OR (worker = 'user' AND action != 'insert'))"


def memory_generation(con: apsw.Connection) -> int:
    """Where memory stands: every change bumps it, in the change's own transaction, from
    any process. A prompt built at one generation asks `retractions_since` whether what it
    shows still holds."""
    return con.execute("SELECT coalesce(max(id), 0) FROM memory_log").fetchone()[0]


def retractions_since(con: apsw.Connection, user_id: str,
                      generation: int) -> list[tuple[str, str, str]]:
    """The changes since `generation` that took back or corrected some of the user's
    memory (a fact forgotten or corrected, a profile key deleted): a prompt built before
    them may show what is no longer true. (owner kind, owner id, when), oldest first."""
    # Only the log's rows since then are read, a range of its primary key (`+user_id`:
    # not the owner index, which would read all of the user's rows).
    return [tuple(row) for row in con.execute(
        "SELECT owner_kind, owner_id, created_at FROM memory_log WHERE id > ? AND +user_id = ? "
        f"AND {_RETRACTION} ORDER BY id", (generation, user_id))]
