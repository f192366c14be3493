"""Stored embeddings and the in-memory per-user vector index.

Storage: one `embeddings` row per (owner kind, owner id, model) holding `dim` float32
values, little-endian, or NULL and an `error` when embedding that owner failed. A row
is never updated in place: storing again replaces it (INSERT OR REPLACE gives it a new
id), so the index can refresh by reading only the rows with an id above the last one
it saw. Triggers count each (user, model, kind)'s added and removed vectors in
`embedding_generations` (migration 0010): the index's change check is one row read.

Index: per (database, user, model, owner kind), an L2-normalised float32 matrix held
in memory, a query being one matrix-vector product; above `[embedder] ann_threshold`
vectors, an HNSW graph (app/recall/ann.py) written to the data directory's vectors/ and mapped
back at the next start, with the vectors stored since in a small exact matrix until the
background adds them to it. Only vectors of the query's own model are compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

import apsw
import numpy as np

from app.datadir import DataDir
from app.db import connect_readonly
from app.log import get_logger
from app.memory.embeddings import save_error, save_vectors
from app.recall.ann import HnswIndex, use_one_thread
from app.recall.owners import OwnerKind

__all__ = ["log", "OWNER_KINDS", "Owner", "encode_vector", "decode_vector", "store_vectors",
           "store_error", "pending_owners", "count_pending", "ANN_THRESHOLD", "VectorIndex",
           "rebuild_indexes"]

log = get_logger(__name__)

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
    save_vectors(con, [(o.user_id, o.kind, o.id, model, int(v.shape[0]), encode_vector(v))
                       for o, v in zip(owners, vectors, strict=True)])


def store_error(con: apsw.Connection, owner: Owner, model: str, error: str) -> None:
    """Record why this owner has no vector for this model; embed_pending retries it."""
    save_error(con, owner.user_id, owner.kind, owner.id, model, error)


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


# -- the in-memory index -----------------------------------------------------------------

# Default of `[embedder] ann_threshold`: a block with more vectors than this is searched
# through an approximate index (app/recall/ann.py); brute force stays exact and fast below it.
ANN_THRESHOLD = 20_000
_INDEX_FORMAT = 2  # of the files beside the database; another number: rebuilt
# Vectors stored after a block's graph was made are searched exactly until they are this
# share of `ann_threshold` (a tenth: ~0.2 ms a query at the default), then added to a copy
# of the graph in the background: adding one takes ~2.4 ms at 5x10^5 vectors, too long
# for a turn to wait on.
_EXACT_SHARE = 0.1
_READ_CHUNK = 16_384  # rows decoded at a time when a block loads


@dataclass
class _Block:
    """The vectors of one (user, model, kind): above the threshold, an HNSW graph of all but
    the newest (app/recall/ann.py); the rest (below it, all) in an exact matrix.

    `row_ids` and `owner_ids` say, in the order read (ascending row ids), which embeddings
    row and which owner each vector is: the graph holds the first `graph_size` of them,
    the matrix the others. A query never reads the table to name its hits."""

    user_id: str
    model: str
    kind: str
    files: _IndexFiles | None  # where the graph persists beside the database
    last_row: int = 0  # highest embeddings.id read
    # embedding_generations (added, removed) when last read: unchanged means nothing new.
    generation: tuple[int, int] | None = None
    dim: int = 0
    size: int = 0
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    owner_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    row_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Keyed by embeddings.id, not owner id: a row since deleted or replaced is listed in
    # `dead` and dropped from the hits, so a removal never forces a rebuild.
    ann: HnswIndex | None = None
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    folding: bool = False  # the matrix's vectors are being added to a copy of the graph
    loads: int = 0  # times the block was read again from the start (a fold of before: dropped)
    tried_files: bool = False
    warming: bool = False  # a background load holds the lock: queries skip this block
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def graph_size(self) -> int:
        return self.ann.size if self.ann is not None else 0

    @property
    def exact_size(self) -> int:
        return self.size - self.graph_size

    def reset(self) -> None:
        self.loads += 1
        self.last_row = self.dim = self.size = 0
        self.generation, self.ann = None, None
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.owner_ids = self.row_ids = self.dead = np.zeros(0, dtype=np.int64)

    def append(self, ids: np.ndarray, rows: np.ndarray, new: np.ndarray) -> None:
        """Add vectors after the others, to the matrix (grown by doubling, so incremental
        refreshes stay amortised O(new rows), and with a quarter more than asked: a block
        just read from the table then has room for the vectors stored after it, and the
        first of them does not copy the block inside a turn, ~10 ms at 5,000 vectors)."""
        if not len(ids):
            return
        needed, exact, end = self.size + len(ids), self.exact_size, self.exact_size + len(ids)
        if len(self.row_ids) < needed:
            capacity = max(needed + needed // 4, 2 * len(self.row_ids), 64)
            self.owner_ids = _grown(self.owner_ids[:self.size], capacity)
            self.row_ids = _grown(self.row_ids[:self.size], capacity)
        if len(self.matrix) < end or self.matrix.shape[1] != self.dim:
            capacity = max(end + end // 4, 2 * len(self.matrix), 64)
            matrix = np.zeros((capacity, self.dim), dtype=np.float32)
            if exact:
                matrix[:exact] = self.matrix[:exact]
            self.matrix = matrix
        self.matrix[exact:end] = new
        self.owner_ids[self.size:needed] = ids
        self.row_ids[self.size:needed] = rows
        self.size = needed

    def fold(self) -> None:
        """Move the matrix's vectors into the graph, building it if there is none (here and
        now: while the block loads, or for `hilo rebuild`)."""
        vectors, rows = self.matrix[:self.exact_size], self.row_ids[self.graph_size:self.size]
        if self.ann is None:
            self.ann = HnswIndex.build(vectors, rows)
        else:
            graph = self.ann.copy() if self.ann.mapped else self.ann
            graph.add(vectors, rows)
            self.ann = graph
        self.matrix = np.zeros((0, self.dim), dtype=np.float32)

    def fold_in_background(self, con: apsw.Connection, folds: ThreadPoolExecutor) -> None:
        """Add the matrix's vectors to a copy of the graph (or build the graph) on the fold
        thread (`folds`), write it and put it in place; queries go on meanwhile with the
        graph and matrix as they are. Called with the lock held."""
        graph, count, loads = self.ann, self.exact_size, self.loads
        vectors = self.matrix[:count].copy()
        rows, owners = self.row_ids[:self.size].copy(), self.owner_ids[:self.size].copy()
        description = self._description(con, self.size)
        dead = self.dead.copy()
        self.folding = True

        def fold() -> None:
            try:
                use_one_thread()
                if graph is None:
                    folded = HnswIndex.build(vectors, rows[-count:])
                else:
                    folded = graph.copy()
                    folded.add(vectors, rows[-count:])
                if self.files is not None:
                    _write_index(self.files, folded, rows, owners, dead, description)
                with self.lock:
                    if (self.ann, self.loads) == (graph, loads):  # else: read again meanwhile
                        rest = self.exact_size - count
                        self.matrix[:rest] = self.matrix[count:count + rest]
                        self.ann = folded
            except Exception as exc:  # noqa: BLE001 - the matrix keeps the vectors meanwhile
                log.warning("vector_index_fold_failed", kind=self.kind, error=str(exc))
            finally:
                self.folding = False

        folds.submit(fold)

    def forget_logged_removals(self, con: apsw.Connection, seen: int, now: int) -> bool:
        """List the block's rows logged as removed while the removed count went from `seen`
        to `now` (migration 0012); False when the log no longer reaches back that far. A
        row changed in place keeps its old vector until the block is read again (no code
        updates a vector: a new one replaces the row)."""
        logged = [row for (row,) in con.execute(
            "SELECT row_id FROM embedding_removals WHERE user_id = ? AND model = ? "
            "AND owner_kind = ? AND removed > ? AND removed <= ?",
            (self.user_id, self.model, self.kind, seen, now))]
        if len(logged) != now - seen:
            return False
        held = self.row_ids[:self.size]  # ascending
        if not len(held):
            return True
        rows = np.asarray(logged, dtype=np.int64)
        at = np.minimum(np.searchsorted(held, rows), len(held) - 1)
        ours = set(rows[held[at] == rows].tolist())
        # An UPDATE logs a row that is still there: check each. (Sets, not numpy's set
        # routines: their first call imports numpy.ma, ~10 ms in a turn.)
        ours -= {row for (row,) in con.execute(
            f"SELECT id FROM embeddings WHERE id IN ({','.join('?' * len(ours))})",
            list(ours))} if ours else set()
        if ours:
            self.dead = np.array(sorted(ours.union(self.dead.tolist())), dtype=np.int64)
        return True

    def forget_removed(self, con: apsw.Connection) -> None:
        """List the rows of the block that are no longer in the table (one pass over the
        block's ids in the table's index)."""
        live = np.fromiter(
            (row for (row,) in con.execute(
                "SELECT id FROM embeddings WHERE user_id = ? AND model = ? AND owner_kind = ? "
                "AND id <= ?", (self.user_id, self.model, self.kind, self.last_row))),
            dtype=np.int64)
        self.dead = np.setdiff1d(self.row_ids[:self.size], live, assume_unique=True)

    def nearest(self, unit: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Owners and cosines of up to `depth` candidates from the graph and from the matrix
        each (as many more as rows were removed, up to `depth`: they are dropped here)."""
        wanted = depth + min(len(self.dead), depth)
        rows, scores = (self.ann.search(unit, wanted) if self.ann is not None
                        else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)))
        graph_size, exact = self.graph_size, self.exact_size
        if exact:
            cosines = self.matrix[:exact] @ unit
            wanted = min(wanted, exact)
            top = np.argpartition(-cosines, wanted - 1)[:wanted]
            rows = np.concatenate([rows, self.row_ids[graph_size + top]])
            scores = np.concatenate([scores, cosines[top]])
        if len(self.dead):
            live = ~np.isin(rows, self.dead)
            rows, scores = rows[live], scores[live]
        return self.owner_ids[np.searchsorted(self.row_ids[:self.size], rows)], scores

    def write(self, con: apsw.Connection, graph: bool = True) -> None:
        """Persist the graph with what it covers, so a restart reads only newer rows;
        `graph=False`: only what it covers (the rows removed since), the graph's file being
        as it is. Not while a fold writes them too (the lock held, `folding` false)."""
        if self.files is None or self.ann is None or self.generation is None:
            return
        graph_size = self.graph_size
        _write_index(self.files, self.ann if graph else None, self.row_ids[:graph_size],
                     self.owner_ids[:graph_size], self.dead, self._description(con, graph_size))

    def _description(self, con: apsw.Connection, covered: int) -> dict:
        """What a graph of the first `covered` vectors is, for the file beside it."""
        last_row = int(self.row_ids[covered - 1])
        return {"format": _INDEX_FORMAT, "user_id": self.user_id, "model": self.model,
                "kind": self.kind, "dim": self.dim, "size": covered, "last_row": last_row,
                "last_row_digest": _row_digest(con, last_row),
                "added": self.generation[0], "removed": self.generation[1]}

    def read(self, con: apsw.Connection, generation: tuple[int, int]) -> None:
        """Map the persisted graph if it still describes this database's rows."""
        self.tried_files = True
        if self.files is None or not all(f.exists() for f in self.files):
            return
        try:
            saved = json.loads(self.files.description.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        digest = _row_digest(con, saved.get("last_row", 0))
        if (saved.get("format") != _INDEX_FORMAT
                or (saved.get("user_id"), saved.get("model"), saved.get("kind"))
                != (self.user_id, self.model, self.kind)
                or saved["added"] > generation[0] or saved["removed"] > generation[1]
                # The last row it covers is still there, or was removed since.
                or not (digest == saved["last_row_digest"]
                        or (digest is None and generation[1] > saved["removed"]))):
            return  # another database's (a restore) or outdated: rebuilt from the table
        try:
            ann = HnswIndex.read(self.files.index)
            with np.load(self.files.rows) as rows:
                row_ids, owner_ids, dead = rows["rows"], rows["owners"], rows["dead"]
        except Exception as exc:  # noqa: BLE001 - a damaged file is only a cache
            log.warning("vector_index_unreadable", path=str(self.files.index), error=str(exc))
            return
        if not ann.size == len(row_ids) == len(owner_ids) == saved["size"]:
            return  # the files were not written together
        self.ann, self.dim, self.size = ann, saved["dim"], ann.size
        self.row_ids, self.owner_ids = row_ids.astype(np.int64), owner_ids.astype(np.int64)
        self.dead = dead.astype(np.int64)
        self.last_row, self.generation = saved["last_row"], (saved["added"], saved["removed"])

    def read_new_rows(self, con: apsw.Connection, ann_threshold: int) -> bool:
        """Append the rows above last_row, in chunks. When the matrix passes the threshold
        with more chunks to come (a block loading), its vectors go into the graph there and
        then, so loading 10^6 vectors never holds them all as float32 at once; what is
        left after the last chunk waits for a fold in the background (refresh). True if
        the graph changed."""
        owner_ids: list[int] = []
        row_ids: list[int] = []
        blobs: list[bytes] = []
        folded = False

        def flush(more_to_come: bool) -> None:
            nonlocal folded
            if blobs:
                new = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, self.dim)
                norms = np.linalg.norm(new, axis=1, keepdims=True)
                self.append(np.asarray(owner_ids, dtype=np.int64),
                            np.asarray(row_ids, dtype=np.int64),
                            (new / np.where(norms == 0, 1, norms)).astype(np.float32))
                owner_ids.clear()
                row_ids.clear()
                blobs.clear()
            if more_to_come and self.exact_size > ann_threshold and not self.folding:
                self.fold()
                folded = True

        for row_id, owner_id, dim, blob in con.execute(
                "SELECT id, owner_id, dim, vector FROM embeddings WHERE user_id = ? "
                "AND model = ? AND owner_kind = ? AND id > ? ORDER BY id",
                (self.user_id, self.model, self.kind, self.last_row)):
            self.last_row = row_id
            if blob is None:
                continue
            if self.dim == 0:
                self.dim = dim
            if dim != self.dim or len(blob) != 4 * dim:  # one model, one dimension
                continue
            owner_ids.append(owner_id)
            row_ids.append(row_id)
            blobs.append(blob)
            if len(blobs) >= _READ_CHUNK:
                flush(more_to_come=True)
        flush(more_to_come=False)
        return folded


