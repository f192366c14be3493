"""What runs the jobs in a consumer process: the worker's resources and each job's body.

`JobRunner.start(config)` is the one place a process that runs jobs sets itself up: it
binds the queue, opens the worker's writer (synchronous=NORMAL), model client, embedder
and the ChatService that runs scheduled tasks as turns, attaches itself to the job
declarations (workers/jobs.py) and counts the jobs for /metrics. `close()` undoes it,
and the writer commits what it holds. The consumer (workers/consumer.py) starts one;
tests start one to run jobs in their own thread.

The bodies add to the plain job functions (app/learn/distill.py, compact.py, diary.py,
consolidate.py, embed.py, reconcile.py, scheduler.py, macros.py) only what running on a queue
needs: attempts with backoff and fallbacks (workers/retry.py), locks, and the jobs a
job enqueues next.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from huey.api import Task, TaskWrapper

from app.config import Config
from app.db import Durability
from app.learn.consolidate import consolidate as consolidate_memory
from app.learn.diary_entry import write_diary
from app.learn.embed import embed_pending
from app.learn.engine_time import ShareCheck, record_call, share_check
from app.learn.reading import reading
from app.learn.session import keep_said_by_rule, learn_by_rules, learn_session, waiting_since
from app.learn.tool_chains import learn_all_macros
from app.log import get_logger
from app.model.client import ModelClient
from app.model.embedders import Embedder, make_embedder
from app.model.errors import ShareSpent
from app.model.json_modes import JsonModes
from app.model.usage import JsonCall
from app.recall.vectors import pending_owners
from app.tasks.config_tasks import sync_config_tasks
from app.timeutil import parse_rfc3339, to_rfc3339
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.turn.records import fold_recall_counts
from app.writer import Writer
from workers import jobs, waiting
from workers import queue_metrics as job_metrics
from workers.chat_activity import (
    chat_began_after,
    chat_deferral,
    chat_to_continue,
    forget_last_chat,
    server_id,
)
from workers.handoff import QueueHandoff
from workers.hooks import job_purpose, task_id_time
from workers.notify import deliver_run
from workers.queue import (
    HiloHuey,
    configure,
    exclusive,
    flush_stale_locks,
    held_locks,
    other_workers_alive,
    owner_beat,
    record_failure,
)
from workers.reconcile import find_undone_work
from workers.retry import JobDegraded, attempt_job
from workers.scheduler import scheduler_tick

__all__ = ["log", "LEARNER_BUSY_SECONDS", "SHARE_RECHECK_SECONDS", "LAST_DECAY_KEY", "JobRunner"]

log = get_logger(__name__)

# A learning job that finds another learning on its model server comes back this much later.
LEARNER_BUSY_SECONDS = 1.0
# A session's job held for learning's share of the engine looks again this much later (or
# when its oldest turn has waited [learn] share_wait_minutes, if sooner): the chat's next
# turns are what give it credit.
SHARE_RECHECK_SECONDS = 60.0
# Where consolidate keeps the time of its last importance decay (Huey's key-value store).
LAST_DECAY_KEY = "hilo.consolidate.last_decay_at"


def _again(task_wrapper: TaskWrapper, args: tuple, attempt: int) -> Callable[[float], None]:
    """How a job re-enqueues itself for its next attempt."""
    def retry(delay: float) -> None:
        if delay > 0:
            task_wrapper.schedule(args=args, kwargs={"attempt": attempt + 1}, delay=delay)
        else:
            task_wrapper(*args, attempt=attempt + 1)
    return retry


def _recheck_in(wait_left: float) -> float:
    """When a job held for the share looks again: when its oldest work reaches the bound,
    if that comes before SHARE_RECHECK_SECONDS (what is already past it and still waits —
    a chunk whose last turns are newer — waits for the next look)."""
    return SHARE_RECHECK_SECONDS if wait_left <= 0 else min(SHARE_RECHECK_SECONDS, wait_left + 0.5)


def _policy(task: Task | None) -> dict[str, Any]:
    """The retry policy's hooks for this run of a task."""
    task_id = task.id if task is not None else None
    return {"task_id": task_id,
            "record_failure": lambda error: record_failure(task_id, error, task)}


