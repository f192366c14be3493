"""Job counts and durations, kept by each worker process and shared through the queue.

`hilo serve` exposes /metrics, but the jobs run in the worker. Each worker process
counts its jobs (Huey's signals: executing, complete, error) and, at most every few
seconds, writes a snapshot into Huey's key-value store under a key of its own; the
server sums the snapshots it finds. Counters restart with the process, which
Prometheus treats as a counter reset.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from huey.signals import SIGNAL_COMPLETE, SIGNAL_ERROR, SIGNAL_EXECUTING

# Job durations span a cheap reconcile (milliseconds) to a slow model call (minutes).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 120.0, 300.0)
METRICS_PREFIX = "hilo.metrics.jobs."
FLUSH_EVERY_SECONDS = 5.0


@dataclass
class JobStats:
    done: int = 0
    errors: int = 0
    # One count per bucket of DURATION_BUCKETS, plus +Inf; not cumulative.
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    seconds: float = 0.0

    def record(self, seconds: float, ok: bool) -> None:
        if ok:
            self.done += 1
        else:
            self.errors += 1
        self.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.seconds += seconds


class JobMetrics:
    """This process's job statistics, by task name."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobStats] = {}
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()
        self._flushed_at = 0.0
        self.key = f"{METRICS_PREFIX}{socket.gethostname()}:{os.getpid()}"

    def on_signal(self, signal: str, task: Any, *args: Any) -> None:
        name = getattr(task, "name", type(task).__name__)
        now = time.monotonic()
        with self._lock:
            if signal == SIGNAL_EXECUTING:
                self._started[task.id] = now
                return
            started = self._started.pop(task.id, None)
            stats = self.jobs.setdefault(name, JobStats())
            stats.record(0.0 if started is None else now - started, signal == SIGNAL_COMPLETE)

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return {name: {"done": s.done, "errors": s.errors, "buckets": list(s.buckets),
                           "seconds": s.seconds} for name, s in self.jobs.items()}

    def flush(self, huey: Any, force: bool = False) -> None:
        """Share the snapshot through the queue; throttled, and never raises."""
        now = time.monotonic()
        if not force and now - self._flushed_at < FLUSH_EVERY_SECONDS:
            return
        self._flushed_at = now
        try:
            huey.put(self.key, self.snapshot())
        except Exception:  # the queue is unavailable right now; the next job tries again
            self._flushed_at = 0.0


JOB_METRICS = JobMetrics()


def install(huey: Any) -> None:
    """Count every job this process runs."""
    def on_signal(signal: str, task: Any, *args: Any) -> None:
        JOB_METRICS.on_signal(signal, task, *args)
        if signal != SIGNAL_EXECUTING:
            JOB_METRICS.flush(huey)

    huey.signal(SIGNAL_EXECUTING, SIGNAL_COMPLETE, SIGNAL_ERROR)(on_signal)


def merged(snapshots: list[dict[str, dict]]) -> dict[str, dict]:
    """Sum the snapshots of several worker processes, by task name."""
    total: dict[str, dict] = {}
    for snapshot in snapshots:
        for name, stats in snapshot.items():
            into = total.setdefault(name, {"done": 0, "errors": 0, "seconds": 0.0,
                                           "buckets": [0] * (len(DURATION_BUCKETS) + 1)})
            into["done"] += stats.get("done", 0)
            into["errors"] += stats.get("errors", 0)
            into["seconds"] += stats.get("seconds", 0.0)
            for i, count in enumerate(stats.get("buckets", [])[: len(into["buckets"])]):
                into["buckets"][i] += count
    return total
