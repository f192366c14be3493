"""The jobs' retry policy: exponential backoff with jitter, counted per job, then degrade.

A job that fails with a retryable model error — or with output it cannot use — is
re-enqueued by its wrapper with `schedule(delay=…)` and `attempt + 1`, not by Huey's
own retries (huey 3.5.4), because those give less than this policy needs:
`retry_backoff` multiplies the delay after each retry, with neither jitter (workers that
met the same model outage would retry in step) nor a cap (MAX_DELAY_SECONDS); a retry
is an unhandled exception to Huey, logged with a traceback and counted as a failed job
(SIGNAL_ERROR, in /metrics) though it is an expected outcome; `retries` is fixed where a
task is declared or enqueued, while `queue.max_attempts` is configuration; and
`RetryTask`, which takes a delay and logs no traceback, does not consume a retry
(seen in huey 3.5), so attempts would have to be counted here anyway. After
`queue.max_attempts` attempts (2 for unusable output; at once, for an error retrying
cannot fix) the job writes its fallback, logs `job.degraded` and records the failure in
Huey's result store under the task's id (`workers.queue.failed_jobs()`): visible, never
silent, and without a traceback for what is an expected outcome. Other exceptions (bugs, a database
that cannot be written) propagate untouched: Huey logs and records them, and the
reconcile sweep redoes the work later.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.config import Config
from app.errors import HiloError
from app.learn.model_output import InvalidOutput
from app.log import get_logger
from app.model.errors import ModelError
from workers.hooks import job_purpose

__all__ = ["log", "MAX_DELAY_SECONDS", "UNUSABLE_OUTPUT_ATTEMPTS", "JobDegraded", "backoff_delay",
           "total_backoff", "is_model_failure", "is_retryable", "Outcome", "attempt_job"]

log = get_logger(__name__)

MAX_DELAY_SECONDS = 300.0
UNUSABLE_OUTPUT_ATTEMPTS = 2


class JobDegraded(HiloError):
    """A job gave up on the model and wrote its fallback instead; str() says which and why."""


def backoff_delay(base: float, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds before the attempt after `attempt`: base·2^(attempt−1), capped, equal jitter."""
    delay = min(MAX_DELAY_SECONDS, base * 2 ** (attempt - 1))
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def total_backoff(config: Config) -> float:
    """The longest a job can spend waiting between its attempts."""
    base = config.queue.backoff_base_seconds
    return sum(min(MAX_DELAY_SECONDS, base * 2 ** (a - 1)) for a in range(1, config.queue.max_attempts))


def is_model_failure(exc: BaseException) -> bool:
    """Failures of the model (or its output) that the retry policy handles; any other
    exception is a bug or a database problem and propagates."""
    return isinstance(exc, (ModelError, InvalidOutput)) or bool(getattr(exc, "retryable", False))


def _attempts_for(exc: BaseException, config: Config) -> int:
    """Attempts a job makes: an unusable answer is asked again once, not max_attempts
    times — each ask is a whole generation, and a model that wrote nothing usable twice
    will most likely write the same."""
    if isinstance(exc, InvalidOutput):
        return min(UNUSABLE_OUTPUT_ATTEMPTS, config.queue.max_attempts)
    return config.queue.max_attempts


def is_retryable(exc: BaseException) -> bool:
    return is_model_failure(exc) and bool(getattr(exc, "retryable", False))


@dataclass
class Outcome:
    status: Literal["done", "retrying", "degraded"]
    value: Any = None  # what work() or fallback() returned
    error: JobDegraded | None = None  # set when degraded


def attempt_job(
    config: Config,
    job: str,
    attempt: int,
    ids: dict[str, Any],
    work: Callable[[], Any],
    fallback: Callable[[], Any],
    retry: Callable[[float], None],
    task_id: str | None = None,
    record_failure: Callable[[JobDegraded], None] | None = None,
) -> Outcome:
    """Run `work`; on a model failure schedule `retry(delay)` or, out of attempts, run
    `fallback` and `record_failure(error)`."""
    bound = log.bind(job=job, task_id=task_id, attempt=attempt, **ids)
    try:
        return Outcome("done", work())
    except Exception as exc:
        if not is_model_failure(exc):
            raise
        if is_retryable(exc) and attempt < _attempts_for(exc, config):
            delay = backoff_delay(config.queue.backoff_base_seconds, attempt)
            bound.warning("job.retry", error=str(exc), retry_in_seconds=round(delay, 3))
            retry(delay)
            return Outcome("retrying")
        bound.error("job.degraded", error=str(exc), attempts=attempt)
        value = fallback()
        error = JobDegraded(
            f"{job_purpose(job, (), ids)}: gave up on the model after {attempt} attempt(s) "
            f"and wrote its fallback instead: {exc}")
        if record_failure is not None:
            record_failure(error)
        return Outcome("degraded", value, error)
