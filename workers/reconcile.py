"""The reconcile sweep: what the database says is undone, so it can be enqueued again.

Huey runs a task at most once: one in flight when a worker dies is gone. The database
is the truth, so this sweep (every minute, and once with no grace period when a
worker starts) finds events never distilled, sessions over the compaction threshold,
ended sessions without an up-to-date diary, and idle sessions to close; the job
(workers/runner.py) enqueues what it finds. Every query is indexed or touches one row
per session; the jobs it feeds are safe to run twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import apsw

from app.config import Config
from app.learn.reading import reading
from app.memory.sessions import end_idle_sessions
from app.timeutil import to_rfc3339
from app.writer import Writer
from workers.retry import total_backoff

__all__ = ["GRACE_SECONDS", "DISTILL_BATCH", "MAX_EVENTS_PER_SWEEP", "default_grace_seconds",
           "UndoneWork", "undistilled", "over_threshold", "diary_due", "find_undone_work"]

# How long after its event undone work is left to the task already queued for it.
GRACE_SECONDS = 30.0
DISTILL_BATCH = 20  # events per re-enqueued distill
MAX_EVENTS_PER_SWEEP = 5000


def default_grace_seconds(config: Config) -> float:
    """GRACE_SECONDS past the longest backoff, so a job still retrying is not doubled."""
    return GRACE_SECONDS + total_backoff(config)


@dataclass
class UndoneWork:
    distill: list[tuple[str, str, list[int]]] = field(default_factory=list)
    compact: list[tuple[str, str]] = field(default_factory=list)
    diary: list[tuple[str, str]] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)  # idle sessions this run ended

    def __bool__(self) -> bool:
        return bool(self.distill or self.compact or self.diary or self.closed)


def undistilled(con: apsw.Connection, cutoff: str) -> list[tuple[str, str, list[int]]]:
    batches: dict[tuple[str, str], list[list[int]]] = {}
    for user_id, session_id, event_id in con.execute(
        "SELECT user_id, session_id, id FROM events INDEXED BY events_undistilled "
        "WHERE distilled_at IS NULL AND created_at <= ? ORDER BY user_id, id LIMIT ?",
        (cutoff, MAX_EVENTS_PER_SWEEP),
    ):
        lists = batches.setdefault((user_id, session_id), [[]])
        if len(lists[-1]) == DISTILL_BATCH:
            lists.append([])
        lists[-1].append(event_id)
    return [(u, s, ids) for (u, s), lists in batches.items() for ids in lists]


def over_threshold(con: apsw.Connection, config: Config, cutoff: str) -> list[tuple[str, str]]:
    return list(con.execute(
        "SELECT s.user_id, s.id FROM sessions s WHERE s.last_event_at <= :cutoff AND "
        "(SELECT count(*) FROM (SELECT 1 FROM events e WHERE e.user_id = s.user_id "
        "AND e.session_id = s.id AND e.compacted = 0 LIMIT :threshold)) >= :threshold",
        {"cutoff": cutoff, "threshold": config.memory.compaction_threshold}))


def diary_due(con: apsw.Connection, cutoff: str) -> list[tuple[str, str]]:
    return list(con.execute(
        "SELECT s.user_id, s.id FROM sessions s LEFT JOIN diary d "
        "ON d.user_id = s.user_id AND d.session_id = s.id "
        "WHERE s.ended_at IS NOT NULL AND s.ended_at <= ? "
        "AND (d.id IS NULL OR d.created_at < s.last_event_at)", (cutoff,)))


def find_undone_work(writer: Writer, config: Config, *, now: datetime | None = None,
                     grace_seconds: float | None = None) -> UndoneWork:
    """Close idle sessions and list the undone work (the caller enqueues it)."""
    now = now or datetime.now(UTC)
    grace = default_grace_seconds(config) if grace_seconds is None else grace_seconds
    cutoff = to_rfc3339(now - timedelta(seconds=grace))
    idle_cutoff = to_rfc3339(now - timedelta(minutes=config.memory.session_idle_minutes))
    work = UndoneWork()
    with reading(writer) as con:
        anything_idle = con.execute("SELECT 1 FROM sessions WHERE ended_at IS NULL "
                                    "AND last_event_at <= ? LIMIT 1", (idle_cutoff,)).fetchone()
    if anything_idle:
        work.closed = writer.submit(lambda con: end_idle_sessions(con, idle_cutoff, to_rfc3339(now)))
    with reading(writer) as con:
        work.distill = undistilled(con, cutoff)
        work.compact = over_threshold(con, config, cutoff)
        work.diary = diary_due(con, cutoff)
    work.diary = sorted(set(work.diary) | set(work.closed))
    return work
