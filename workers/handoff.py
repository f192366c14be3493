"""The queue's side of the chat's hand-off (app.chat.Handoff). Enqueue only: never waits
for a job, never raises.

If the queue cannot take the job the call logs a warning and returns False; nothing is
lost, because the worker's reconcile sweep finds the undistilled events and the ended
session in the database and enqueues them itself.
"""

from __future__ import annotations

from typing import Any, Callable

import structlog
from huey.api import Task

from app.config import Config
from workers import jobs
from workers.queue import HiloHuey, check_queue_file, configure

log = structlog.get_logger(__name__)


class QueueHandoff:
    """Hands a turn's events and an ended session to the workers through `queue`."""

    def __init__(self, queue: HiloHuey) -> None:
        self.queue = queue

    def after_reply(self, user_id: str, session_id: str, event_ids: list[int]) -> bool:
        """Enqueue distill for a turn's events (the distill job then checks for compaction)."""
        ids = [int(i) for i in event_ids]
        return self._enqueue("distill", lambda: jobs.distill.s(user_id, session_id, ids),
                             user_id=user_id, session_id=session_id, events=ids)

    def session_ended(self, user_id: str, session_id: str) -> bool:
        """Enqueue the session's diary entry (the job also marks the session ended)."""
        return self._enqueue("diary", lambda: jobs.diary.s(user_id, session_id),
                             user_id=user_id, session_id=session_id)

    def _enqueue(self, job: str, task: Callable[[], Task], **ids: Any) -> bool:
        try:
            self.queue.enqueue(task())
        except Exception as exc:  # the chat must go on; reconcile redoes this
            log.warning("handoff.enqueue_failed", job=job, error=str(exc), **ids,
                        note="the worker's reconcile sweep will enqueue it from the database")
            return False
        return True


def queue_handoff(config: Config) -> QueueHandoff:
    """A front-end's start: bind this process's queue to `config` and hand off through it.
    A damaged queue file is refused here (CorruptQueue), before the first turn."""
    check_queue_file(config)
    return QueueHandoff(configure(config))
