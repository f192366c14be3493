"""Backup, restore and rebuild of the memory database.

`backup` copies memory.sqlite3 while the front-end and the worker keep writing: SQLite's
online backup API, stepped a few pages at a time for progress, all inside one read
transaction on the source, so the copy is the snapshot of the moment it began (WAL:
the writers never wait for it) and the copy is never restarted by their commits.
`restore` puts a verified backup in place of the live file, keeping the old one;
it refuses while a worker or server is running (their pid files, app/datadir.py).
`rebuild` re-derives the full-text indexes (which also drops the words of rows deleted
before the indexes deleted securely) and hashes the keys facts forgotten before keys were
forgotten too kept; with all_layers, it first clears every derived layer so the workers
redo it from the events and the user's own edits (they are the truth; everything else is
derived from them).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import apsw

from app.config import Config
from app.datadir import BOOTSTRAP_FILE, DataDir
from app.db import (
    FTS_TABLES,
    Durability,
    applied_migrations,
    available_migrations,
    connect,
    connect_readonly,
    migrate,
    schema_version,
)
from app.errors import Conflict, HiloError
from app.events import reset_derived_marks
from app.memory import (
    clear_agent_facts,
    clear_agent_profile,
    clear_cards,
    clear_diary,
    restore_user_facts,
)
from app.memory.embeddings import delete_every_vector
from app.memory.facts import forget_old_keys
from app.recall.vectors import rebuild_indexes

__all__ = ["Progress", "PAGES_PER_STEP", "REBUILD_WORKER", "REQUIRED_TABLES", "BackupError",
           "AlreadyRunning", "BackupReport", "memory_md_copy", "snapshot", "backup",
           "RestoreReport", "verify_backup", "restore", "RebuildReport", "CLEAR_STEPS", "rebuild"]

# Called with (phase, done, total) as work advances; the CLI renders it with rich.
Progress = Callable[[str, int, int], None]

# 4 MiB of 4 KiB pages per step: fine-grained progress, negligible per-step overhead.
PAGES_PER_STEP = 1024
# How rebuild signs its changes in memory_log.
REBUILD_WORKER = "rebuild"
# The tables a file must have to be a Hilo memory database worth restoring.
REQUIRED_TABLES = ("sessions", "events", "context_cards", "profile", "facts", "diary")


class BackupError(HiloError):
    """A backup, restore or rebuild that could not be done; str() says what to do."""


class AlreadyRunning(BackupError, Conflict):
    """A pid file names a live process."""


# -- backup ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackupReport:
    source: Path
    dest: Path
    pages: int
    bytes: int
    steps: int
    seconds: float
    schema_version: int
    events: int
    integrity: str  # "ok"
    memory_md: Path | None = None  # the copy of MEMORY.md beside the database

    def to_dict(self) -> dict:
        return {**self.__dict__, "source": str(self.source), "dest": str(self.dest),
                "memory_md": str(self.memory_md) if self.memory_md else None}


def memory_md_copy(database_copy: Path) -> Path:
    """Where a backup keeps MEMORY.md: beside its database, named after it, so backups
    sharing a folder keep their own."""
    return database_copy.with_name(f"{database_copy.name}.{BOOTSTRAP_FILE}")


def _stamp(moment: datetime | None = None) -> str:
    """A UTC time for file names: 20261130T144428Z."""
    return (moment or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def _backup_target(dest: Path, overwrite: bool) -> Path:
    dest = Path(dest).expanduser()
    if dest.is_dir():
        dest = dest / f"memory-{_stamp()}.sqlite3"
    if dest.exists() and not overwrite:
        raise BackupError(f"{dest} already exists: choose another name or pass --overwrite")
    if not dest.parent.is_dir():
        raise BackupError(f"directory {dest.parent} does not exist: create it first")
    return dest


def _integrity(con: apsw.Connection) -> str:
    problems = [row[0] for row in con.execute("PRAGMA integrity_check(20)")]
    return "ok" if problems == ["ok"] else "; ".join(problems)


def _copy_database(source: apsw.Connection, target: Path, progress: Progress | None,
                   pages_per_step: int, phase: str) -> tuple[int, int]:
    """Copy `source` (already inside a read transaction) into a new file; (pages, steps)."""
    dest = connect(target, Durability.FULL)
    try:
        steps = 0
        with dest.backup("main", source, "main") as job:
            while not job.done:
                job.step(pages_per_step)
                steps += 1
                if progress:
                    progress(phase, job.pagecount - job.remaining, job.pagecount)
            pages = job.pagecount
    finally:
        dest.close()
    return pages, steps


@contextmanager
def snapshot(path: Path) -> Iterator[apsw.Connection]:
    """A read-only connection holding one read transaction: a fixed snapshot of `path`."""
    con = connect_readonly(path)
    try:
        con.execute("BEGIN")
        # BEGIN is deferred: the first read is what pins the snapshot.
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield con
    finally:
        if not con.getautocommit():
            con.execute("COMMIT")
        con.close()


def backup(config: Config, dest: Path, progress: Progress | None = None, *,
           overwrite: bool = False, pages_per_step: int = PAGES_PER_STEP) -> BackupReport:
    """Copy the memory database to `dest` (a file, or a directory to put a dated file in).

    Safe while the worker and the front-end write. The copy is written next to `dest`,
    checked with PRAGMA integrity_check, and only then renamed into place.
    """
    source_path = DataDir.of(config).memory_db
    if not source_path.exists():
        raise BackupError(f"no memory database at {source_path}: nothing to back up "
                          "(check --data-dir)")
    target = _backup_target(dest, overwrite)
    partial = target.with_name(f".{target.name}.partial")
    started = time.monotonic()
    try:
        with snapshot(source_path) as source:
            pages, steps = _copy_database(source, partial, progress, pages_per_step, "copy")
        if progress:
            progress("verify", 0, 1)
        check = connect_readonly(partial)
        try:
            integrity = _integrity(check)
            version = schema_version(check)
            (events,) = check.execute("SELECT count(*) FROM events").fetchone()
        finally:
            check.close()
        if integrity != "ok":
            raise BackupError(f"the copy of {source_path} failed its integrity check "
                              f"({integrity}): run `hilo doctor`; the source may be damaged")
        if progress:
            progress("verify", 1, 1)
        os.replace(partial, target)
    finally:
        for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            leftover.unlink(missing_ok=True)
    # The user's own instructions are memory too; the database alone would lose them.
    memory_md = DataDir.of(config).bootstrap
    memory_md_backup = memory_md_copy(target) if memory_md.is_file() else None
    if memory_md_backup is not None:
        shutil.copyfile(memory_md, memory_md_backup)
    return BackupReport(
        source=source_path, dest=target, pages=pages, bytes=target.stat().st_size,
        steps=steps, seconds=round(time.monotonic() - started, 3), schema_version=version,
        events=events, integrity=integrity, memory_md=memory_md_backup,
    )


# -- restore --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreReport:
    source: Path
    restored_to: Path
    kept_as: Path | None
    schema_version: int
    migrations_applied: list[str]
    events: int
    memory_md: Path | None = None  # MEMORY.md restored from beside the backup

    def to_dict(self) -> dict:
        return {**self.__dict__, "source": str(self.source), "restored_to": str(self.restored_to),
                "kept_as": str(self.kept_as) if self.kept_as else None,
                "memory_md": str(self.memory_md) if self.memory_md else None}


def verify_backup(path: Path) -> tuple[int, int]:
    """Check that `path` is an intact Hilo memory database this version can use.

    Returns (schema_version, events). Raises BackupError saying what is wrong.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise BackupError(f"{path} does not exist or is not a file")
    try:
        con = connect_readonly(path)
    except apsw.Error as exc:
        raise BackupError(f"{path} cannot be opened as a SQLite database: {exc}") from None
    try:
        integrity = _integrity(con)
        if integrity != "ok":
            raise BackupError(f"{path} is damaged (integrity check: {integrity}): "
                              "restore an older backup")
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise BackupError(f"{path} is not a Hilo memory database (no {', '.join(missing)} "
                              "table): pass a file made by `hilo backup`")
        known = {m.name for m in available_migrations()}
        unknown = sorted(set(applied_migrations(con)) - known)
        if unknown:
            raise BackupError(f"{path} was made by a newer Hilo ({', '.join(unknown)} is unknown "
                              "to this version): upgrade Hilo before restoring it")
        (events,) = con.execute("SELECT count(*) FROM events").fetchone()
        return schema_version(con), events
    except apsw.NotADBError:
        raise BackupError(f"{path} is not a SQLite database: pass a file made by `hilo backup`") from None
    finally:
        con.close()


