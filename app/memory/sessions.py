"""Sessions as the memory API shows them, and the end of one (its diary is then due)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.timeutil import utc_now


@dataclass(frozen=True)
class SessionInfo:
    id: str
    started_at: str
    last_event_at: str
    ended_at: str | None
    events: int
    from_outside: bool = True  # it holds content from outside (app/memory/provenance.py)


def list_sessions(con: apsw.Connection, user_id: str, *, limit: int = 100) -> list[SessionInfo]:
    return [
        SessionInfo(*row[:5], from_outside=bool(row[5]))
        for row in con.execute(
            "SELECT s.id, s.started_at, s.last_event_at, s.ended_at, "
            "(SELECT count(*) FROM events e WHERE e.user_id = s.user_id AND e.session_id = s.id), "
            "s.from_outside "
            "FROM sessions s WHERE s.user_id = ? ORDER BY s.last_event_at DESC LIMIT ?",
            (user_id, limit),
        )
    ]


# Each table's users, one index seek per user (a loose index scan), however many rows.
_USERS_SQL = ("WITH RECURSIVE u(id) AS (SELECT min(user_id) FROM {table} UNION ALL "
              "SELECT (SELECT min(user_id) FROM {table} WHERE user_id > u.id) FROM u "
              "WHERE u.id IS NOT NULL) SELECT id FROM u WHERE id IS NOT NULL")


def known_users(con: apsw.Connection) -> list[str]:
    """Every user Hilo keeps memory for (a session, a fact or a profile key), sorted."""
    return sorted({row[0] for table in ("sessions", "facts", "profile")
                   for row in con.execute(_USERS_SQL.format(table=table))})


def session_exists(con: apsw.Connection, user_id: str, session_id: str) -> bool:
    return con.execute("SELECT 1 FROM sessions WHERE user_id = ? AND id = ?",
                       (user_id, session_id)).fetchone() is not None


def end_session(con: apsw.Connection, user_id: str, session_id: str) -> bool:
    """Mark a session ended (its diary is then due). False if unknown or already ended."""
    con.execute("UPDATE sessions SET ended_at = ? WHERE user_id = ? AND id = ? AND ended_at IS NULL",
                (utc_now(), user_id, session_id))
    return con.changes() > 0
