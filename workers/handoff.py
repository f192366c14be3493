"""What the front-end hands to the workers. Enqueue only: never waits for a job.

If the queue cannot be reached the call logs a warning and returns False; nothing is
lost, because the worker's reconcile sweep finds the undistilled events and the ended
session in the database and enqueues them itself.
"""

from __future__ import annotations

from typing import Any, Callable

import structlog

from app.config import Config

log = structlog.get_logger(__name__)


def _enqueue(config: Config, job: str, send: Callable[[], Any], **ids: Any) -> bool:
    try:
        from workers.queue import configure

        configure(config)
        send()
    except Exception as exc:  # the chat must go on; reconcile redoes this
        log.warning("handoff.enqueue_failed", job=job, error=str(exc), **ids,
                    note="the worker's reconcile sweep will enqueue it from the database")
        return False
    return True


def after_reply(config: Config, user_id: str, session_id: str, event_ids: list[int]) -> bool:
    """Enqueue distill for a turn's events (the distill job then checks for compaction)."""
    from workers import tasks

    ids = [int(i) for i in event_ids]
    return _enqueue(config, "distill", lambda: tasks.distill(user_id, session_id, ids),
                    user_id=user_id, session_id=session_id, events=ids)


def session_ended(config: Config, user_id: str, session_id: str) -> bool:
    """Enqueue the session's diary entry (the job also marks the session ended)."""
    from workers import tasks

    return _enqueue(config, "diary", lambda: tasks.diary(user_id, session_id),
                    user_id=user_id, session_id=session_id)
