"""The worker's share of the CPU, set before anything heavy runs in its process."""

from __future__ import annotations

import os

from app.config import Config

__all__ = ["yield_cpu_to_turns"]


def yield_cpu_to_turns(config: Config) -> None:
    """Nice this process by `[queue] worker_nice`, once, before its imports and threads
    (threads inherit it): embedding a backlog then takes the cores only when no chat turn
    wants them (measured in BENCHMARKS.md, embedder_threads), and a worker starting beside
    `hilo serve` (honcho starts both at once) leaves serve the cores it needs to answer."""
    if config.queue.worker_nice:
        os.nice(config.queue.worker_nice)
