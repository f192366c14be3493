"""The queue's side of the chat's hand-off (app.turn.chat.Handoff). Enqueue only: never waits
for a job, never raises.

If the queue cannot take the job the call logs a warning and returns False; nothing is
lost, because the worker's reconcile sweep finds the undistilled events and the ended
session in the database and enqueues them itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from huey.api import Task
from huey.utils import normalize_time

from app.config import Config
from app.log import get_logger
from app.model.replies import SentChat
from workers import jobs
from workers.chat_activity import ChatActivity
from workers.queue import HiloHuey, check_queue_file, configure
from workers.waiting import enqueue_waiting

__all__ = ["log", "QueueHandoff", "queue_handoff"]

log = get_logger(__name__)


class QueueHandoff:
    """Hands a turn's events and an ended session to the workers through `queue`, and,
    with `activity`, reports the front-end's requests to the model server there."""

    def __init__(self, queue: HiloHuey, activity: ChatActivity | None = None) -> None:
        self.queue = queue
        self.activity = activity

    def model_activity(self) -> ChatActivity | None:
        return self.activity

    def after_reply(self, user_id: str, session_id: str, event_ids: list[int],
                    sent: SentChat | None = None) -> bool:
        """Enqueue distill for a turn's events (the job learns the session's turns); keep
        the exchange the model server answered, for the job to continue."""
        ids = [int(i) for i in event_ids]
        if sent is not None and self.activity is not None:
            self.activity.served(user_id, session_id, sent)
        return self._enqueue("distill", lambda: jobs.distill.s(user_id, session_id, ids),
                             waits=("learn", user_id, session_id),
                             user_id=user_id, session_id=session_id, events=ids)

    def session_ended(self, user_id: str, session_id: str) -> bool:
        """Enqueue the session's diary entry (the job also marks the session ended)."""
        return self._enqueue("diary", lambda: jobs.diary.s(user_id, session_id),
                             waits=("diary", user_id, session_id),
                             user_id=user_id, session_id=session_id)

    def wake_scheduler(self, at: datetime) -> bool:
        """Run the scheduler's tick at `at` too (Huey's eta, to the second): a one-shot
        due between two minute ticks runs on time, not at the next whole minute."""
        return self._enqueue("run_scheduled_tasks_now", lambda: jobs.run_scheduled_tasks_now
                             .task_class(eta=normalize_time(eta=at, utc=True)),
                             at=at.isoformat())

    def _enqueue(self, job: str, task: Callable[[], Task],
                 waits: tuple[str, str, str] | None = None, **ids: Any) -> bool:
        """Enqueue the task; with `waits` (kind, user, session), only if no job of that
        kind waits for the session already (workers/waiting.py): that one does the work."""
        try:
            if waits is None:
                self.queue.enqueue(task())
            elif not enqueue_waiting(self.queue, waits[0], task(), waits[1], waits[2]):
                log.debug("handoff.already_waiting", job=job, **ids)
        except Exception as exc:  # noqa: BLE001 — the chat must go on; reconcile redoes this
            log.warning("handoff.enqueue_failed", job=job, error=str(exc), **ids,
                        note="the worker's reconcile sweep will enqueue it from the database")
            return False
        return True


def queue_handoff(config: Config) -> QueueHandoff:
    """A front-end's start: bind this process's queue to `config` and hand off through it;
    its requests to the model server are reported there, so model jobs wait for them.
    A damaged queue file is refused here (CorruptQueue), before the first turn."""
    check_queue_file(config)
    queue = configure(config)
    return QueueHandoff(queue, ChatActivity(queue, config.llm.url))
