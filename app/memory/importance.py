"""Importance decay: what is not read fades, down to a floor, never to nothing."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

__all__ = ["ImportanceFloors", "decay_unread_importance", "add_reads"]


@dataclass(frozen=True)
class ImportanceFloors:
    """How low decay may take an item's importance (consolidation's policy)."""

    protected_categories: tuple[str, ...]  # facts of these never drop below `protected`
    frequently_read: int  # access_count from which a fact counts as protected too
    protected: float
    read: float  # read at least once
    unread: float


def decay_unread_importance(con: apsw.Connection, *, factor: float, since: str,
                            floors: ImportanceFloors) -> int:
    """Multiply by `factor` the importance of current facts and unfolded cards not read
    since `since`, never below their floor (nor raising one already below it); returns
    the rows touched. Not logged: importance is a ranking weight, not a memory's content."""
    protected = ",".join(f":category{n}" for n in range(len(floors.protected_categories)))
    categories = {f"category{n}": c for n, c in enumerate(floors.protected_categories)}
    con.execute(
        "UPDATE facts SET importance = max(importance * :factor, min(importance, CASE "
        f"WHEN category IN ({protected}) OR access_count >= :frequent THEN :protected "
        "WHEN access_count > 0 THEN :read ELSE :unread END)) "
        "WHERE superseded_at IS NULL AND deleted_at IS NULL "
        "AND (last_accessed_at IS NULL OR last_accessed_at < :since)",
        {"factor": factor, "frequent": floors.frequently_read, "protected": floors.protected,
         "read": floors.read, "unread": floors.unread, "since": since, **categories})
    changed = con.changes()
    con.execute(
        "UPDATE context_cards SET importance = max(importance * :factor, min(importance, CASE "
        "WHEN access_count > 0 THEN :read ELSE :unread END)) "
        "WHERE folded_into IS NULL AND (last_accessed_at IS NULL OR last_accessed_at < :since)",
        {"factor": factor, "read": floors.read, "unread": floors.unread, "since": since})
    return changed + con.changes()


def add_reads(con: apsw.Connection, user_id: str, kind: str,
              reads: dict[int, tuple[int, str]]) -> int:
    """Count recalls of the user's facts or cards (`kind` "fact" or "card"): each id's
    (times recalled, when last), added to access_count and last_accessed_at. Not
    logged: how often an item is read is a ranking weight, not what it says. Returns
    the rows touched (items forgotten or folded since are simply not there)."""
    table = {"fact": "facts", "card": "context_cards"}[kind]
    touched = 0
    for item_id, (times, last) in sorted(reads.items()):
        con.execute(f"UPDATE {table} SET access_count = access_count + ?, "
                    "last_accessed_at = max(coalesce(last_accessed_at, ''), ?) "
                    "WHERE id = ? AND user_id = ?", (times, last, item_id, user_id))
        touched += con.changes()
    return touched
