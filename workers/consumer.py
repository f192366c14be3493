"""`hilo worker`: the Huey consumer, started from Python with the project's logging.

Thread workers only: every job writes through this process's single APSW writer, and
a process pool would mean one write connection per process. The consumer polls at
least every `queue.poll_max_delay` seconds (Huey's idle backoff would otherwise reach
10 s), flushes stale locks at start, re-enqueues the work the database says is undone,
and stops on SIGTERM within honcho's 5 s: running jobs get SHUTDOWN_SECONDS to finish,
the writer commits what is queued, and whatever was cut off is redone by reconcile.

    python -m workers.consumer [--data-dir DIR] [--workers N] [-k thread]
"""

from __future__ import annotations

import logging
import sys

import structlog

from app.config import Config
from app.backup import hold_pid_file
from app.datadir import init_data_dir

log = structlog.get_logger(__name__)

SHUTDOWN_SECONDS = 3.0
WORKER_TYPES = ("thread", "process", "greenlet")
REFUSED = (
    "hilo worker runs thread workers only (-k thread): every job writes through the "
    "worker's single APSW write connection, and a {kind} pool would open one per {kind}. "
    "For more throughput raise --workers (or [queue] workers)."
)


def run_worker(config: Config, workers: int | None = None, worker_type: str = "thread") -> int:
    """Run the consumer until SIGTERM/SIGINT; the exit status (2 for a refused worker type)."""
    if worker_type != "thread":
        kind = worker_type if worker_type in WORKER_TYPES else "non-thread"
        print(f"hilo worker: {REFUSED.format(kind=kind)}", file=sys.stderr)
        return 2
    from workers.queue import close_context, configure, huey
    from workers.tasks import prepare_worker_process

    workers = workers or config.queue.workers
    init_data_dir(config)  # idempotent; api and worker may start together
    configure(config)
    if config.logging.level != "debug":
        # Huey logs two lines per task at INFO; our jobs log their own outcomes.
        logging.getLogger("huey").setLevel(logging.WARNING)
    prepare_worker_process()
    consumer = huey.create_consumer(
        workers=workers,
        worker_type="thread",
        initial_delay=min(0.1, config.queue.poll_max_delay),
        backoff=1.15,
        max_delay=config.queue.poll_max_delay,
        periodic=True,
        scheduler_interval=1,
        check_worker_health=True,
        flush_locks=True,
        graceful_signal="TERM",
        shutdown_timeout=SHUTDOWN_SECONDS,
    )
    log.info("worker.started", workers=workers, data_dir=str(config.data_dir),
             backend=config.queue.backend, poll_max_delay=config.queue.poll_max_delay)
    try:
        with hold_pid_file(config.data_dir, "worker"):  # restore refuses while we run
            consumer.run()
    finally:
        close_context()  # commit what the writer holds
    log.info("worker.stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m workers.consumer [flags]` is `hilo worker [flags]`."""
    from app.cli import main as hilo

    return hilo(["worker", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
