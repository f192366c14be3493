"""Loading Huey without the Redis client, in a process whose queue is SQLite.

Huey imports the Redis client whenever it is installed, used or not: ~60 ms of a `hilo
queue` command's start-up (the `redis` package loads its asyncio client too). A process
whose configuration is final calls `load_huey` before anything imports Huey; with the
SQLite queue, Huey then loads as if the client were not installed, so that process has
no Redis backend (Huey's Redis storage refuses to start). Huey already loaded, or a
Redis queue: Huey as it is.
"""

from __future__ import annotations

import sys

__all__ = ["load_huey"]


def load_huey(queue_backend: str) -> None:
    """Import Huey, without the Redis client unless `queue_backend` is "redis"."""
    if queue_backend == "redis" or "huey" in sys.modules or "redis" in sys.modules:
        return
    sys.modules["redis"] = None  # type: ignore[assignment]  # what app/log.py does to rich
    try:
        import huey  # noqa: F401 — start-up: loaded here, with the client hidden
    finally:
        del sys.modules["redis"]