def _grown(values: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.zeros(capacity, dtype=values.dtype)
    grown[:len(values)] = values
    return grown


def _write_index(files: _IndexFiles, graph: HnswIndex | None, rows: np.ndarray,
                 owners: np.ndarray, dead: np.ndarray, description: dict) -> None:
    """The graph (None: its file stays), its rows and owners, and what they cover (written
    last)."""
    if graph is not None:
        graph.write(files.index)
    _write_atomically(files.rows, lambda file: np.savez(
        file, rows=rows[:description["size"]], owners=owners[:description["size"]], dead=dead))
    _write_atomically(files.description, lambda file: file.write(json.dumps(description).encode()))


def _write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """A reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        write(file)
    os.replace(partial, path)


def _row_digest(con: apsw.Connection, row_id: int) -> str | None:
    """What identifies the last row an index file covers: the same id in a restored or
    another database holds another vector (or none)."""
    row = con.execute("SELECT user_id, model, owner_kind, owner_id, created_at, vector "
                      "FROM embeddings WHERE id = ?", (row_id,)).fetchone()
    if row is None:
        return None
    return hashlib.sha256(repr(row[:5]).encode() + (row[5] or b"")).hexdigest()


def _generation(con: apsw.Connection, user_id: str, model: str, kind: str) -> tuple[int, int]:
    row = con.execute("SELECT added, removed FROM embedding_generations WHERE user_id = ? "
                      "AND model = ? AND owner_kind = ?", (user_id, model, kind)).fetchone()
    return (row[0], row[1]) if row else (0, 0)


class VectorIndex:
    """Per (database, user, model, kind) blocks of vectors, refreshed incrementally from the
    embeddings table: exact below `ann_threshold` vectors, HNSW above it, persisted in
    the data directory's vectors/ so a restart does not rebuild it. A process keeps one,
    in its Recall (app/recall/state.py)."""

    def __init__(self, ann_threshold: int = ANN_THRESHOLD) -> None:
        self.ann_threshold = ann_threshold
        self._blocks: dict[tuple, _Block] = {}
        self._lock = threading.Lock()
        # One thread does the searches started ahead (nearest_soon): a turn starts two or
        # three. Another adds new vectors to copies of the graphs (_Block.fold_in_background).
        self._searches = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hilo-vector-search")
        self._folds = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hilo-vector-fold")

    def _block(self, con: apsw.Connection, user_id: str, model: str, kind: str) -> _Block:
        key = (con.filename or id(con), user_id, model, kind)
        with self._lock:
            block = self._blocks.get(key)
            if block is None:
                block = self._blocks[key] = _Block(user_id, model, kind,
                                                   _index_files(con, user_id, model, kind))
            return block

    def refresh(self, con: apsw.Connection, user_id: str, model: str, kind: OwnerKind) -> _Block:
        """Read the rows stored since the last refresh, and list the rows that went away
        since, to drop them from the hits (from their log; when it does not reach back
        far enough, an exact block is read again and one with a graph lists its rows)."""
        block = self._block(con, user_id, model, kind)
        generation = _generation(con, user_id, model, kind)
        with block.lock:
            if block.generation == generation:
                return block
            if not block.tried_files:
                block.read(con, generation)
            removed = block.generation is not None and block.generation[1] != generation[1]
            unlisted = removed and not block.forget_logged_removals(
                con, block.generation[1], generation[1])
            if unlisted and block.ann is None:
                block.reset()  # read the block again: cheaper than listing it below
            graph_changed = block.read_new_rows(con, self.ann_threshold)
            if unlisted and block.ann is not None:
                block.forget_removed(con)
            block.generation = generation
            if graph_changed:
                block.write(con)
            elif unlisted and block.ann is not None and not block.folding:
                # What the listing found, in the files: else every start lists the block
                # again (~100 ms at 10^6) until a fold next writes them.
                block.write(con, graph=False)
            if not block.folding and block.exact_size > (
                    self.ann_threshold if block.ann is None
                    else _EXACT_SHARE * self.ann_threshold):
                block.fold_in_background(con, self._folds)
        return block

    def nearest(self, con: apsw.Connection, user_id: str, model: str, kind: OwnerKind,
                query: np.ndarray, depth: int) -> list[tuple[int, float]]:
        """The `depth` owners most similar to the query vector, best first, with cosine.

        Empty while a background warm-up is still loading this block: the keyword
        streams answer meanwhile."""
        block = self._current_block(con, user_id, model, kind)
        return [] if block is None else _search(block, query, depth)

    def nearest_soon(self, con: apsw.Connection, user_id: str, model: str, kind: OwnerKind,
                     query: np.ndarray | Future[np.ndarray | None],
                     depth: int) -> Callable[[], list[tuple[int, float]]]:
        """nearest(), searching on a thread of its own while the caller goes on (faiss
        and numpy release the GIL: on a second core the search costs the turn nothing).
        The block is brought up to date here, through `con`; call the result for the hits.

        `query` may still be being made (make_query's `ahead`): the search then runs on
        the thread that makes it, once it is made (None: no hits), so the search thread
        never waits for a model server."""
        block = self._current_block(con, user_id, model, kind)
        if isinstance(query, Future) and query.done():
            query = query.result()  # made already: searched on the search thread
        if block is None or query is None:
            return list
        if not isinstance(query, Future):
            return self._searches.submit(_search, block, query, depth).result
        found: Future[list[tuple[int, float]]] = Future()

        def search(embedding: Future[np.ndarray | None]) -> None:
            vector = embedding.result()
            try:
                found.set_result([] if vector is None else _search(block, vector, depth))
            except Exception as exc:  # noqa: BLE001 - raised where the hits are read
                found.set_exception(exc)

        query.add_done_callback(search)
        return found.result

    def _current_block(self, con: apsw.Connection, user_id: str, model: str,
                       kind: OwnerKind) -> _Block | None:
        if self._block(con, user_id, model, kind).warming:
            return None
        return self.refresh(con, user_id, model, kind)

    def warm(self, path: Path, model: str) -> threading.Thread:
        """Load every block of `model` in the database at `path`, in a background thread
        (reading the persisted indexes, or building them), so the first turn after a
        start is as fast as the hundredth. Queries skip a block while it loads: the
        blocks are marked before this returns, so a turn that comes at once does not
        load one again itself."""
        con: apsw.Connection | None = None
        blocks: list[tuple[_Block, str, str]] = []
        try:
            con = connect_readonly(path)
            keys = con.execute("SELECT user_id, owner_kind FROM embedding_generations "
                               "WHERE model = ? ORDER BY added DESC", (model,)).fetchall()
            blocks = [(self._block(con, user, model, kind), user, kind) for user, kind in keys]
        except Exception as exc:  # noqa: BLE001 - queries load on demand instead
            log.warning("vector_index_warm_failed", error=str(exc))
        for block, _, _ in blocks:
            block.warming = True

        def load() -> None:
            try:
                for block, user, kind in blocks:
                    try:
                        self.refresh(con, user, model, kind)
                    finally:
                        block.warming = False
                if blocks:
                    log.info("vector_index_warm", blocks=len(blocks),
                             vectors=sum(b.size for b, _, _ in blocks))
            except Exception as exc:  # noqa: BLE001 - queries load on demand instead
                log.warning("vector_index_warm_failed", error=str(exc))
                for block, _, _ in blocks:
                    block.warming = False
            finally:
                if con is not None:
                    con.close()

        thread = threading.Thread(target=load, name="vector-index-warm", daemon=True)
        thread.start()
        return thread

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()


def _search(block: _Block, query: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """The block's `depth` owners nearest the query, best first, with cosine."""
    with block.lock:
        if block.size == 0 or query.shape[-1] != block.dim or depth <= 0:
            return []
        norm = float(np.linalg.norm(query)) or 1.0
        owner_ids, scores = block.nearest(query.astype(np.float32) / norm, depth)
    # Best score first; the same score: the newer owner first, as in fuse().
    top = np.lexsort((-owner_ids, -scores))[:depth]
    return list(zip(owner_ids[top].tolist(), scores[top].tolist(), strict=True))


def rebuild_indexes(con: apsw.Connection, ann_threshold: int = ANN_THRESHOLD) -> int:
    """Build every approximate index of this database again from the embeddings table
    (`hilo rebuild`), after deleting the old files; returns how many were written."""
    index_dir = _index_dir(con)
    if index_dir is not None and index_dir.exists():
        for stale in index_dir.iterdir():
            stale.unlink()
    written = 0
    for user, model, kind in con.execute(
            "SELECT user_id, model, owner_kind FROM embedding_generations").fetchall():
        block = _Block(user, model, kind, _index_files(con, user, model, kind),
                       generation=_generation(con, user, model, kind))
        block.read_new_rows(con, ann_threshold)
        if block.size > ann_threshold:
            if block.exact_size:
                block.fold()
            block.write(con)
            written += 1
    return written


def _index_dir(con: apsw.Connection) -> Path | None:
    """The data directory's vectors/, for a database file (none for an in-memory one)."""
    if not con.filename:
        return None
    return DataDir(Path(con.filename).parent).vector_indexes


class _IndexFiles(NamedTuple):
    index: Path  # the faiss HNSW graph, keyed by embeddings row
    rows: Path  # its rows and their owners in the order added, and the rows removed (.npz)
    description: Path  # what the two cover (JSON), written last


def _index_files(con: apsw.Connection, user_id: str, model: str, kind: str) -> _IndexFiles | None:
    index_dir = _index_dir(con)
    if index_dir is None:
        return None
    # User ids and model names can hold any character: the files are named by a digest.
    digest = hashlib.sha256(f"{user_id}\0{model}\0{kind}".encode()).hexdigest()[:24]
    stem = f"{kind}-{digest}"
    return _IndexFiles(index_dir / f"{stem}.faiss", index_dir / f"{stem}.rows.npz",
                       index_dir / f"{stem}.json")

