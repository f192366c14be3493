"""The queue's part of /metrics: its depth and failures, and the jobs the workers ran.

`hilo serve` exposes /metrics, but the jobs run in the worker. Each worker process
counts its jobs (Huey's signals: executing, complete, error; installed by the
consumer's start, workers/runner.py) and, at most every few seconds, writes a snapshot
into Huey's key-value store under a key of its own; `render_queue`, called by the
server at scrape time, reads the queue through `hilo queue`'s view and sums the
snapshots it finds. Counters restart with the process, which Prometheus treats as a
counter reset. The server's own measurements (context build, model calls, its writer)
are app/turn/metrics.py's.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from huey.signals import SIGNAL_COMPLETE, SIGNAL_ERROR, SIGNAL_EXECUTING
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from app.config import Config
from app.log import get_logger
from workers.inspection import QueueView

__all__ = ["log", "DURATION_BUCKETS", "METRICS_PREFIX", "FLUSH_EVERY_SECONDS", "JobStats",
           "JobMetrics", "JOB_METRICS", "COUNTED_SIGNALS", "install", "merged", "render_queue"]

log = get_logger(__name__)

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
        except Exception:  # noqa: BLE001 — the queue is unavailable right now; the next job tries again
            self._flushed_at = 0.0


JOB_METRICS = JobMetrics()


COUNTED_SIGNALS = (SIGNAL_EXECUTING, SIGNAL_COMPLETE, SIGNAL_ERROR)


def install(huey: Any) -> Callable[[], None]:
    """Count every job this process runs; returns what stops the counting."""
    def on_signal(signal: str, task: Any, *args: Any) -> None:
        JOB_METRICS.on_signal(signal, task, *args)
        if signal != SIGNAL_EXECUTING:
            JOB_METRICS.flush(huey)

    huey.signal(*COUNTED_SIGNALS)(on_signal)
    return lambda: huey.disconnect_signal(on_signal, *COUNTED_SIGNALS)


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


# -- /metrics, read at scrape time -------------------------------------------------------------


class _QueueCollector:
    """The queue as Prometheus sees it, read when scraped."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def collect(self) -> Iterator[Any]:
        try:
            yield from self._queue()
        except Exception as exc:  # noqa: BLE001 — a scrape never fails for the queue
            log.warning("metrics.queue_unavailable", error=str(exc))
            up = GaugeMetricFamily("hilo_queue_up", "Whether the queue could be read")
            up.add_metric([], 0)
            yield up

    def _queue(self) -> Iterator[Any]:
        view = QueueView(self.config)
        status = view.status().to_dict()
        up = GaugeMetricFamily("hilo_queue_up", "Whether the queue could be read")
        up.add_metric([], 1)
        depth = GaugeMetricFamily("hilo_queue_jobs", "Jobs in the queue, by state",
                                  labels=["state"])
        for state in ("pending", "scheduled", "due", "failed"):
            depth.add_metric([state], status[state])
        oldest = GaugeMetricFamily("hilo_queue_oldest_pending_seconds",
                                   "How long the oldest due job has waited")
        oldest.add_metric([], (status["oldest_pending"] or {}).get("waiting_seconds", 0.0))
        since_poll = GaugeMetricFamily("hilo_worker_seconds_since_poll",
                                       "Seconds since a worker last polled the queue (-1: never)")
        seconds = status["worker"]["seconds_since_poll"]
        since_poll.add_metric([], -1 if seconds is None else seconds)
        failed = GaugeMetricFamily("hilo_queue_failed_jobs", "Failure records, by task",
                                   labels=["task"])
        for task, counts in status["by_task"].items():
            failed.add_metric([task], counts["failed"])
        yield from (up, depth, oldest, since_poll, failed)

        deserialize = view.huey.serializer.deserialize
        snapshots = []
        for key, raw in view.huey.all_results().items():
            if key.startswith(METRICS_PREFIX):
                try:
                    snapshots.append(deserialize(raw))
                except Exception:  # noqa: BLE001, S112 — a damaged snapshot is skipped
                    continue
        jobs = CounterMetricFamily("hilo_jobs", "Jobs run by the workers, by outcome",
                                   labels=["task", "outcome"])
        durations = HistogramMetricFamily("hilo_job_duration_seconds",
                                          "How long the workers' jobs took", labels=["task"])
        for task, stats in sorted(merged(snapshots).items()):
            jobs.add_metric([task, "done"], stats["done"])
            jobs.add_metric([task, "error"], stats["errors"])
            cumulative, running = [], 0
            for bound, count in zip([*map(str, DURATION_BUCKETS), "+Inf"], stats["buckets"], strict=True):
                running += count
                cumulative.append((bound, running))
            durations.add_metric([task], cumulative, sum_value=stats["seconds"])
        yield from (jobs, durations)


def render_queue(config: Config) -> bytes:
    """The Prometheus text exposition of the queue and the workers' jobs."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_QueueCollector(config))
    return generate_latest(registry)