def _close_live_database(path: Path) -> bool:
    """Checkpoint the live file's WAL into it and make sure no connection remains open.

    The last connection to close deletes the -wal and -shm files; if they survive ours,
    another process still has the database open, and moving the file under it would
    lose its writes (or pair the restored file with a foreign WAL). Returns False for a
    file too damaged to open: it is moved aside as it is, with its WAL.
    """
    try:
        con = connect(path, Durability.FULL)
        try:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            con.close()
    except (apsw.CorruptError, apsw.NotADBError):
        return False
    if Path(f"{path}-wal").exists():
        raise BackupError(
            f"another process has {path} open (a `hilo chat`, a server or worker without a "
            "pid file, or a SQLite tool): close it, then restore again"
        )
    Path(f"{path}-shm").unlink(missing_ok=True)
    return True


def restore(config: Config, src: Path, force: bool = False) -> RestoreReport:
    """Replace the memory database with the backup `src`, keeping the current file.

    Refuses while the worker or the server is running (their pid files name a live
    process) unless `force` — for a pid file whose number now belongs to an unrelated
    process; an open connection to the database is refused even then. The source is
    verified (integrity, Hilo schema, not newer than this version) before anything is
    touched; the current file is kept as memory.sqlite3.before-restore-<time>, and the
    restored database is migrated to this version's schema.
    """
    data_dir = DataDir.of(config)
    src = Path(src).expanduser()
    live = data_dir.memory_db
    if not force:
        _refuse_while_running(data_dir)
    if live.exists() and src.resolve() == live.resolve():
        raise BackupError(f"{src} is the live memory database itself: pass a backup file")
    verify_backup(src)

    data_dir.root.mkdir(parents=True, exist_ok=True)
    kept_as = _replace_live_database(src, live)
    memory_md = None
    if memory_md_copy(src).is_file():
        memory_md = data_dir.bootstrap
        if memory_md.exists():
            os.replace(memory_md, _unused(memory_md.with_name(
                f"{memory_md.name}.before-restore-{_stamp()}")))
        shutil.copyfile(memory_md_copy(src), memory_md)

    con = connect(live, Durability.FULL)
    try:
        applied = migrate(con)
        version = schema_version(con)
        (events,) = con.execute("SELECT count(*) FROM events").fetchone()
    finally:
        con.close()
    return RestoreReport(source=src, restored_to=live, kept_as=kept_as, schema_version=version,
                         migrations_applied=applied, events=events, memory_md=memory_md)