class JobRunner:
    """The jobs' bodies, with the worker's resources; one per process that runs jobs."""

    def __init__(self, config: Config, queue: HiloHuey) -> None:
        """Open what the jobs run with; `start` also attaches it (use that)."""
        self.config = config
        self.queue = queue
        self.writer = Writer.from_config(config, Durability.NORMAL)
        # How each server and model takes a request for JSON, kept in the memory database.
        json_modes = JsonModes(self.writer)
        # Each learning call's engine time and outcome, kept (app/learn/engine_time.py).
        writer = self.writer

        def recorded(call: JsonCall) -> None:
            record_call(writer, call)

        # What learns (distill, cards, diary, consolidation): [llm] distill_url's server,
        # else the chat's, whose person it then waits for (workers/chat_activity.py) and
        # of whose engine time it takes at most its share ([learn] engine_share).
        separate = config.llm.distill_url and config.llm.distill_url != config.llm.url
        self.model = ModelClient.from_config(config, json_modes=json_modes, on_json_call=recorded,
                                             before_json_call=None if separate
                                             else self._within_share)
        self.learner = (ModelClient.from_config(config, url=config.llm.distill_url,
                                                json_modes=json_modes, on_json_call=recorded)
                        if separate else self.model)
        self.chat_server: str | None = None if separate else config.llm.url
        # None with [embedder] kind = "none".
        self.embedder: Embedder | None = make_embedder(config, client=self.model)
        # Scheduled tasks run as turns, sharing the writer and the model client; a task's
        # turn is handed off like any other, so its reply is distilled too.
        self.chat_service = ChatService(config, writer=self.writer, model=self.model,
                                        handoff=QueueHandoff(queue))
        self.agent = Agent(self.chat_service, surface="task")
        self._stop_counting: Callable[[], None] | None = None
        # "This process is alive", for workers on other hosts judging its locks.
        self._owner_beat = owner_beat()

    @classmethod
    def start(cls, config: Config) -> JobRunner:
        """Bind the queue and run this process's jobs with a new runner."""
        runner = cls(config, configure(config))
        runner._stop_counting = job_metrics.install(runner.queue)  # counts for /metrics
        jobs.attach(runner)
        return runner

    def close(self) -> None:
        """Stop running jobs here; the writer commits what it holds, then closes."""
        jobs.detach(self)
        self._owner_beat.stop()
        if self._stop_counting is not None:
            self._stop_counting()
        self.chat_service.close()  # leaves the shared writer and model client open
        self.writer.close()
        if self.learner is not self.model:
            self.learner.close()
        self.model.close()

    def prepare(self) -> None:
        """At worker start, before any job runs: this process's owner heartbeat started,
        the locks of workers that are gone flushed (a live worker's are kept), the
        config.toml tasks synced into the database, undone work re-enqueued, and what came
        due while no worker ran queued to run now."""
        self._owner_beat.start()
        flushed = flush_stale_locks()
        if flushed:
            log.warning("worker.stale_locks_flushed", locks=flushed)
        counts = sync_config_tasks(self.writer, self.config)
        log.info("scheduler.config_tasks", **counts.to_json())
        jobs.reconcile(0.0)
        jobs.run_scheduled_tasks_now()

    # -- the user first ------------------------------------------------------------------------

    def _waits_for_chat(self, job: TaskWrapper, args: tuple, kwargs: dict[str, Any],
                        since: float | None, **ids: Any) -> bool:
        """When the person is using the model server: re-enqueue the job for when they
        may not be (same attempt), and say so."""
        deferral = chat_deferral(self.queue, self.config, self.chat_server, since)
        if deferral is None:
            return False
        delay = max(0.05, deferral.until - time.time())
        job.schedule(args=args, kwargs=kwargs, delay=delay)
        log.debug("job.deferred", job=job.func.__name__, reason=deferral.reason,
                  retry_in_seconds=round(delay, 1), **ids)
        return True

    def _free(self, since: float | None) -> Callable[[], bool]:
        """Whether a running job may make its next model call."""
        return lambda: chat_deferral(self.queue, self.config, self.chat_server, since) is None

    def _chat_began(self, since: float | None) -> Callable[[], bool]:
        """Watched while a call runs, which gives way when it says yes: a person has
        started a chat on the model server since now (one cheap read, many times a
        second), and the job's work may still wait for them."""
        started = time.time()
        return lambda: (chat_began_after(self.queue, self.chat_server, started)
                        and not self._free(since)())

    # -- learning's share of the engine ---------------------------------------------------------

    def _share(self, job: str | None) -> ShareCheck:
        """Learning's spend against its share, the next call of `job` counted (read on the
        writer, after the learning calls it still holds)."""
        share = self.config.learn.engine_share
        return self.writer.submit(lambda con: share_check(con, share, job))

    def _within_share(self, job: str) -> None:
        """Before each learning call on the chat's server: ShareSpent when learning's engine
        seconds, this call counted at its job's typical cost, would pass [learn]
        engine_share of the chat's."""
        check = self._share(job)
        if not check.allows:
            raise ShareSpent(check.line())

    def _share_wait(self) -> float:
        """How long turns wait for the share before they are learned by rule (0 with a
        share of 0: rules only, at once)."""
        learn = self.config.learn
        return 0.0 if learn.engine_share <= 0 else learn.share_wait_minutes * 60

    def _held_for_share(self, job: TaskWrapper, args: tuple, attempt: int, user_id: str,
                        session_id: str) -> None:
        """The share is spent: what has waited past [learn] share_wait_minutes is learned by
        rule now, the explicit statements of what still waits are kept by rule at once, and
        the session's one job comes back when credit may have returned or its next turn
        reaches that bound."""
        config, writer = self.config, self.writer
        wait = self._share_wait()
        cutoff = to_rfc3339(datetime.fromtimestamp(time.time() - wait, UTC))
        by_rule = learn_by_rules(writer, config, user_id, session_id, said_before=cutoff)
        kept = keep_said_by_rule(writer, config, user_id, session_id)  # what waits: at once
        with reading(writer) as con:
            since = waiting_since(con, config, user_id, session_id)
        log.info("learn.held_for_share", user_id=user_id, session_id=session_id,
                 by_rule_events=by_rule.events, by_rule_cards=by_rule.cards,
                 kept_by_rule_meanwhile=kept, still_waiting=since is not None)
        if since is None:
            return
        self._waiting_again("learn", job, args, attempt, user_id, session_id)(
            _recheck_in(since + wait - time.time()))

    # -- per turn and per session ------------------------------------------------------------

    def distill(self, user_id: str, session_id: str, event_ids: list[int], attempt: int,
                task: Task | None) -> None:
        """A turn's events are a hint: the session's turns are learned together."""
        self._learn(jobs.distill, (user_id, session_id, event_ids), user_id, session_id,
                    attempt, task)

    def compact(self, user_id: str, session_id: str, attempt: int, task: Task | None) -> None:
        self._learn(jobs.compact, (user_id, session_id), user_id, session_id, attempt, task)

    def _learn(self, job: TaskWrapper, args: tuple, user_id: str, session_id: str,
               attempt: int, task: Task | None) -> None:
        config, writer = self.config, self.writer
        ids = {"user_id": user_id, "session_id": session_id}
        with reading(writer) as con:
            since = waiting_since(con, config, user_id, session_id)
        if since is None:
            waiting.started(self.queue, "learn", user_id, session_id)
            jobs.embed(user_id)  # nothing to learn; the turn's events may still need vectors
            return
        if self._waits_for_chat(job, args, {"attempt": attempt}, since, **ids):
            waiting.still_waiting(self.queue, "learn", user_id, session_id)
            # The turns' vectors meanwhile: a new conversation searches them at once (the
            # embedding model is another, quick one).
            jobs.embed(user_id)
            return
        # On the chat's server, one learning run at a time: the others come back in a
        # moment, and each finds the prompt cache as the last one left it.
        with self._one_on_server() as free:
            if not free:
                job.schedule(args=args, kwargs={"attempt": attempt}, delay=LEARNER_BUSY_SECONDS)
                waiting.still_waiting(self.queue, "learn", user_id, session_id)
                return
            self._learn_locked(job, args, user_id, session_id, attempt, task, since, ids)

    def _learn_locked(self, job: TaskWrapper, args: tuple, user_id: str, session_id: str,
                      attempt: int, task: Task | None, since: float, ids: dict[str, str]) -> None:
        config, writer = self.config, self.writer
        with exclusive(waiting.lock_name("learn", user_id, session_id)) as mine:
            # Learning now, or another worker is: either way a later turn may enqueue one.
            waiting.started(self.queue, "learn", user_id, session_id)
            if not mine:
                # Another worker is learning this session; it takes everything still undone.
                log.debug("learn.locked", **ids)
                return
            if self.chat_server is not None and not self._share(None).allows:
                # Nothing to ask now: the chat's place in the cache stays as it is.
                self._held_for_share(job, args, attempt, user_id, session_id)
                return
            after = chat_to_continue(self.queue, config, self.chat_server, user_id, session_id)
            if after is None:  # this run's questions will take the chat's place in the cache
                forget_last_chat(self.queue, self.chat_server)
            outcome = attempt_job(
                config, job.func.__name__, attempt, ids,
                work=lambda: learn_session(writer, self.learner, config, user_id, session_id,
                                           go_on=self._free(since),
                                           interrupted=self._chat_began(since),
                                           after=after),
                fallback=lambda: learn_by_rules(writer, config, user_id, session_id),
                retry=self._waiting_again("learn", job, args, attempt + 1, user_id, session_id),
                **_policy(task),
            )
        if outcome.status == "retrying":
            return
        learned = outcome.value
        log.info("learn.done", calls=learned.calls, cards=learned.cards, facts=learned.facts,
                 events=learned.events, stopped=learned.stopped, fell_back=learned.fell_back,
                 **ids)
        if learned.fell_back:  # visible, never silent: logged and kept with the failures
            error = JobDegraded(f"{job_purpose(job.func.__name__, (user_id, session_id), {})}: "
                                "two unusable answers in a row, so its fallback was written "
                                f"instead (what was left, learned by rule): "
                                f"{learned.unusable[-1]}")
            log.error("learn.fell_back", error=str(error), **ids)
            _policy(task)["record_failure"](error)
        if learned.held:
            self._held_for_share(job, args, attempt, user_id, session_id)
        elif learned.stopped:
            # The person came back: the rest once they are gone again (one job waits).
            self._waiting_again("learn", job, args, attempt, user_id, session_id)(
                LEARNER_BUSY_SECONDS)
        jobs.embed(user_id)  # the turns' events, and the new facts and cards

    def _waiting_again(self, kind: str, job: TaskWrapper, args: tuple, attempt: int,
                       user_id: str, session_id: str) -> Callable[[float], None]:
        """How a session's job comes back `delay` seconds later, as attempt `attempt`: as
        the one job of its kind that waits for the session (workers/waiting.py), or not at
        all when another already waits (that one does the work)."""
        def again(delay: float) -> None:
            task = job.s(*args, attempt=attempt, delay=max(0.0, delay))
            if not waiting.enqueue_waiting(self.queue, kind, task, user_id, session_id):
                log.debug("job.not_requeued", job=job.func.__name__, user_id=user_id,
                          session_id=session_id, note=f"another {kind} job waits for it")
        return again

    def embed(self, user_id: str | None, attempt: int, task: Task | None) -> None:
        embedder = self.embedder
        if embedder is None:
            return
        with exclusive(f"embed:{user_id}") as mine:
            if not mine:
                return  # another worker is embedding this user's backlog right now
            attempt_job(
                self.config, "embed", attempt, {"user_id": user_id},
                work=lambda: embed_pending(self.writer, embedder, user_id),
                # The per-owner errors are stored; reconcile finds those owners again later.
                fallback=lambda: 0,
                retry=_again(jobs.embed, (user_id,), attempt),
                **_policy(task),
            )

    def diary(self, user_id: str, session_id: str, attempt: int, task: Task | None) -> None:
        writer = self.writer
        with reading(writer) as con:
            row = con.execute("SELECT ended_at, last_event_at FROM sessions WHERE user_id = ? "
                              "AND id = ?", (user_id, session_id)).fetchone()
        since = parse_rfc3339(row[0]).timestamp() if row and row[0] else None
        if self._waits_for_chat(jobs.diary, (user_id, session_id), {"attempt": attempt}, since,
                                user_id=user_id, session_id=session_id):
            waiting.still_waiting(self.queue, "diary", user_id, session_id)
            return
        with self._one_on_server() as free:
            if not free:  # a learning call runs on the chat's server: one at a time
                jobs.diary.schedule(args=(user_id, session_id), kwargs={"attempt": attempt},
                                    delay=LEARNER_BUSY_SECONDS)
                waiting.still_waiting(self.queue, "diary", user_id, session_id)
                return
            # The entry has waited for the share since the session's last turn.
            last = parse_rfc3339(row[1]).timestamp() if row and row[1] else None
            self._diary_locked(user_id, session_id, attempt, task, since or last)

    def _diary_locked(self, user_id: str, session_id: str, attempt: int, task: Task | None,
                      since: float | None) -> None:
        config, writer = self.config, self.writer
        held: list[bool] = []

        def work() -> str:
            try:
                return write_diary(writer, self.learner, config, user_id, session_id,
                                   after=chat_to_continue(self.queue, config, self.chat_server,
                                                          user_id, session_id))
            except ShareSpent:
                if since is None or time.time() - since >= self._share_wait():
                    return write_diary(writer, None, config, user_id, session_id,
                                       extractive=True)
                held.append(True)
                return "held"

        with exclusive(waiting.lock_name("diary", user_id, session_id)) as mine:
            waiting.started(self.queue, "diary", user_id, session_id)
            if not mine:
                return  # another worker writes this session's entry now
            attempt_job(
                config, "diary", attempt, {"user_id": user_id, "session_id": session_id},
                work=work,
                fallback=lambda: write_diary(writer, None, config, user_id, session_id,
                                             extractive=True),
                retry=self._waiting_again("diary", jobs.diary, (user_id, session_id),
                                          attempt + 1, user_id, session_id),
                **_policy(task),
            )
        if held:  # the entry waits for learning's share, as the session's turns do
            wait_left = (since or time.time()) + self._share_wait() - time.time()
            self._waiting_again("diary", jobs.diary, (user_id, session_id), attempt, user_id,
                                session_id)(_recheck_in(wait_left))

    def _one_on_server(self) -> Any:
        """On the chat's server, one learning run at a time (it serves one request at a
        time): a context whose value says whether this one may run now."""
        if self.chat_server is None or self.config.queue.chat_idle_seconds <= 0:
            return nullcontext(True)
        return exclusive(f"learn-on:{server_id(self.chat_server)}")

    # -- periodic ------------------------------------------------------------------------------

    def consolidate(self, attempt: int, task: Task | None, since: float | None = None) -> None:
        config, writer, queue = self.config, self.writer, self.queue
        since = since or (task_id_time(task.id) if task is not None else None) or time.time()
        if self._waits_for_chat(jobs.consolidate, (), {"attempt": attempt, "since": since}, since):
            return
        last_decay_at = queue.get(LAST_DECAY_KEY, peek=True)

        def work() -> Any:
            try:
                return consolidate_memory(writer, self.learner, config,
                                          last_decay_at=last_decay_at,
                                          record_decay=self._record_decay)
            except ShareSpent:  # learning's share is spent: old cards fold by quoting
                return consolidate_memory(writer, None, config,
                                          last_decay_at=queue.get(LAST_DECAY_KEY, peek=True),
                                          record_decay=self._record_decay, extractive=True)

        attempt_job(
            config, "consolidate", attempt, {},
            work=work,
            fallback=lambda: consolidate_memory(writer, None, config,
                                                last_decay_at=queue.get(LAST_DECAY_KEY, peek=True),
                                                record_decay=self._record_decay, extractive=True),
            retry=_again(jobs.consolidate, (), attempt),
            **_policy(task),
        )

    def _record_decay(self, decayed_at: str) -> None:
        self.queue.put(LAST_DECAY_KEY, decayed_at)

    def reconcile(self, grace_seconds: float | None) -> None:
        """The reconcile sweep: enqueue the work the database says is undone — one job
        per session, and none for a session whose job waits or runs (workers/waiting.py) —
        and count what the turns since the last sweep recalled."""
        work = find_undone_work(self.writer, self.config, grace_seconds=grace_seconds)
        fold_recall_counts(self.writer)  # what the turns recalled, for the memory page
        locked = {lock.name for lock in held_locks()}
        # At a worker's start (no grace) a key without its job is stale at once — unless
        # another worker runs: the job may be the one it just took, about to take its lock.
        stale_after = (0.0 if grace_seconds == 0 and not other_workers_alive()
                       else waiting.STALE_AFTER_SECONDS)
        for gone in waiting.stale_waiting(self.queue, locked, stale_after=stale_after):
            log.warning("reconcile.waiting_job_lost", kind=gone.kind, user_id=gone.user_id,
                        session_id=gone.session_id)
            waiting.started(self.queue, gone.kind, gone.user_id, gone.session_id)
        learning: dict[tuple[str, str], Task] = {}
        for user_id, session_id, event_ids in work.distill:
            learning.setdefault((user_id, session_id), jobs.distill.s(user_id, session_id,
                                                                      event_ids))
        for user_id, session_id in work.compact:
            learning.setdefault((user_id, session_id), jobs.compact.s(user_id, session_id))
        enqueued = {"learn": 0, "diary": 0}
        due = [("learn", ids, task) for ids, task in learning.items()]
        due += [("diary", ids, jobs.diary.s(*ids)) for ids in work.diary]
        for kind, (user_id, session_id), task in due:
            if waiting.lock_name(kind, user_id, session_id) in locked:
                continue  # its job runs now, and takes what is undone
            enqueued[kind] += waiting.enqueue_waiting(self.queue, kind, task, user_id, session_id)
        if self.embedder is not None:
            with reading(self.writer) as con:
                if pending_owners(con, self.embedder.model, limit=1):
                    jobs.embed(None)
        if work:
            log.info("reconcile.enqueued", learn=enqueued["learn"], diary=enqueued["diary"],
                     sessions_to_learn=len(learning), diaries_due=len(work.diary),
                     closed_sessions=len(work.closed))

    def run_scheduled_tasks(self) -> None:
        config, writer = self.config, self.writer
        scheduler_tick(config, writer, chat_service=self.agent,
                       deliver=lambda result: deliver_run(config, writer, result))

    def learn_macros(self) -> None:
        learn_all_macros(self.writer, self.config)
