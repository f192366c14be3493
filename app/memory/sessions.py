"""Sessions as the memory API shows them, and the end of one (its diary is then due)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.timeutil import utc_now

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