def _refuse_while_running(data_dir: DataDir) -> None:
    running = data_dir.running_processes()
    if running:
        one = len(running) == 1
        raise AlreadyRunning(
            f"cannot restore while {' and '.join(running)} "
            + ("is running: stop it first (pass --force only if that pid is not a Hilo "
               "process)" if one else "are running: stop them first (pass --force only "
               "if those pids are not Hilo processes)"))


def _replace_live_database(src: Path, live: Path) -> Path | None:
    """Copy `src` in as the live database; the file it replaces is kept (its path returned)."""
    incoming = live.with_name(f".{live.name}.restoring")
    try:
        # Copy through SQLite, not the file system: a source with its own -wal is read whole.
        with snapshot(src) as source:
            _copy_database(source, incoming, None, PAGES_PER_STEP, "restore")
        kept_as = None
        if live.exists():
            intact = _close_live_database(live)
            kept_as = _unused(live.with_name(f"{live.name}.before-restore-{_stamp()}"))
            os.replace(live, kept_as)
            if not intact and Path(f"{live}-wal").exists():
                # Never pair the restored file with the old one's WAL: keep it with its file.
                os.replace(f"{live}-wal", f"{kept_as}-wal")
            Path(f"{live}-shm").unlink(missing_ok=True)
        os.replace(incoming, live)
        return kept_as
    finally:
        for leftover in (incoming, Path(f"{incoming}-wal"), Path(f"{incoming}-shm")):
            leftover.unlink(missing_ok=True)


