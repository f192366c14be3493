"""Provenance: each change to a profile key, fact, card or diary entry, in memory_log.

The write functions of this package record their change here in the same transaction
as the change itself, once per change, so the log and the rows never disagree; nothing
outside the package writes memory_log. "Why do you know that?", `as_of` queries and
undo all read it.
"""

from __future__ import annotations

from typing import Literal

import apsw

# What a write did, as the write functions report it to their callers.
WriteAction = Literal["insert", "update", "supersede", "unchanged", "tombstoned"]
OwnerKind = Literal["profile", "fact", "card", "diary"]
# What memory_log records (its CHECK constraint).
LoggedAction = Literal["insert", "update", "supersede", "delete", "restore"]


def log_change(con: apsw.Connection, user_id: str, kind: OwnerKind, owner_id: str | int,
               action: LoggedAction, old: str | None, new: str | None, *, worker: str,
               created_at: str, source_event_id: int | None = None) -> None:
    con.execute(
        "INSERT INTO memory_log (user_id, owner_kind, owner_id, action, old_value, new_value, "
        "source_event_id, worker, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user_id, kind, str(owner_id), action, old, new, source_event_id, worker, created_at),
    )


def log_deletions(con: apsw.Connection, rows: str, *, worker: str, created_at: str) -> None:
    """Log as deleted the rows `rows` selects as (user_id, kind, owner_id, old_value)."""
    # as_of queries replay memory_log, so a row cleared in bulk must be logged gone.
    con.execute(
        "INSERT INTO memory_log (user_id, owner_kind, owner_id, action, old_value, new_value, "
        f"worker, created_at) SELECT user_id, kind, owner_id, 'delete', old_value, NULL, ?, ? "
        f"FROM ({rows})", (worker, created_at))
