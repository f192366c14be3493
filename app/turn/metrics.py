"""/metrics: what this process measures, as Prometheus text for the people who run Hilo.

The turn's measurements (context build latency, model call latency and errors) are
ordinary prometheus_client metrics that app/turn/chat.py records into; the writer's queue
depth and batch sizes are read from this process's writer at scrape time. The queue
and the jobs the workers ran are the queue's to report (workers/queue_metrics.py); the HTTP
route serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from app.writer import Writer

__all__ = ["REGISTRY", "CONTEXT_BUILD_SECONDS", "MODEL_CALL_SECONDS", "MODEL_ERRORS", "render"]

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


class _WriterCollector:
    """This process's writer, read at scrape time."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer

    def collect(self) -> Iterator[Any]:
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


def render(writer: Writer | None = None) -> bytes:
    """The Prometheus text exposition of this process's measurements and its writer."""
    text = generate_latest(REGISTRY)
    if writer is not None:
        live = CollectorRegistry(auto_describe=False)
        live.register(_WriterCollector(writer))
        text += generate_latest(live)
    return text
