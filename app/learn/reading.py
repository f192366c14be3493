"""Reads for jobs: a read-only connection beside the writer.

Jobs read what to work on outside the writer, so a model call never holds the write
lock; whatever they then write is re-checked inside the writer's transaction. WAL
lets these readers run beside both processes' writers without blocking them. A
connection per job is cheap next to a model call and leaves nothing open between jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from app.db import connect_readonly
from app.writer import Writer

__all__ = ["reading"]


@contextmanager
def reading(writer: Writer) -> Iterator[apsw.Connection]:
    """A read-only connection to the database `writer` writes, closed afterwards."""
    con = connect_readonly(writer.path)
    try:
        yield con
    finally:
        con.close()
