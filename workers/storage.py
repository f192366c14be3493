"""Huey's SQLite storage on APSW: one SQLite library in the project, WAL, synchronous=NORMAL.

Huey's SqliteStorage speaks the stdlib `sqlite3` API; APSW has no commit(), rollback()
or rowcount, so a thin adapter supplies them and everything else is Huey's own SQL.
NORMAL instead of Huey's FULL: the queue is a hint (the memory database is the truth
and the reconcile job redoes lost work), and it is ~3.5× the no-op task throughput.
"""

from __future__ import annotations

from typing import Any

import apsw
from huey.storage import SqliteStorage

__all__ = ["ApswSqliteStorage"]


class _Cursor:
    """The slice of a sqlite3 cursor that Huey's SqliteStorage uses."""

    def __init__(self, con: apsw.Connection) -> None:
        self._con = con
        self._cursor = con.cursor()
        self.rowcount = -1

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        self._cursor.execute(sql, params)
        self.rowcount = self._con.changes()
        return self

    def fetchone(self) -> tuple | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple]:
        return self._cursor.fetchall()

    def close(self) -> None:
        self._cursor.close()


class _Connection:
    """The slice of a sqlite3 connection (autocommit mode) that Huey uses."""

    def __init__(self, con: apsw.Connection) -> None:
        self._con = con

    def cursor(self) -> _Cursor:
        return _Cursor(self._con)

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        return self.cursor().execute(sql, params)

    def commit(self) -> None:
        if not self._con.getautocommit():
            self._con.execute("COMMIT")

    def rollback(self) -> None:
        if not self._con.getautocommit():
            self._con.execute("ROLLBACK")

    def close(self) -> None:
        self._con.close()


class ApswSqliteStorage(SqliteStorage):
    """SqliteStorage with connections from APSW; Huey's locking and SQL unchanged."""

    integrity_error = apsw.ConstraintError
    operational_error = apsw.BusyError  # what _set_journal_mode retries on

    def __init__(self, name: str = "huey", filename: str = "queue.sqlite3",
                 synchronous: str = "NORMAL", schema_on_connect: bool = False,
                 **kwargs: Any) -> None:
        self._synchronous = synchronous
        # Create the tables with the first connection rather than at construction.
        self._schema_on_connect = schema_on_connect
        super().__init__(name, filename, **kwargs)

    def _create_connection(self) -> _Connection:
        con = apsw.Connection(self.filename)
        con.setbusytimeout(int(self._timeout * 1000))
        conn = _Connection(con)
        self._set_journal_mode(conn)
        if self._cache_mb:
            con.execute(f"PRAGMA cache_size = {-1000 * self._cache_mb}")
        con.execute(f"PRAGMA synchronous = {self._synchronous}")
        # A finished job's arguments (a chat's prompt, for learning) are overwritten when
        # Huey deletes it, not left in free pages: what a person forgets leaves the queue too.
        con.execute("PRAGMA secure_delete = ON")
        if self._schema_on_connect:
            for sql in self.ddl:
                con.execute(sql)
        return conn
