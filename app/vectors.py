"""Stored embeddings and the in-memory per-user vector index.

Storage: one `embeddings` row per (owner kind, owner id, model) holding `dim` float32
values, little-endian, or NULL and an `error` when embedding that owner failed. A row
is never updated in place: storing again replaces it (INSERT OR REPLACE gives it a new
id), so the index can refresh by reading only the rows with an id above the last one
it saw.

Index: per (database, user, model, owner kind), an L2-normalised float32 matrix held
in memory; a query is one matrix-vector product (brute force is fine to ~10^5 rows
per user). Only vectors of the query's own model are ever compared.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

import apsw
import numpy as np

from app.timeutil import utc_now

OwnerKind = Literal["fact", "card", "event"]
OWNER_KINDS: tuple[OwnerKind, ...] = ("event", "fact", "card")


@dataclass(frozen=True)
class Owner:
    """Something that can be embedded: an event, a current fact or a live card."""

    kind: OwnerKind
    id: int
    user_id: str
    text: str


# -- storage ---------------------------------------------------------------------------

def encode_vector(vector: Sequence[float] | np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def decode_vector(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def store_vectors(con: apsw.Connection, owners: Sequence[Owner], model: str,
                  vectors: np.ndarray) -> None:
    """Store one vector per owner (replacing an earlier vector or error for this model)."""
    now = utc_now()
    con.executemany(
        "INSERT OR REPLACE INTO embeddings (user_id, owner_kind, owner_id, model, dim, vector, "
        "error, created_at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
        [(o.user_id, o.kind, o.id, model, int(v.shape[0]), encode_vector(v), now)
         for o, v in zip(owners, vectors, strict=True)],
    )


def store_error(con: apsw.Connection, owner: Owner, model: str, error: str) -> None:
    """Record why this owner has no vector for this model; embed_pending retries it."""
    con.execute(
        "INSERT OR REPLACE INTO embeddings (user_id, owner_kind, owner_id, model, dim, vector, "
        "error, created_at) VALUES (?, ?, ?, ?, 0, NULL, ?, ?)",
        (owner.user_id, owner.kind, owner.id, model, error[:1000], utc_now()),
    )


# Owners without a stored vector for a model (an error row counts as missing).
_MISSING = ("NOT EXISTS (SELECT 1 FROM embeddings m WHERE m.owner_kind = '{kind}' "
            "AND m.owner_id = {alias}.id AND m.model = ? AND m.vector IS NOT NULL)")
# Per kind: the text to embed, and the rows that still need a vector ({user} is "" or a
# user filter ending in AND).
_PENDING_TEXT: dict[OwnerKind, str] = {
    "event": "e.content",
    "fact": "f.key || ': ' || f.value",
    "card": "c.summary || CASE WHEN c.keywords = '' THEN '' ELSE ' (' || c.keywords || ')' END",
}
_PENDING_FROM: dict[OwnerKind, str] = {
    "event": "events e WHERE {user} " + _MISSING.format(kind="event", alias="e"),
    "fact": "facts f WHERE {user} f.superseded_at IS NULL AND f.deleted_at IS NULL AND "
            + _MISSING.format(kind="fact", alias="f"),
    "card": "context_cards c WHERE {user} c.folded_into IS NULL AND "
            + _MISSING.format(kind="card", alias="c"),
}
_PENDING_SQL: dict[OwnerKind, str] = {
    kind: f"SELECT {kind[0]}.id, {kind[0]}.user_id, {_PENDING_TEXT[kind]} "
          f"FROM {_PENDING_FROM[kind]} ORDER BY {kind[0]}.id LIMIT ?"
    for kind in OWNER_KINDS
}
_COUNT_SQL: dict[OwnerKind, str] = {
    kind: f"SELECT count(*) FROM {_PENDING_FROM[kind]}" for kind in OWNER_KINDS
}


def _user_filter(kind: OwnerKind, user_id: str | None) -> str:
    return f"{kind[0]}.user_id = ? AND " if user_id is not None else ""


def pending_owners(con: apsw.Connection, model: str, *, user_id: str | None = None,
                   limit: int = 256, kinds: Iterable[OwnerKind] = ("fact", "card", "event")
                   ) -> list[Owner]:
    """Up to `limit` owners with no vector for `model`: facts, then cards, then events."""
    found: list[Owner] = []
    for kind in kinds:
        if len(found) >= limit:
            break
        sql = _PENDING_SQL[kind].format(user=_user_filter(kind, user_id))
        params = ((user_id,) if user_id is not None else ()) + (model, limit - len(found))
        found.extend(Owner(kind, r[0], r[1], r[2]) for r in con.execute(sql, params))
    return found


def count_pending(con: apsw.Connection, model: str, *, user_id: str | None = None) -> int:
    """How many owners pending_owners would return with no limit (one COUNT per kind)."""
    params = ((user_id,) if user_id is not None else ()) + (model,)
    return sum(con.execute(_COUNT_SQL[kind].format(user=_user_filter(kind, user_id)),
                           params).fetchone()[0]
               for kind in OWNER_KINDS)


def delete_other_models(con: apsw.Connection, model: str) -> int:
    """Drop every stored vector not made by `model` (after a completed backfill)."""
    con.execute("DELETE FROM embeddings WHERE model != ?", (model,))
    return con.changes()


# -- the in-memory index -----------------------------------------------------------------

@dataclass
class _Block:
    """The vectors of one (user, model, kind), with the embeddings row ids they came from."""

    last_row: int = 0  # highest embeddings.id read
    rows_seen: int = 0  # embeddings rows with id <= last_row (error rows included)
    dim: int = 0
    size: int = 0
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    owner_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (connection, PRAGMA data_version) at the last refresh: unchanged means no other
    # connection has committed since, so there is nothing new to read.
    seen: tuple[int, int] | None = None

    def append(self, ids: list[int], vectors: list[np.ndarray]) -> None:
        if not ids:
            return
        new = np.stack(vectors)
        norms = np.linalg.norm(new, axis=1, keepdims=True)
        new = new / np.where(norms == 0, 1, norms)
        needed = self.size + len(ids)
        if self.matrix.shape[0] < needed or self.matrix.shape[1] != self.dim:
            # Grow by doubling, so incremental refreshes stay amortised O(new rows).
            capacity = max(needed, 2 * self.matrix.shape[0], 64)
            matrix = np.zeros((capacity, self.dim), dtype=np.float32)
            owner_ids = np.zeros(capacity, dtype=np.int64)
            if self.size:
                matrix[:self.size] = self.matrix[:self.size]
                owner_ids[:self.size] = self.owner_ids[:self.size]
            self.matrix, self.owner_ids = matrix, owner_ids
        self.matrix[self.size:needed] = new
        self.owner_ids[self.size:needed] = ids
        self.size = needed


class VectorIndex:
    """Per-user float32 matrices, refreshed incrementally from the embeddings table."""

    def __init__(self) -> None:
        self._blocks: dict[tuple, _Block] = {}
        self._lock = threading.Lock()

    def _block(self, con: apsw.Connection, user_id: str, model: str, kind: str) -> _Block:
        key = (con.filename or id(con), user_id, model, kind)
        with self._lock:
            return self._blocks.setdefault(key, _Block())

    def refresh(self, con: apsw.Connection, user_id: str, model: str, kind: OwnerKind) -> _Block:
        """Read the rows stored since the last refresh; reload if any older row went away."""
        block = self._block(con, user_id, model, kind)
        version = (id(con), con.execute("PRAGMA data_version").fetchone()[0])
        with block.lock:
            if block.seen == version:
                return block
            block.seen = version
            if block.last_row:
                still_there = con.execute(
                    "SELECT count(*) FROM embeddings WHERE user_id = ? AND model = ? "
                    "AND owner_kind = ? AND id <= ?",
                    (user_id, model, kind, block.last_row)).fetchone()[0]
                if still_there != block.rows_seen:
                    fresh = _Block()
                    block.last_row = block.rows_seen = block.dim = block.size = 0
                    block.matrix, block.owner_ids = fresh.matrix, fresh.owner_ids
            ids: list[int] = []
            vectors: list[np.ndarray] = []
            for row_id, owner_id, dim, blob in con.execute(
                    "SELECT id, owner_id, dim, vector FROM embeddings WHERE user_id = ? "
                    "AND model = ? AND owner_kind = ? AND id > ? ORDER BY id",
                    (user_id, model, kind, block.last_row)):
                block.last_row = row_id
                block.rows_seen += 1
                if blob is None:
                    continue
                if block.dim == 0:
                    block.dim = dim
                if dim != block.dim:  # one model, one dimension: a stray row is skipped
                    continue
                ids.append(owner_id)
                vectors.append(decode_vector(blob))
            block.append(ids, vectors)
        return block

    def nearest(self, con: apsw.Connection, user_id: str, model: str, kind: OwnerKind,
                query: np.ndarray, depth: int) -> list[tuple[int, float]]:
        """The `depth` owners most similar to the query vector, best first, with cosine."""
        block = self.refresh(con, user_id, model, kind)
        with block.lock:
            if block.size == 0 or query.shape[-1] != block.dim:
                return []
            matrix, owner_ids = block.matrix[:block.size], block.owner_ids[:block.size]
            norm = float(np.linalg.norm(query)) or 1.0
            scores = matrix @ (query.astype(np.float32) / norm)
        depth = min(depth, len(scores))
        top = np.argpartition(-scores, depth - 1)[:depth]
        # Best score first; the same score: the newer owner first, as in fuse().
        top = top[np.lexsort((-owner_ids[top], -scores[top]))]
        return list(zip(owner_ids[top].tolist(), scores[top].tolist()))

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()


# The process's index: the front-end and the benchmark share it across requests.
VECTOR_INDEX = VectorIndex()
