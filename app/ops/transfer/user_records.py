"""One user's memory read as records (the JSONL shapes), from a snapshot of the database.

Row ids appear only to link records to each other (event → card, card → folded_into,
fact → superseded_by); events and the events a record came from are named by uuid.
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw

__all__ = ["rows", "session_records", "event_records", "card_records", "profile_records",
           "fact_records", "task_records", "diary_records"]


def rows(con: apsw.Connection, sql: str, params: tuple) -> Iterator[dict]:
    """The rows of a query as {column name: value}."""
    cursor = con.execute(sql, params)
    names = None
    for row in cursor:
        if names is None:
            names = [d[0] for d in cursor.getdescription()]
        yield dict(zip(names, row, strict=True))


def session_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in rows(con, "SELECT id, title, started_at, last_event_at, ended_at FROM sessions "
                    "WHERE user_id = ? ORDER BY started_at, id", (user_id,)):
        yield {"type": "session", **row}


def event_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in rows(con, "SELECT uuid, session_id, role, content, original_length, tool_call_id, "
                    "tool_name, tool_calls_json, created_at, importance, compacted, "
                    "card_id AS card, distilled_at, consolidated_at FROM events "
                    "WHERE user_id = ? ORDER BY id", (user_id,)):
        yield {"type": "event", **row}


def card_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in rows(con, "SELECT c.id, c.session_id, c.summary, c.keywords, "
                    "f.uuid AS first_event_uuid, l.uuid AS last_event_uuid, c.event_count, c.level, "
                    "c.folded_into, c.is_extractive, c.importance, c.access_count, "
                    "c.last_accessed_at, c.created_at, c.updated_at FROM context_cards c "
                    "LEFT JOIN events f ON f.id = c.first_event_id "
                    "LEFT JOIN events l ON l.id = c.last_event_id "
                    "WHERE c.user_id = ? ORDER BY c.id", (user_id,)):
        yield {"type": "card", **row}


def profile_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    """Every profile key, the deleted ones (tombstones) too."""
    for row in rows(con, "SELECT p.key, p.value, p.source, e.uuid AS source_event_uuid, "
                    "p.created_at, p.updated_at, p.deleted_at FROM profile p "
                    "LEFT JOIN events e ON e.id = p.source_event_id "
                    "WHERE p.user_id = ? ORDER BY p.key", (user_id,)):
        yield {"type": "profile", **row}


def fact_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    """Every fact row: current ones, earlier versions, tombstones (forgotten ones too)."""
    for row in rows(con, "SELECT f.id, f.category, f.key, f.value, f.source, "
                    "e.uuid AS source_event_uuid, f.created_at, f.updated_at, f.superseded_at, "
                    "f.superseded_by, f.deleted_at, f.importance, f.access_count, "
                    "f.last_accessed_at, f.forgotten_hash FROM facts f "
                    "LEFT JOIN events e ON e.id = f.source_event_id "
                    "WHERE f.user_id = ? ORDER BY f.id", (user_id,)):
        yield {"type": "fact", **row}


def task_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    """Scheduled tasks: what to ask and when (their runs' replies are events of the
    sessions `task:<id>`)."""
    for row in rows(con, "SELECT id, name, original_schedule AS schedule, cron_expr, prompt, "
                    "source, is_oneshot, is_paused, is_trusted, next_run_at, last_run_at, "
                    "created_at, updated_at, timezone FROM scheduled_tasks WHERE user_id = ? "
                    "ORDER BY id",
                    (user_id,)):
        yield {"type": "task", **row}


def diary_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in rows(con, "SELECT session_id, entry, is_extractive, created_at FROM diary "
                    "WHERE user_id = ? ORDER BY created_at, id", (user_id,)):
        yield {"type": "diary", **row}
