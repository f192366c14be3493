"""The consumer's start: `hilo worker`, or Huey's own `huey_consumer`.

Thread workers only: every job writes through this process's single APSW writer, and
a process pool would mean one write connection per process. The consumer polls at
least every `queue.poll_max_delay` seconds (Huey's idle backoff would otherwise reach
10 s), flushes stale locks at start, re-enqueues the work the database says is undone,
and stops on SIGTERM within honcho's 5 s: running jobs get SHUTDOWN_SECONDS to finish,
the writer commits what is queued, and whatever was cut off is redone by reconcile.

Both starts set the process up the same way (`start_jobs`): the data directory, the
queue bound to the config, a JobRunner (workers/runner.py) attached to the job
declarations, the job counters for /metrics, then the start-up sweep.

- `run_worker(config, …)`: what `hilo worker` runs; the CLI is the one place that
  parses the worker's flags and reads its configuration, and it nices the process
  (workers/cpu.py) before importing this module.
- `huey_consumer workers.consumer.huey -k thread`: Huey's command loads `huey` from
  this module — the queue bound to load_config()'s configuration (HILO_* variables,
  ./config.toml), nothing started — and the start runs when its consumer does, as
  Huey's startup hook (`ConsumerStart`), once, before any worker thread takes a job. It
  keeps Huey's own logging and options. So reading the queue through `workers.consumer
  .huey` (Huey's own tools, a shell) starts nothing in the reader's process: no runner,
  no niceness, no sweep, no data directory made.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from functools import cache
from typing import Any

from app.config import Config, load_config
from app.datadir import DataDir
from app.log import get_logger
from app.model.probe import announce_models
from workers import jobs
from workers.cpu import yield_cpu_to_turns
from workers.queue import HiloHuey, check_queue_file, configure
from workers.runner import JobRunner

__all__ = ["log", "SHUTDOWN_SECONDS", "WORKER_TYPES", "REFUSED", "start_jobs", "run_worker",
           "ConsumerStart"]

log = get_logger(__name__)

SHUTDOWN_SECONDS = 3.0
WORKER_TYPES = ("thread", "process", "greenlet")
REFUSED = (
    "hilo worker runs thread workers only (-k thread): every job writes through the "
    "worker's single APSW write connection, and a {kind} pool would open one per {kind}. "
    "For more throughput raise --workers (or [queue] workers)."
)


def start_jobs(config: Config) -> JobRunner:
    """Make this process the one that runs the jobs of `config`'s queue, and queue the
    start-up work (stale locks flushed, config tasks synced, undone work re-enqueued)."""
    DataDir.of(config).init()  # idempotent; api and worker may start together
    check_queue_file(config)
    runner = JobRunner.start(config)
    try:
        runner.prepare()
    except BaseException:
        runner.close()
        raise
    return runner


def run_worker(config: Config, workers: int | None = None, worker_type: str = "thread") -> int:
    """Run the consumer until SIGTERM/SIGINT; the exit status (2 for a refused worker type)."""
    if worker_type != "thread":
        kind = worker_type if worker_type in WORKER_TYPES else "non-thread"
        print(f"hilo worker: {REFUSED.format(kind=kind)}", file=sys.stderr)
        return 2
    # Huey installs its graceful SIGTERM handler only once its threads run; a SIGTERM
    # before then (a supervisor stopping a worker that is still starting) is a clean stop.
    signal.signal(signal.SIGTERM, _stop_while_starting)
    workers = workers or config.queue.workers
    if config.logging.level != "debug":
        # Huey logs two lines per task at INFO; our jobs log their own outcomes.
        logging.getLogger("huey").setLevel(logging.WARNING)
    runner = start_jobs(config)
    announce_models(config)
    try:
        consumer = runner.queue.create_consumer(
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
        with DataDir.of(config).hold_pid_file("worker"):  # restore refuses while we run
            consumer.run()
    finally:
        runner.close()  # the writer commits what it holds
    log.info("worker.stopped")
    return 0


def _stop_while_starting(signum: int, frame: object) -> None:
    raise SystemExit(0)


class ConsumerStart:
    """`start_jobs` for Huey's own consumer, as its startup hook: every worker thread
    calls it before it takes a job; the first runs the start, the others wait for it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.runner: JobRunner | None = None
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            if self.runner is not None or jobs.is_attached():
                return  # started already (or `hilo worker` runs this process's jobs)
            try:
                yield_cpu_to_turns(self.config)
                self.runner = start_jobs(self.config)
            except BaseException:
                log.exception("worker.start_failed")
                os.kill(os.getpid(), signal.SIGTERM)  # Huey's graceful stop: nothing runs
                raise
            # huey_consumer has no hook once every worker stopped: close at the exit.
            atexit.register(self.runner.close)


@cache
def _queue_for_huey_consumer() -> HiloHuey:
    config = load_config()
    queue = configure(config)  # touches no disk
    queue.on_startup("hilo.start_jobs")(ConsumerStart(config))
    return queue


def __getattr__(name: str) -> Any:
    # `huey_consumer workers.consumer.huey`: resolved on first access (PEP 562), so that
    # importing run_worker for `hilo worker` reads no configuration and opens nothing.
    if name == "huey":
        return _queue_for_huey_consumer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    # The worker's flags and configuration are parsed in one place, the CLI.
    sys.exit("start the worker with `hilo worker` "
             "(or `huey_consumer workers.consumer.huey -k thread`)")
