"""The embeddings table's writes: vectors (and errors) stored per owner and model, and
vectors deleted with their owner, after a model change, or all of them for a rebuild.

Reading and searching them is recall's (app/recall/vectors.py); the rows are the
embedding worker's (app/learn/embed.py) and go with the event, fact or card they embed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import apsw

from app.timeutil import utc_now

__all__ = ["VectorOwnerKind", "VectorRow", "save_vectors", "save_error", "delete_vectors",
           "delete_other_models", "delete_every_vector"]

VectorOwnerKind = Literal["event", "fact", "card"]
# (user_id, owner kind, owner id, model, dim, float32 little-endian bytes)
VectorRow = tuple[str, str, int, str, int, bytes]


def save_vectors(con: apsw.Connection, rows: Iterable[VectorRow]) -> None:
    """One vector per owner and model, replacing an earlier vector or error."""
    now = utc_now()
    con.executemany(
        "INSERT OR REPLACE INTO embeddings (user_id, owner_kind, owner_id, model, dim, vector, "
        "error, created_at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
        [(*row, now) for row in rows])


def save_error(con: apsw.Connection, user_id: str, kind: str, owner_id: int, model: str,
               error: str) -> None:
    """Why this owner has no vector for this model; the embedding backfill retries it."""
    con.execute(
        "INSERT OR REPLACE INTO embeddings (user_id, owner_kind, owner_id, model, dim, vector, "
        "error, created_at) VALUES (?, ?, ?, ?, 0, NULL, ?, ?)",
        (user_id, kind, owner_id, model, error[:1000], utc_now()))


def delete_vectors(con: apsw.Connection, kind: VectorOwnerKind, owner_ids: Sequence[int]) -> int:
    """The vectors of these owners, every model's (their owner is gone or forgotten)."""
    if not owner_ids:
        return 0
    marks = ",".join("?" * len(owner_ids))
    con.execute(f"DELETE FROM embeddings WHERE owner_kind = ? AND owner_id IN ({marks})",
                (kind, *owner_ids))
    return con.changes()


def delete_other_models(con: apsw.Connection, model: str) -> int:
    """Every stored vector not made by `model` (after a completed backfill)."""
    con.execute("DELETE FROM embeddings WHERE model != ?", (model,))
    return con.changes()


def delete_every_vector(con: apsw.Connection) -> int:
    """All of them: `hilo rebuild` embeds everything again."""
    con.execute("DELETE FROM embeddings")
    return con.changes()
