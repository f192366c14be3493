"""`hilo doctor`: is this installation healthy, and if not, what to do.

Each check returns OK, WARN or FAIL with a one-line detail and, when not OK, the fix.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from enum import Enum

import apsw

from app.config import Config
from app.datadir import DataDir
from app.db import (
    FTS_TABLES,
    MIGRATIONS_TABLE,
    applied_migrations,
    available_migrations,
    connect_readonly,
    file_damage,
    schema_version,
)
from app.memory.bootstrap import read_bootstrap
from app.model.probe import ModelStatus, probe_embedder, probe_models
from app.model.token_count import estimate_tokens
from app.ops.transfer.memory_md import imported_memory_md_path
from workers.inspection import QueueError, QueueView, learning_cost
from workers.queue import configure as bind_queue
from workers.queue import held_locks

__all__ = ["LOW_DISK_WARN", "LOW_DISK_FAIL", "Status", "Check", "RESTORE_FIX",
           "check_configuration", "check_data_dir", "check_database", "check_disk",
           "check_bootstrap", "check_model_server", "STALLED_WORKER_SECONDS", "BACKLOG_JOBS",
           "BACKLOG_AGE_SECONDS", "OLD_FAILURE_SECONDS", "START_WORKER", "SEE_FAILED",
           "check_queue", "LOCK_STUCK_MODEL_CALLS", "check_queue_locks", "check_learning",
           "check_terminal_sandbox", "run_checks"]

LOW_DISK_WARN = 1 << 30
LOW_DISK_FAIL = 100 << 20


class Status(str, Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status.value}


RESTORE_FIX = (
    "stop the worker and the server, then `hilo restore <your last good backup>`; "
    "without one, move memory.sqlite3 aside and run `hilo init` to start a new memory"
)


def check_configuration(config: Config) -> list[Check]:
    """Which config file was read (or that none was), and the time zone tasks run in."""
    origin = config.origin
    if origin.file is not None:
        found = Check("configuration", Status.OK,
                      f"{origin.file} (from {origin.file_found_by})")
    else:
        looked = " or ".join(str(p) for p in origin.searched) or "the usual places"
        found = Check("configuration", Status.OK,
                      f"built-in defaults and HILO_* variables (no {looked})")
    return [found, Check("time zone", Status.OK,
                         f"{config.schedule.timezone} (scheduled tasks run in it)")]


def check_data_dir(config: Config) -> Check:
    where = f"{config.data_dir} (from {config.origin.data_dir_from})"
    if config.data_dir.is_dir():
        return Check("data directory", Status.OK, where)
    return Check("data directory", Status.FAIL, f"{where} does not exist",
                 "run `hilo init` (or pass the right --data-dir)")


def check_database(config: Config) -> list[Check]:
    """Schema version, SQLite integrity and FTS5 index integrity of memory.sqlite3."""
    path = DataDir.of(config).memory_db
    if not path.exists():
        return [Check("memory database", Status.FAIL, f"{path} does not exist", "run `hilo init`")]
    damage = file_damage(path, MIGRATIONS_TABLE)
    if damage is not None:
        return [Check("memory database", Status.FAIL, f"{path} {damage}", RESTORE_FIX)]
    try:
        con = connect_readonly(path)
        try:
            return [_check_schema(con), _check_integrity(con, path), *_check_fts(path)]
        finally:
            con.close()
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        return [Check("memory database", Status.FAIL, f"{path} is corrupt: {exc}", RESTORE_FIX)]


def _check_schema(con: apsw.Connection) -> Check:
    have = schema_version(con)
    shipped = available_migrations()
    want = shipped[-1].number
    if have > want:
        return Check("schema version", Status.FAIL, f"{have}, newer than this Hilo ({want})",
                     "upgrade Hilo, or restore a backup made by this version")
    # By name, not by the highest number: migrations are numbered apart and a lower one
    # may arrive after a higher one was applied.
    applied = set(applied_migrations(con))
    pending = [m.name for m in shipped if m.name not in applied]
    if not pending:
        return Check("schema version", Status.OK, f"{have}")
    return Check("schema version", Status.WARN,
                 f"{have}, and {len(pending)} to apply: {', '.join(pending)}",
                 "run `hilo init` to migrate")


def _check_integrity(con: apsw.Connection, path) -> Check:
    problems = [row[0] for row in con.execute("PRAGMA integrity_check(20)")]
    if problems == ["ok"]:
        return Check("integrity", Status.OK, "PRAGMA integrity_check: ok")
    return Check("integrity", Status.FAIL, f"{path}: {'; '.join(problems[:3])}", RESTORE_FIX)


def _check_fts(path) -> list[Check]:
    # FTS5's integrity-check is spelled as an INSERT, so it needs a writable handle;
    # it changes nothing.
    con = apsw.Connection(str(path))
    con.setbusytimeout(5000)
    checks = []
    try:
        for table in FTS_TABLES:
            try:
                con.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")
                checks.append(Check(f"full-text index {table}", Status.OK, "in sync"))
            except apsw.SQLError as exc:
                if "no such table" in str(exc):
                    continue  # reported by the schema check
                checks.append(Check(f"full-text index {table}", Status.FAIL, str(exc),
                                    "run `hilo rebuild` to re-derive the full-text indexes"))
            except apsw.CorruptError as exc:
                checks.append(Check(f"full-text index {table}", Status.FAIL, str(exc),
                                    "run `hilo rebuild` to re-derive the full-text indexes"))
    finally:
        con.close()
    return checks


def check_disk(config: Config) -> Check:
    target = config.data_dir if config.data_dir.exists() else config.data_dir.parent
    while not target.exists():
        target = target.parent
    free = shutil.disk_usage(target).free
    detail = f"{free / (1 << 30):.1f} GiB free at {target}"
    if free < LOW_DISK_FAIL:
        return Check("free disk", Status.FAIL, detail, "free disk space: SQLite needs room to commit")
    if free < LOW_DISK_WARN:
        return Check("free disk", Status.WARN, detail, "free disk space before it runs out")
    return Check("free disk", Status.OK, detail)


def check_bootstrap(config: Config) -> Check:
    path = DataDir.of(config).bootstrap
    if not path.exists():
        return Check("MEMORY.md", Status.WARN, f"{path} does not exist",
                     "run `hilo init` to write a template, then edit it")
    tokens = estimate_tokens(read_bootstrap(path))  # what is sent: comments are not
    cap = config.memory.bootstrap_max_tokens
    if tokens > cap:
        return Check("MEMORY.md", Status.WARN, f"about {tokens} tokens; only {cap} are sent",
                     "shorten MEMORY.md or raise [memory] bootstrap_max_tokens")
    pending = imported_memory_md_path(config)
    if pending.exists():
        return Check("MEMORY.md", Status.WARN, f"about {tokens} tokens; an imported one waits at "
                     f"{pending}, which no conversation reads",
                     "read it, then run `hilo memory accept-import` to use it, or delete it")
    return Check("MEMORY.md", Status.OK, f"about {tokens} tokens")


def check_model_server(config: Config) -> list[Check]:
    """The model server, the chat and distill models (app/model/probe.py), and the embedder,
    asked to embed a word: a missing embedding model leaves search to keywords."""
    report = probe_models(config, timeout=config.llm.connect_timeout_seconds)
    if not report.server_ok:
        return [Check("model server", Status.FAIL, report.server_problem,
                      "chat cannot work without it; memory and the queue keep working")]
    checks = [Check("model server", Status.OK, f"{config.llm.url} answers")]
    checks += [_model_check(m) for m in report.models if m.role != "embedding"]
    embedder = probe_embedder(config)
    if embedder is None:
        checks.append(Check("embedder", Status.OK,
                            'none ([embedder] kind = "none"): search by keywords only'))
    else:
        checks.append(_model_check(embedder))
    return checks


def _model_check(model: ModelStatus) -> Check:
    """A missing chat model fails (no chat can work); a missing distill or embedding model
    warns: learning falls back to rules, search to keywords."""
    name = "embedder" if model.role == "embedding" else f"{model.role} model"
    if model.ready:
        return Check(name, Status.OK, model.name)
    status = Status.FAIL if model.role == "chat" else Status.WARN
    return Check(name, status, f"{model.name}: {model.problem}", model.fix)


# The queue: a worker that has not polled for this long while jobs are due is stalled; a
# backlog this deep or this old is a worker falling behind; a failure this old is one
# nobody looked at.
STALLED_WORKER_SECONDS = 120.0
BACKLOG_JOBS = 1000
BACKLOG_AGE_SECONDS = 600.0
OLD_FAILURE_SECONDS = 24 * 3600.0
START_WORKER = "start the worker: `hilo worker` (or `honcho start`)"
SEE_FAILED = "see `hilo queue failed`; retry with `hilo queue retry --all-failed`"


def _jobs(n: int) -> str:
    return f"{n} job" + ("" if n == 1 else "s")


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def check_queue(config: Config, now: float | None = None) -> list[Check]:
    """The job queue, read from Huey's storage: reachable, a worker polling while jobs
    are due, no deep or old backlog, no failure left unattended for a day."""
    view = QueueView(config)
    try:
        status = view.status(now)
    except QueueError as exc:
        return [Check("queue", Status.FAIL, str(exc), _queue_fix(config, view.backend, exc))]
    checks = [Check("queue", Status.OK, f"{status.backend}: {status.pending} pending, "
                    f"{status.scheduled} scheduled, {status.failed} failed")]

    worker, due, oldest = status.worker, status.due, status.oldest_pending
    since = worker.seconds_since_poll
    polled = "no worker has ever polled it" if since is None else \
        f"no worker has polled it for {_ago(since)}"
    if due and (since is None or since > STALLED_WORKER_SECONDS):
        waited = oldest.waiting_seconds if oldest else None
        stalled = waited is None or waited > STALLED_WORKER_SECONDS
        detail = (f"{_jobs(due)} {'is' if due == 1 else 'are'} due"
                  + (f", the oldest for {_ago(waited)}" if waited else "") + f", and {polled}")
        checks.append(Check("queue worker", Status.FAIL if stalled else Status.WARN, detail,
                            START_WORKER))
    elif since is not None and since <= STALLED_WORKER_SECONDS:
        checks.append(Check("queue worker", Status.OK,
                            f"pid {worker.pid} on {worker.host} polled {_ago(since)} ago"))
    else:
        checks.append(Check("queue worker", Status.OK, f"nothing is due ({polled})"))

    waited = oldest.waiting_seconds if oldest else 0.0
    if status.pending > BACKLOG_JOBS or waited > BACKLOG_AGE_SECONDS:
        polling = since is not None and since <= STALLED_WORKER_SECONDS
        fix = ("the worker is falling behind: raise [queue] workers, and check the model "
               "server (slow or unreachable models make jobs wait); `hilo queue status` shows "
               "which tasks") if polling else START_WORKER
        checks.append(Check(
            "queue backlog", Status.WARN,
            f"{_jobs(status.pending)} pending, the oldest due for {_ago(waited)}", fix))
    else:
        checks.append(Check("queue backlog", Status.OK, f"{_jobs(status.pending)} pending"))

    failures, age = status.failed, status.oldest_failure_age_seconds
    if failures and (age is None or age > OLD_FAILURE_SECONDS):
        when = "of unknown age" if age is None else f"the oldest {_ago(age)} old"
        checks.append(Check("failed jobs", Status.WARN, f"{failures} failed, {when}",
                            SEE_FAILED))
    elif failures:
        checks.append(Check("failed jobs", Status.OK,
                            f"{failures} in the last day (`hilo queue failed` shows them)"))
    else:
        checks.append(Check("failed jobs", Status.OK, "none"))
    return checks


def _queue_fix(config: Config, backend: str, exc: Exception) -> str:
    if backend == "redis":
        return "start redis-server or fix [queue] redis_url"
    if "full" in str(exc).lower() or check_disk(config).status is Status.FAIL:
        return (f"free disk space where {config.data_dir} is: the queue cannot write; "
                "the worker goes on by itself once there is room")
    return ("stop the worker, move queue.sqlite3 aside and start the worker "
            "(the reconcile sweep re-enqueues undone work)")


# A lock is held for one run of a compact or embed job: a model call per chunk, each
# bounded by [llm] timeout_seconds. Held longer than this many of those, it is stuck.
LOCK_STUCK_MODEL_CALLS = 10


def check_queue_locks(config: Config, now: float | None = None) -> list[Check]:
    """Locks held by a worker that is gone, or held longer than their job could run."""
    view = QueueView(config)
    if not view.exists:
        return []
    try:
        bind_queue(config)
        locks = held_locks()
    except Exception as exc:  # noqa: BLE001 — reported by check_queue
        return [Check("queue locks", Status.WARN, f"cannot read the locks: {exc}")]
    now = time.time() if now is None else now
    bound = LOCK_STUCK_MODEL_CALLS * config.llm.timeout_seconds
    orphaned = [lock.name for lock in locks if not lock.owner_alive]
    stuck = [lock.name for lock in locks if lock.owner_alive and lock.taken_at is not None
             and now - lock.taken_at > bound]
    checks = []
    if orphaned:
        checks.append(Check("queue locks", Status.WARN,
                            f"{len(orphaned)} held by a worker that is gone: {', '.join(orphaned[:5])}",
                            "start the worker: it flushes them (other workers take them over)"))
    if stuck:
        checks.append(Check("queue locks", Status.FAIL,
                            f"{len(stuck)} held longer than their job could run ({_ago(bound)}): "
                            f"{', '.join(stuck[:5])}",
                            "restart the worker holding them (`hilo queue status` shows it)"))
    if not checks:
        checks.append(Check("queue locks", Status.OK, f"{len(locks)} held"))
    return checks


def check_learning(config: Config) -> Check:
    """Whether the learning model still answers, and what learning costs the engine beside
    the chat (app/learn/engine_time.py)."""
    cost = learning_cost(config)
    if cost is None:
        return Check("learning", Status.OK, "nothing learned with a model yet")
    if cost.stall is not None:
        return Check("learning", Status.WARN, cost.stall.line(),
                     "check the model server (its log, `hilo queue failed`); a model that is "
                     "just slow needs a higher [llm] learning_deadline_seconds")
    if cost.hold is not None:  # by design, not a fault: the turns are learned in time
        return Check("learning", Status.OK, cost.hold.line())
    return Check("learning", Status.OK, cost.spend.line())


def check_terminal_sandbox(config: Config) -> Check:
    """Whether the agent's terminal can run its commands in bubblewrap."""
    # start-up: the agent's tools load only for this check, not for the doctor's others
    from app.turn.tools import ToolFailed
    from app.turn.tools.terminal_sandbox import sandbox_for

    tools = config.tools
    if not tools.terminal:
        return Check("terminal sandbox", Status.OK, "the terminal is off ([tools] terminal)")
    if tools.terminal_sandbox == "none":
        return Check("terminal sandbox", Status.WARN,
                     "commands run unsandboxed ([tools] terminal_sandbox = \"none\")",
                     'install bubblewrap and set [tools] terminal_sandbox = "bubblewrap"')
    try:
        sandbox_for(config)
    except ToolFailed as exc:
        return Check("terminal sandbox", Status.WARN, exc.message,
                     "apt-get install bubblewrap util-linux (and allow user namespaces)")
    return Check("terminal sandbox", Status.OK,
                 "bubblewrap: no network, no Unix socket, read-only but the working folder, "
                 f"{tools.terminal_memory_mb} MiB at most")


def run_checks(config: Config) -> list[Check]:
    checks = check_configuration(config)
    checks.append(check_data_dir(config))
    if checks[-1].status is Status.OK:
        checks += check_database(config)
        checks.append(check_bootstrap(config))
    checks.append(check_disk(config))
    checks += check_queue(config)
    checks += check_queue_locks(config)
    checks.append(check_learning(config))
    checks += check_model_server(config)
    checks.append(check_terminal_sandbox(config))
    return checks
