"""Telling the person what a scheduled task's run found: the run as a report, and the
marks that say where it was told — shown by a `hilo chat` (delivered_at), taken by the
webhook (notified_at, notify_error; workers/notify.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import apsw

from app.tasks.store import moment_or_now
from app.timeutil import to_rfc3339
from app.writer import Writer

__all__ = ["RunReport", "run_report", "has_undelivered", "take_undelivered", "mark_delivered",
           "record_notification"]


@dataclass(frozen=True)
class RunReport:
    """A run that ended, as the person is told of it: in `hilo chat`, by the webhook,
    on the desktop (workers/notify.py). Kept when its task is gone."""

    run_id: int
    task_id: int
    user_id: str
    name: str
    status: str  # "done" or "failed"
    reply: str | None
    error: str | None
    finished_at: str | None

    @property
    def text(self) -> str:
        """What the run found, or why it failed."""
        if self.status == "done":
            return self.reply or "(no reply)"
        return f"failed: {self.error}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_REPORT_SELECT = (
    "SELECT r.id, r.task_id, r.user_id, coalesce(r.task_name, t.name, 'task #' || r.task_id), "
    "r.status, e.content, r.error, r.finished_at FROM task_runs r "
    "LEFT JOIN scheduled_tasks t ON t.id = r.task_id "
    "LEFT JOIN events e ON e.id = r.reply_event_id"
)
# A run retrying is not news yet; a cancelled one never ran.
_ENDED = "r.status IN ('done', 'failed')"


def run_report(con: apsw.Connection, run_id: int) -> RunReport | None:
    """The run as told to the person; None unless it ended."""
    row = con.execute(f"{_REPORT_SELECT} WHERE r.id = ? AND {_ENDED}", (run_id,)).fetchone()
    return RunReport(*row) if row else None


def has_undelivered(con: apsw.Connection, user_id: str) -> bool:
    """Whether a run ended that no `hilo chat` has shown yet (a cheap read, to poll)."""
    return con.execute(
        "SELECT 1 FROM task_runs r WHERE r.user_id = ? AND r.delivered_at IS NULL "
        f"AND {_ENDED} LIMIT 1", (user_id,)).fetchone() is not None


def take_undelivered(writer: Writer, user_id: str, *, limit: int,
                     now: datetime | None = None) -> tuple[list[RunReport], int]:
    """The runs that ended since a `hilo chat` last showed one: the newest `limit`,
    oldest first, and how many older ones there were. All are marked delivered in the
    same transaction, so two open chats never show one run twice."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> tuple[list[RunReport], int]:
        rows = list(con.execute(f"{_REPORT_SELECT} WHERE r.user_id = ? AND r.delivered_at IS NULL "
                                f"AND {_ENDED} ORDER BY r.id", (user_id,)))
        if not rows:
            return [], 0
        con.execute(f"UPDATE task_runs SET delivered_at = ? WHERE id IN "
                    f"({','.join('?' * len(rows))})", (stamp, *(row[0] for row in rows)))
        shown = rows[-limit:] if limit > 0 else []
        return [RunReport(*row) for row in shown], len(rows) - len(shown)

    return writer.submit(write)


def mark_delivered(writer: Writer, run_id: int, now: datetime | None = None) -> None:
    """The person saw this run's result already (`hilo tasks run` printed it)."""
    stamp = to_rfc3339(moment_or_now(now))

    def write(con: apsw.Connection) -> None:
        con.execute("UPDATE task_runs SET delivered_at = coalesce(delivered_at, ?) WHERE id = ?",
                    (stamp, run_id))

    writer.submit(write)


def record_notification(writer: Writer, run_id: int, now: datetime, *,
                        error: str | None = None) -> None:
    """How the webhook went for this run: taken (error None), or why not, for `hilo tasks log`."""
    stamp = to_rfc3339(now)

    def write(con: apsw.Connection) -> None:
        con.execute("UPDATE task_runs SET notified_at = ?, notify_error = ? WHERE id = ?",
                    (None if error else stamp, error, run_id))

    writer.submit(write)
