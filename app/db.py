"""The one place that opens SQLite connections and migrates the memory database.

Every connection is APSW, WAL, with a busy timeout and foreign keys on. The connection
that writes events (the user's own words, the source of truth) commits with
synchronous=FULL; the worker's connection, whose writes can all be re-derived, uses
NORMAL. Readers get read-only connections and never block the writer (WAL).

A memory database is created whole (`create_memory_database`), so one that exists but
is empty, not SQLite, without its schema or failing a quick check has been damaged:
`check_memory_database` refuses it with what to do, and nothing opens it for writing.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import apsw

from app.errors import Unavailable
from app.timeutil import utc_now

__all__ = ["MEMORY_DB", "QUEUE_DB", "BUSY_TIMEOUT_MS", "CHECKPOINT_BUSY_MS", "MIGRATIONS_TABLE",
           "FTS_TABLES", "Durability", "DatabaseError", "SchemaTooNew", "CorruptDatabase",
           "SQLITE_HEADER", "QUICK_CHECK_SHOWN", "connect", "connect_readonly", "file_damage",
           "memory_damage", "corrupt_memory", "check_memory_database", "create_memory_database",
           "checkpoint_wal", "Migration", "available_migrations", "applied_migrations",
           "schema_version", "migrate", "merge_fts_segments"]

# File names in the data directory; app/datadir.py (DataDir) builds the paths.
MEMORY_DB = "memory.sqlite3"
QUEUE_DB = "queue.sqlite3"
BUSY_TIMEOUT_MS = 10_000
# A forget waits this long for readers to move past the deleted text before it leaves
# the rest of the write-ahead log to the next checkpoint.
CHECKPOINT_BUSY_MS = 2_000
MIGRATIONS_TABLE = "_hilo_migrations"
# The schema's full-text indexes (the migrations create them), for checks and rebuilds.
FTS_TABLES = ("events_fts", "cards_fts", "facts_fts", "event_labels_fts")


class Durability(Enum):
    """How a write connection commits. FULL survives power loss; NORMAL survives a crash."""

    FULL = "FULL"
    NORMAL = "NORMAL"


class DatabaseError(Unavailable):
    """A memory database Hilo cannot use; str() says what to do."""


class SchemaTooNew(DatabaseError):
    pass


class CorruptDatabase(DatabaseError):
    """An existing database file that is damaged or not a database at all; Hilo refuses to
    open it for writing, and has changed nothing in it."""


SQLITE_HEADER = b"SQLite format 3\x00"
# quick_check problems quoted in the one-line error.
QUICK_CHECK_SHOWN = 3


def connect(path: Path, durability: Durability = Durability.NORMAL) -> apsw.Connection:
    """A read-write connection. Creates the file (not its directory) if missing."""
    con = apsw.Connection(str(path))
    _configure(con)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute(f"PRAGMA synchronous = {durability.value}")
    return con


def connect_readonly(path: Path) -> apsw.Connection:
    """A read-only connection; refuses a missing file instead of creating one."""
    if not Path(path).exists():
        raise DatabaseError(
            f"no memory database at {path}: run `hilo init` (or pass the right --data-dir)"
        )
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    _configure(con)
    return con


def file_damage(path: Path, schema_table: str | None = None) -> str | None:
    """What is wrong with the existing SQLite file at `path`, or None if it looks sound.

    Wrong: 0 bytes, not a SQLite file, no `schema_table` (when given), or a failed
    `PRAGMA quick_check` (every page read once: about 3 ms a megabyte). Read-only.
    """
    size = Path(path).stat().st_size
    if size == 0:
        return "is empty (0 bytes)"
    with open(path, "rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            return "is not a SQLite database"
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            con.setbusytimeout(BUSY_TIMEOUT_MS)
            if schema_table is not None and not con.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (schema_table,)).fetchone():
                return f"has lost its schema (no {schema_table} table)"
            problems = [row[0] for row in con.execute(f"PRAGMA quick_check({QUICK_CHECK_SHOWN})")]
        finally:
            con.close()
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        return f"is damaged ({exc})"
    if problems != ["ok"]:
        said = " ".join("; ".join(problems).split())  # one line: the check's own has breaks
        return f"is damaged (quick check: {said})"
    return None


@dataclass(frozen=True)
class _Checked:
    """One quick check of a database file, kept to skip the next while the file is unchanged."""

    identity: tuple[int, int, int]  # the file's inode, size and mtime when checked
    damage: str | None
    at: float  # time.monotonic() when the check ended
    seconds: float  # what it cost


# This process's last quick check of each memory database. A quick check reads the
# whole file (about 10 s at 10^6 events): a start that opens the memory twice
# (DataDir.init, then the writer) checks it once, /health does not redo a start's check
# of an unchanged file, and concurrent callers wait for one check instead of each
# starting their own.
_checked: dict[str, _Checked] = {}
_checking = threading.Lock()
# A check that took longer than this is repeated by /health only after 100 times its
# duration, so a large memory costs a running server at most 1 % of a core.
_SLOW_CHECK_SECONDS = 1.0
_SLOW_CHECK_SHARE = 100


def memory_damage(path: Path, every: float | None = None) -> str | None:
    """file_damage(path, MIGRATIONS_TABLE), from this process's last check when the file
    has not changed since (and, with `every`, that check is younger than `every`
    seconds); see _checked for why."""
    key = str(path)
    with _checking:
        stat = Path(path).stat()
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        last = _checked.get(key)
        if last is not None:
            age = time.monotonic() - last.at
            fresh = every is None or age < max(every, _SLOW_CHECK_SHARE * last.seconds)
            if (last.identity == identity and fresh) or (
                    every is not None and last.seconds > _SLOW_CHECK_SECONDS
                    and age < _SLOW_CHECK_SHARE * last.seconds):
                return last.damage
        started = time.monotonic()
        damage = file_damage(path, MIGRATIONS_TABLE)
        _checked[key] = _Checked(identity, damage, time.monotonic(), time.monotonic() - started)
        return damage


def corrupt_memory(path: Path, damage: str) -> CorruptDatabase:
    """The one-line refusal of a damaged memory database."""
    return CorruptDatabase(
        f"the memory database {path} {damage}: Hilo has not opened or changed it; restore "
        f"your last backup with `hilo restore <backup>`, or move {Path(path).name} aside "
        "and run `hilo init` to start a new, empty memory")


def check_memory_database(path: Path) -> None:
    """Refuse an existing memory database that lost its schema or fails a quick check
    (CorruptDatabase). A missing file passes: `hilo init` creates it."""
    if not Path(path).exists():
        return
    damage = memory_damage(path)
    if damage is not None:
        raise corrupt_memory(path, damage)


def create_memory_database(path: Path) -> list[str]:
    """Create a migrated memory database at `path` if there is none; the migrations applied.

    It is built beside `path` and linked into place whole, so a memory database that
    exists is never a half-made one: one with no schema has lost it. Of two processes
    creating it together, one wins and the other finds it made ([] applied).
    """
    path = Path(path)
    if path.exists():
        return []
    building = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        con = connect(building, Durability.FULL)
        try:
            applied = migrate(con)
        finally:
            con.close()  # the last connection: the WAL is checkpointed into the file
        try:
            os.link(building, path)
        except FileExistsError:
            return []
        except OSError:  # a file system without hard links: a rename, if still free
            if path.exists():
                return []
            os.replace(building, path)
        return applied
    finally:
        for leftover in (building, Path(f"{building}-wal"), Path(f"{building}-shm")):
            leftover.unlink(missing_ok=True)


def checkpoint_wal(path: Path) -> bool:
    """Copy the write-ahead log into the database file and truncate it to nothing, so what
    was deleted is in no file (forget); False when a reader's older snapshot kept part of
    it, which the next checkpoint then overwrites."""
    con = connect(path)
    try:
        con.setbusytimeout(CHECKPOINT_BUSY_MS)
        busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return not busy
    finally:
        con.close()


def _configure(con: apsw.Connection) -> None:
    con.setbusytimeout(BUSY_TIMEOUT_MS)
    con.execute("PRAGMA foreign_keys = ON")
    # What is deleted is overwritten with zeros, not left in free space: forgotten means
    # gone from the file (a backup copies free pages too).
    con.execute("PRAGMA secure_delete = ON")
    # Keep the WAL from growing without bound under steady writes.
    con.execute("PRAGMA journal_size_limit = 67108864")


@dataclass(frozen=True)
class Migration:
    """One numbered .sql file of the `migrations` package."""

    number: int
    name: str
    sql: str


_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def available_migrations() -> list[Migration]:
    """The numbered .sql files shipped in the `migrations` package, in order."""
    import importlib.resources  # start-up: only a command that opens the memory reads them

    found = []
    for entry in importlib.resources.files("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.number)
    return found


def applied_migrations(con: apsw.Connection) -> list[str]:
    exists = con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if not exists:
        return []
    return [row[0] for row in con.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY name")]


def schema_version(con: apsw.Connection) -> int:
    names = applied_migrations(con)
    return max((int(n[:4]) for n in names), default=0)


def migrate(con: apsw.Connection) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction.

    Returns the names applied. Refuses a database migrated by a newer Hilo.
    """
    known = available_migrations()
    known_names = {m.name for m in known}
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
        "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    done = set(applied_migrations(con))
    unknown = sorted(done - known_names)
    if unknown:
        raise SchemaTooNew(
            f"the memory database was migrated by a newer Hilo ({', '.join(unknown)} is "
            f"unknown to this version, which knows up to {known[-1].name}): "
            "upgrade Hilo, or restore a backup made by this version"
        )
    applied = []
    for migration in known:
        if migration.name in done:
            continue
        # IMMEDIATE takes the write lock before re-checking, so two processes starting
        # together (api and worker) apply each migration exactly once.
        con.execute("BEGIN IMMEDIATE")
        try:
            already = con.execute(
                f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = ?", (migration.name,)
            ).fetchone()
            if not already:
                con.execute(migration.sql)
                con.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (?, ?)",
                    (migration.name, utc_now()),
                )
                applied.append(migration.name)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return applied


def merge_fts_segments(con: apsw.Connection, table: str, pages: int) -> bool:
    """One step of merging an FTS5 index's segments, about `pages` pages of work; False
    once there is nothing left to merge.

    Each write adds a segment and FTS5's own merging lets a dozen or more pile up; every
    query reads each one. With 'usermerge' 2, two segments on a level are enough to
    merge, so the index ends with about one per level (FTS5's documented test of whether
    a 'merge' did any work: total_changes() moved by 2 or more)."""
    if table not in FTS_TABLES:
        raise ValueError(f"{table} is not one of the full-text indexes {FTS_TABLES}")
    usermerge = con.execute(f"SELECT v FROM '{table}_config' WHERE k = 'usermerge'").fetchone()
    if usermerge is None or usermerge[0] != 2:  # set once: a write changes the index
        con.execute(f"INSERT INTO {table}({table}, rank) VALUES('usermerge', 2)")
    before = con.total_changes()
    con.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (pages,))
    return con.total_changes() - before >= 2
