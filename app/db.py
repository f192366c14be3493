"""The one place that opens SQLite connections and migrates the memory database.

Every connection is APSW, WAL, with a busy timeout and foreign keys on. The connection
that writes events (the user's own words, the source of truth) commits with
synchronous=FULL; the worker's connection, whose writes can all be re-derived, uses
NORMAL. Readers get read-only connections and never block the writer (WAL).
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import apsw

from app.errors import Unavailable
from app.timeutil import utc_now

# File names in the data directory; app/datadir.py (DataDir) builds the paths.
MEMORY_DB = "memory.sqlite3"
QUEUE_DB = "queue.sqlite3"
BUSY_TIMEOUT_MS = 10_000
MIGRATIONS_TABLE = "_hilo_migrations"


class Durability(Enum):
    """How a write connection commits. FULL survives power loss; NORMAL survives a crash."""

    FULL = "FULL"
    NORMAL = "NORMAL"


class DatabaseError(Unavailable):
    """A memory database Hilo cannot use; str() says what to do."""


class SchemaTooNew(DatabaseError):
    pass


# Until app/cli and app/transfer use DataDir(...).memory_db: remove then.
def memory_db_path(data_dir: Path) -> Path:
    return Path(data_dir) / MEMORY_DB


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


def _configure(con: apsw.Connection) -> None:
    con.setbusytimeout(BUSY_TIMEOUT_MS)
    con.execute("PRAGMA foreign_keys = ON")
    # Keep the WAL from growing without bound under steady writes.
    con.execute("PRAGMA journal_size_limit = 67108864")


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def available_migrations() -> list[Migration]:
    """The numbered .sql files shipped in the `migrations` package, in order."""
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
