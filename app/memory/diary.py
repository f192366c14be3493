"""Layer 5, the diary: one entry per session (UNIQUE(user_id, session_id)), for continuity
across sessions. Writing a session's entry again replaces it; the log keeps the old one.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.memory.provenance import WriteAction, log_change, log_deletions
from app.timeutil import utc_now

__all__ = ["DiaryEntry", "add_diary_entry", "replace_extractive_diary", "import_diary_entry",
           "remove_diary_entries", "clear_diary", "last_diary"]


@dataclass(frozen=True)
class DiaryEntry:
    id: int
    session_id: str
    entry: str
    created_at: str
    is_extractive: bool = False
    from_outside: bool = False  # its session held outside content


def add_diary_entry(con: apsw.Connection, user_id: str, session_id: str, entry: str, *,
                    is_extractive: bool, worker: str, created_at: str | None = None,
                    from_outside: bool = True) -> WriteAction:
    """The session's entry, written or replacing the one it had: "insert" or "update".
    `from_outside` (app.memory.provenance.is_outside; unstated: outside): the entry is, or
    sums up, content from outside."""
    created_at = created_at or utc_now()
    old = con.execute("SELECT entry FROM diary WHERE user_id = ? AND session_id = ?",
                      (user_id, session_id)).fetchone()
    con.execute(
        "INSERT INTO diary (user_id, session_id, entry, is_extractive, created_at, from_outside) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id) DO UPDATE SET "
        "entry = excluded.entry, is_extractive = excluded.is_extractive, "
        "created_at = excluded.created_at, from_outside = excluded.from_outside",
        (user_id, session_id, entry, int(is_extractive), created_at, int(from_outside)))
    (diary_id,) = con.execute("SELECT id FROM diary WHERE user_id = ? AND session_id = ?",
                              (user_id, session_id)).fetchone()
    action = "update" if old is not None else "insert"
    log_change(con, user_id, "diary", diary_id, action, old[0] if old else None, entry,
               worker=worker, created_at=created_at)
    return action


def replace_extractive_diary(con: apsw.Connection, user_id: str, session_id: str, entry: str, *,
                             worker: str) -> bool:
    """The model's entry in place of one quoted without it; False if the session has none.
    The entry keeps its date."""
    row = con.execute("SELECT id, entry FROM diary WHERE user_id = ? AND session_id = ? "
                      "AND is_extractive = 1", (user_id, session_id)).fetchone()
    if row is None:
        return False
    con.execute("UPDATE diary SET entry = ?, is_extractive = 0 WHERE id = ?", (entry, row[0]))
    log_change(con, user_id, "diary", row[0], "update", row[1], entry, worker=worker,
               created_at=utc_now())
    return True


def import_diary_entry(con: apsw.Connection, user_id: str, session_id: str, entry: str, *,
                       is_extractive: bool, created_at: str, worker: str) -> WriteAction:
    """Merge an entry from another memory, its date kept: the newer entry wins. What an
    import brings is from outside."""
    row = con.execute("SELECT entry, created_at FROM diary WHERE user_id = ? AND session_id = ?",
                      (user_id, session_id)).fetchone()
    if row is not None and (row[0] == entry or created_at < row[1]):
        return "unchanged"
    return add_diary_entry(con, user_id, session_id, entry, is_extractive=is_extractive,
                           worker=worker, created_at=created_at, from_outside=True)


def remove_diary_entries(con: apsw.Connection, user_id: str, session_ids: list[str], *,
                         worker: str) -> int:
    """Delete the user's entries of the sessions `session_ids` (the diary job writes them
    again from what the sessions still hold); returns how many. The log keeps that each
    was there, not what it said."""
    if not session_ids:
        return 0
    rows = (f"SELECT id FROM diary WHERE user_id = ? AND session_id IN "
            f"({','.join('?' * len(session_ids))})")
    con.execute(f"UPDATE memory_log SET old_value = NULL, new_value = NULL WHERE user_id = ? "
                f"AND owner_kind = 'diary' AND owner_id IN (SELECT CAST(id AS TEXT) FROM "
                f"({rows}))", (user_id, user_id, *session_ids))
    log_deletions(con, f"SELECT ? AS user_id, 'diary' AS kind, id AS owner_id, "
                  f"NULL AS old_value FROM ({rows})", worker=worker, created_at=utc_now(),
                  params=(user_id, user_id, *session_ids))
    con.execute(f"DELETE FROM diary WHERE id IN ({rows})", (user_id, *session_ids))
    return con.changes()


def clear_diary(con: apsw.Connection, *, worker: str) -> int:
    """Delete every user's diary entries (rebuild)."""
    log_deletions(con, "SELECT user_id, 'diary' AS kind, id AS owner_id, entry AS old_value "
                  "FROM diary", worker=worker, created_at=utc_now())
    con.execute("DELETE FROM diary")
    return con.changes()


def last_diary(con: apsw.Connection, user_id: str, *, exclude_session: str | None = None,
               limit: int = 1) -> list[DiaryEntry]:
    return [
        DiaryEntry(row[0], row[1], row[2], row[3], bool(row[4]), bool(row[5]))
        for row in con.execute(
            "SELECT id, session_id, entry, created_at, is_extractive, from_outside FROM diary "
            "WHERE user_id = ? AND session_id IS NOT ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (user_id, exclude_session, limit),
        )
    ]