def _unused(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


# -- rebuild --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RebuildReport:
    fts_tables: list[str]
    all_layers: bool
    cleared: dict[str, int] = field(default_factory=dict)
    vector_indexes: int = 0  # approximate indexes written (blocks above ann_threshold)
    forgotten_keys: int = 0  # keys of facts forgotten before keys were, hashed now

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _clear_derived_layers(con: apsw.Connection, progress: Progress | None, total: int) -> dict[str, int]:
    """Delete what the workers derived and mark the events undone; user edits stay."""
    cleared: dict[str, int] = {}

    def step(name: str, done: int) -> None:
        if progress:
            progress(f"clear {name}", done, total)

    cleared["cards"] = clear_cards(con, worker=REBUILD_WORKER)
    step("cards", 1)

    # Facts the agent derived; a tombstone (deleted_at) is the user's edit and stays.
    cleared["facts"] = clear_agent_facts(con, worker=REBUILD_WORKER)
    # A user's fact that an agent fact had superseded is current again.
    cleared["user_facts_made_current"] = restore_user_facts(con, worker=REBUILD_WORKER)
    step("facts", 2)

    cleared["profile"] = clear_agent_profile(con, worker=REBUILD_WORKER)
    step("profile", 3)

    cleared["diary"] = clear_diary(con, worker=REBUILD_WORKER)
    step("diary", 4)

    cleared["embeddings"] = delete_every_vector(con)
    step("embeddings", 5)

    # Undone again: the reconcile sweep re-enqueues distill, compact and diary.
    cleared["events_reset"] = reset_derived_marks(con)
    step("events", 6)
    return cleared


CLEAR_STEPS = 6


def rebuild(config: Config, all_layers: bool = False,
            progress: Progress | None = None) -> RebuildReport:
    """Re-derive the full-text indexes and the approximate vector indexes (from the
    embeddings table); with all_layers, first clear every derived layer.

    all_layers deletes context cards, the agent's facts and profile keys, diary entries
    and embeddings, and marks every event undistilled and uncompacted, in one
    transaction; the worker then redoes them (its reconcile sweep finds the undone
    work). Facts and profile keys the user set, and tombstones, are kept.
    """
    path = DataDir.of(config).memory_db
    if not path.exists():
        raise BackupError(f"no memory database at {path}: run `hilo init` (or pass the right "
                          "--data-dir)")
    con = connect(path, Durability.FULL)
    cleared: dict[str, int] = {}
    total = (CLEAR_STEPS if all_layers else 0) + len(FTS_TABLES) + 1
    try:
        migrate(con)
        if all_layers:
            con.execute("BEGIN IMMEDIATE")
            try:
                cleared = _clear_derived_layers(con, progress, total)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        done = CLEAR_STEPS if all_layers else 0
        with con:  # before the indexes are rebuilt: the old keys leave them too
            forgotten_keys = forget_old_keys(con)
        for table in FTS_TABLES:
            # One statement, one transaction: readers see the old index until it commits.
            con.execute(f"INSERT INTO {table} ({table}) VALUES ('rebuild')")
            done += 1
            if progress:
                progress(f"index {table}", done, total)
        vector_indexes = rebuild_indexes(con, config.embedder.ann_threshold)
        if progress:
            progress("vector indexes", total, total)
    finally:
        con.close()
    return RebuildReport(fts_tables=list(FTS_TABLES), all_layers=all_layers, cleared=cleared,
                         vector_indexes=vector_indexes, forgotten_keys=forgotten_keys)
