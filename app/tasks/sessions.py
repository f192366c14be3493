"""A scheduled task's session: its runs are a session of their own, `task:<id>`, whose
prompts are instructions, not the user speaking. Kept apart from store.py so the chat's
front-ends, which only need to know such a session, do not load the schedule parser."""

from __future__ import annotations

__all__ = ["SESSION_PREFIX", "task_session_id", "is_task_session"]

SESSION_PREFIX = "task:"


def task_session_id(task_id: int) -> str:
    return f"{SESSION_PREFIX}{task_id}"


def is_task_session(session_id: str) -> bool:
    """Whether the session holds a scheduled task's runs (its prompts are instructions)."""
    return session_id.startswith(SESSION_PREFIX)
