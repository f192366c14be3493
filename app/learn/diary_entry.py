"""diary: a one–two sentence synthesis of a session, once it ends.

One entry per session (UNIQUE(user_id, session_id)). A session that is reopened and
ends again gets its entry rewritten; a run when the entry is newer than the session's
last event does nothing. Writing the entry also marks the session ended.

Degraded path (`extractive=True`): the entry quotes how the session began and ended
(is_extractive=1), and consolidate rewrites it when the model is back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from app.config import Config
from app.learn import extractive
from app.learn.model_output import DiaryOutput, ask_json, parse_output
from app.learn.quoting import learning_line
from app.learn.reading import reading
from app.memory import add_diary_entry, end_session, is_outside, replace_extractive_diary
from app.model.client import ModelClient
from app.model.replies import SentChat
from app.writer import Writer

__all__ = ["WORKER", "CONSOLIDATE_WORKER", "MAX_EVENT_CHARS", "MAX_PROMPT_CHARS", "DIARY_SCHEMA",
           "SYSTEM", "INSTRUCTIONS", "SessionText", "session_to_summarise", "build_prompt",
           "parse_entry", "extractive_entry", "write_diary", "rewrite_extractive_diary"]

WORKER = "diary"
# Rewriting an extractive entry is part of consolidation, and logged as its work.
CONSOLIDATE_WORKER = "consolidate"
MAX_EVENT_CHARS = 600
MAX_PROMPT_CHARS = 8000

DIARY_SCHEMA: dict[str, Any] = DiaryOutput.format_schema()
SYSTEM = "You keep a diary of an assistant's sessions with its user. Answer with JSON only."
INSTRUCTIONS = """\
Write a diary entry for this session in one or two sentences: what the user worked on,
what was decided or solved, and what was left open.

"""


@dataclass(frozen=True)
class SessionText:
    # (label, text, from outside), oldest first; earlier parts as card summaries.
    lines: list[tuple[str, str, bool]]
    first_at: str
    from_outside: bool = True  # the session holds content from outside


def session_to_summarise(con: apsw.Connection, user_id: str, session_id: str,
                         *, rewrite: bool = False) -> SessionText | None:
    """What the entry is written from; None when there are no events, or when the entry
    is newer than the last event (unless `rewrite`)."""
    row = con.execute(
        "SELECT s.started_at, s.last_event_at, d.created_at FROM sessions s LEFT JOIN diary d "
        "ON d.user_id = s.user_id AND d.session_id = s.id WHERE s.user_id = ? AND s.id = ?",
        (user_id, session_id)).fetchone()
    if row is None or (not rewrite and row[2] is not None and row[2] >= row[1]):
        return None
    lines = [("EARLIER", summary, bool(outside)) for summary, outside in con.execute(
        "SELECT summary, from_outside FROM context_cards WHERE user_id = ? AND session_id = ? "
        "AND level = 0 ORDER BY first_event_id", (user_id, session_id))]
    lines += [(role.upper(), content, bool(outside)) for role, content, outside in con.execute(
        "SELECT role, content, from_outside FROM events WHERE user_id = ? AND session_id = ? "
        "AND compacted = 0 AND role IN ('user', 'assistant', 'tool') AND superseded_by IS NULL "
        "ORDER BY id",
        (user_id, session_id))]
    if not lines:
        return None
    (outside,) = con.execute("SELECT from_outside FROM sessions WHERE user_id = ? AND id = ?",
                             (user_id, session_id)).fetchone()
    return SessionText(lines, row[0], is_outside(
        "hilo", reading=[bool(outside), *(quoted for *_, quoted in lines)]))


def build_prompt(session: SessionText) -> str:
    kept: list[str] = []
    used = 0
    for label, text, outside in reversed(session.lines):  # the end of a session matters most
        line = learning_line(label, label.lower(), text[:MAX_EVENT_CHARS], outside)
        if used + len(line) > MAX_PROMPT_CHARS and kept:
            break
        kept.append(line)
        used += len(line)
    return INSTRUCTIONS + "\n".join(reversed(kept))


def parse_entry(raw: dict | list, text: str = "") -> str:
    return parse_output(DiaryOutput, WORKER, raw, text).entry


def extractive_entry(session: SessionText) -> str:
    # What the user said; a quote from outside is never put in their mouth.
    said = [(label.lower(), text) for label, text, outside in session.lines
            if label in ("USER", "EARLIER") and not outside]
    said = said or [(label.lower() if not outside else "quoted from outside", text)
                    for label, text, outside in session.lines]
    picks = said[:1] + said[-1:] if len(said) > 1 else said
    return f"Session of {session.first_at[:10]}: " + extractive.quote_lines(picks)


def _store(con: apsw.Connection, user_id: str, session_id: str, entry: str, is_extractive: bool,
           from_outside: bool) -> str:
    row = con.execute(
        "SELECT s.last_event_at, d.created_at FROM sessions s LEFT JOIN diary d "
        "ON d.user_id = s.user_id AND d.session_id = s.id WHERE s.user_id = ? AND s.id = ?",
        (user_id, session_id)).fetchone()
    if row is None or (row[1] is not None and row[1] >= row[0]):
        return "up-to-date"
    action = add_diary_entry(con, user_id, session_id, entry, is_extractive=is_extractive,
                             worker=WORKER, from_outside=from_outside)
    end_session(con, user_id, session_id)
    return "updated" if action == "update" else "written"


def write_diary(writer: Writer, model: ModelClient | None, config: Config, user_id: str,
                session_id: str, *, extractive: bool = False, after: SentChat | None = None) -> str:
    """'written', 'updated', or 'up-to-date' (nothing to do). Raises model errors unless
    extractive. `after`: a chat to ask the question after (model_output.ask_json)."""
    with reading(writer) as con:
        session = session_to_summarise(con, user_id, session_id)
    if session is None:
        return "up-to-date"
    if extractive or model is None:
        entry, is_extractive = extractive_entry(session), True
    else:
        raw, text = ask_json(model, WORKER, build_prompt(session), DIARY_SCHEMA, SYSTEM, after)
        entry, is_extractive = parse_entry(raw, text), False
    return writer.submit(lambda con: _store(con, user_id, session_id, entry, is_extractive,
                                            session.from_outside))


def rewrite_extractive_diary(writer: Writer, model: ModelClient, user_id: str, session_id: str) -> bool:
    """Replace an extractive entry with the model's; False if there was none. Raises model errors."""
    with reading(writer) as con:
        session = session_to_summarise(con, user_id, session_id, rewrite=True)
    if session is None:
        return False
    raw, text = ask_json(model, WORKER, build_prompt(session), DIARY_SCHEMA, SYSTEM)
    entry = parse_entry(raw, text)
    return writer.submit(lambda con: replace_extractive_diary(con, user_id, session_id, entry,
                                                              worker=CONSOLIDATE_WORKER))
