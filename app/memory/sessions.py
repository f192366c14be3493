"""The sessions table: every write of it (a session opened by its events, imported, ended,
closed when idle) and how the memory API lists them."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.timeutil import utc_now

__all__ = ["TITLE_WORDS", "TITLE_CHARS", "SessionInfo", "session_title", "list_sessions",
           "known_users", "count_sessions", "session_exists", "end_session", "note_event",
           "merge_imported_session", "end_idle_sessions"]

# A session's title: the first words of what its user said first.
TITLE_WORDS = 8
TITLE_CHARS = 60


@dataclass(frozen=True)
class SessionInfo:
    id: str
    started_at: str
    last_event_at: str
    ended_at: str | None
    events: int
    from_outside: bool = True  # it holds content from outside (app/memory/provenance.py)
    user_id: str = ""
    title: str = ""  # the first words of its first user message (else of its first message)


def session_title(text: str | None) -> str:
    """The first words of `text`, as a title: at most TITLE_WORDS words, TITLE_CHARS
    characters, "…" where it was cut."""
    words = (text or "").split()
    title = " ".join(words[:TITLE_WORDS])
    if len(title) > TITLE_CHARS:
        title = title[:TITLE_CHARS - 1].rstrip()
    return title + ("…" if title != " ".join(words) else "")


# The start of the first message of the session said by `role` (any role for '%').
_FIRST_SAID = ("(SELECT substr(e.content, 1, 400) FROM events e WHERE e.id = (SELECT min(f.id) "
               "FROM events f WHERE f.user_id = s.user_id AND f.session_id = s.id "
               "AND f.role LIKE '{role}'))")


def list_sessions(con: apsw.Connection, user_id: str, *, limit: int = 100) -> list[SessionInfo]:
    """The user's sessions, the latest active first, each with its title."""
    return [
        SessionInfo(*row[:5], from_outside=bool(row[5]), user_id=user_id,
                    title=session_title(row[6] or row[7]))
        for row in con.execute(
            "SELECT s.id, s.started_at, s.last_event_at, s.ended_at, "
            "(SELECT count(*) FROM events e WHERE e.user_id = s.user_id AND e.session_id = s.id), "
            f"s.from_outside, {_FIRST_SAID.format(role='user')}, {_FIRST_SAID.format(role='%')} "
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


def count_sessions(con: apsw.Connection, user_id: str) -> int:
    return con.execute("SELECT count(*) FROM sessions WHERE user_id = ?", (user_id,)).fetchone()[0]


def session_exists(con: apsw.Connection, user_id: str, session_id: str) -> bool:
    return con.execute("SELECT 1 FROM sessions WHERE user_id = ? AND id = ?",
                       (user_id, session_id)).fetchone() is not None


def end_session(con: apsw.Connection, user_id: str, session_id: str) -> bool:
    """Mark a session ended (its diary is then due). False if unknown or already ended."""
    con.execute("UPDATE sessions SET ended_at = ? WHERE user_id = ? AND id = ? AND ended_at IS NULL",
                (utc_now(), user_id, session_id))
    return con.changes() > 0


def note_event(con: apsw.Connection, user_id: str, session_id: str, at: str,
               from_outside: bool) -> None:
    """A session has an event at `at`: opened if new, else its last event moved and its end
    undone. A session holds content from outside once one of its events does."""
    con.execute(
        "INSERT INTO sessions (user_id, id, started_at, last_event_at, from_outside) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id, id) DO UPDATE SET last_event_at = "
        "max(last_event_at, excluded.last_event_at), ended_at = NULL, "
        "from_outside = max(from_outside, excluded.from_outside)",
        (user_id, session_id, at, at, int(from_outside)))


def merge_imported_session(con: apsw.Connection, user_id: str, session_id: str,
                           title: str | None, started_at: str, last_event_at: str,
                           ended_at: str | None) -> None:
    """An imported session's row merged with this database's: the earlier start, the later
    last event, the title kept. What an import brings is from outside (its events made the
    row so already)."""
    con.execute(
        "INSERT INTO sessions (user_id, id, title, started_at, last_event_at, ended_at, "
        "from_outside) VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT (user_id, id) DO UPDATE SET "
        "title = coalesce(sessions.title, excluded.title), "
        "started_at = min(sessions.started_at, excluded.started_at), "
        "last_event_at = max(sessions.last_event_at, excluded.last_event_at), "
        # An ended session stays ended, unless this database has later events in it.
        "ended_at = CASE WHEN excluded.ended_at IS NULL "
        "OR max(sessions.last_event_at, excluded.last_event_at) > excluded.ended_at "
        "THEN sessions.ended_at ELSE coalesce(sessions.ended_at, excluded.ended_at) END",
        (user_id, session_id, title, started_at, last_event_at, ended_at))


def end_idle_sessions(con: apsw.Connection, idle_before: str, now: str) -> list[tuple[str, str]]:
    """End every open session whose last event is before `idle_before`; (user, session) of
    each ended."""
    idle = list(con.execute("SELECT user_id, id FROM sessions WHERE ended_at IS NULL "
                            "AND last_event_at <= ?", (idle_before,)))
    for user_id, session_id in idle:
        con.execute("UPDATE sessions SET ended_at = ? WHERE user_id = ? AND id = ? "
                    "AND ended_at IS NULL", (now, user_id, session_id))
    return idle
