"""/metrics: Prometheus text for the people who run Hilo.

This process's own measurements (context build latency, model call latency and
errors) are ordinary prometheus_client metrics. What lives elsewhere is read at scrape
time: the writer's queue depth and batch sizes from this process's writer, and the
queue — depth, oldest pending job, failures, and the jobs the worker processes ran
(their snapshots in the queue's key-value store, workers/metrics.py).
"""

from __future__ import annotations

from typing import Any, Iterator

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

log = structlog.get_logger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)

CONTEXT_BUILD_SECONDS = Histogram(
    "hilo_context_build_seconds", "Time to assemble one turn's context",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY)
MODEL_CALL_SECONDS = Histogram(
    "hilo_model_call_seconds", "Model server calls made by this process, to the last byte",
    ["call"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
    registry=REGISTRY)
MODEL_ERRORS = Counter(
    "hilo_model_errors", "Model server calls that failed, by error type",
    ["call", "error"], registry=REGISTRY)


class _LiveCollector:
    """Read at scrape time: the writer of this process and the queue."""

    def __init__(self, config: Any, writer: Any | None) -> None:
        self.config = config
        self.writer = writer

    def collect(self) -> Iterator[Any]:
        if self.writer is not None:
            yield from self._writer()
        try:
            yield from self._queue()
        except Exception as exc:  # noqa: BLE001 — a scrape never fails for the queue
            log.warning("metrics.queue_unavailable", error=str(exc))
            up = GaugeMetricFamily("hilo_queue_up", "Whether the queue could be read")
            up.add_metric([], 0)
            yield up

    def _writer(self) -> Iterator[Any]:
        stats = self.writer.stats
        depth = GaugeMetricFamily("hilo_writer_queue_depth", "Writes waiting for the writer")
        depth.add_metric([], self.writer.depth)
        batch = GaugeMetricFamily("hilo_writer_last_batch_size",
                                  "Writes committed together in the last transaction")
        batch.add_metric([], stats.last_batch_size)
        commits = CounterMetricFamily("hilo_writer_commits", "Transactions committed")
        commits.add_metric([], stats.commits)
        writes = CounterMetricFamily("hilo_writer_writes", "Writes committed, by outcome",
                                     labels=["outcome"])
        writes.add_metric(["ok"], stats.writes)
        writes.add_metric(["failed"], stats.failed_writes)
        yield from (depth, batch, commits, writes)

    def _queue(self) -> Iterator[Any]:
        from workers.inspection import QueueView
        from workers.metrics import DURATION_BUCKETS, METRICS_PREFIX, merged

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
                except Exception:  # noqa: BLE001 — a damaged snapshot is skipped
                    continue
        jobs = CounterMetricFamily("hilo_jobs", "Jobs run by the workers, by outcome",
                                   labels=["task", "outcome"])
        durations = HistogramMetricFamily("hilo_job_duration_seconds",
                                          "How long the workers' jobs took", labels=["task"])
        for task, stats in sorted(merged(snapshots).items()):
            jobs.add_metric([task, "done"], stats["done"])
            jobs.add_metric([task, "error"], stats["errors"])
            cumulative, running = [], 0
            for bound, count in zip([*map(str, DURATION_BUCKETS), "+Inf"], stats["buckets"]):
                running += count
                cumulative.append((bound, running))
            durations.add_metric([task], cumulative, sum_value=stats["seconds"])
        yield from (jobs, durations)


def render(config: Any, writer: Any | None = None) -> bytes:
    """The Prometheus text exposition for this process and the queue."""
    live = CollectorRegistry(auto_describe=False)
    live.register(_LiveCollector(config, writer))
    return generate_latest(REGISTRY) + generate_latest(live)
