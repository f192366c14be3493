"""Retrieval: which facts, cards and events are relevant to what the user just said.

Each stream returns ranked owner ids for one user; the streams are fused by
Reciprocal Rank Fusion (`RRF_K`), so no stream needs calibrated scores. The streams in
`STREAMS`: full text (FTS5 BM25), vectors (cosine against the query's embedding, same
model only), session (the two combined and, for events, spread to the turns around
them in their session), labels (for events: those said at the time the question names,
or by the user when it names them), importance (>= 0.8) and recency. Each stream has a
weight in the fusion (`WEIGHTS`): importance and recency are priors that re-rank what
the other streams found (importance lifts what was marked important, recency only
breaks ties), not evidence of relevance in themselves. When nothing matches, the
caller falls back to the most recent items.

Before searching, the question is read against the memory (`focus_question`): the
user's own name and the words in a large share of the stored events are not searched
for, and what it says about when and by whom becomes labels.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Literal, Mapping

import apsw

from app.errors import EmbedderUnavailable
from app.recall.event_labels import LabelQuery, read_question
from app.fts import build_match_query, terms
from app.log import get_logger
from app.sanitize import redact_secrets

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    import numpy as np

    from app.model.embedders import Embedder
    from app.recall.vectors import VectorIndex

log = get_logger(__name__)

# The k of Reciprocal Rank Fusion. Cormack et al.'s 60 suits deep rankings from many
# systems; with few streams and only the top 10 used, a smaller k lets a stream's first
# ranks count, and keeps the priors (WEIGHTS) from moving matches far: at k = 60 the
# recency prior at 0.1 is worth ~6 places at the top of the session stream, at k = 10
# one. LoCoMo's development conversations, recall@10 of events: the fusion below at
# k = 5, 10, 20, 60: 0.728, 0.728, 0.725, 0.718; BM25 + vectors at the earlier
# weights (no session stream): k = 60 0.633, k = 10 0.645.
RRF_K = 10
# How many candidates each stream contributes before fusion.
STREAM_DEPTH = 50
# Owners at or above this importance form the importance stream.
IMPORTANT = 0.8

OwnerKind = Literal["fact", "card", "event"]


@dataclass(frozen=True)
class Candidate:
    kind: OwnerKind
    id: int
    ranks: dict[str, int]  # stream name -> 1-based rank in that stream
    score: float  # fused RRF score

    def explain(self) -> dict:
        return {"kind": self.kind, "id": self.id, "ranks": self.ranks,
                "score": round(self.score, 6)}


@dataclass
class Query:
    """What a stream needs: the user, the text, the words searched for (`searched`: the
    text less the words that would mislead, see make_query), their FTS5 form (None if
    no terms), what the text says about when and by whom (`labels`) and, when an
    embedder is configured, the searched words' vector and the model that made it
    (`vector`, or `embedding` while it is still being made: read it with vector_now)."""

    user_id: str
    text: str
    match: str | None = field(init=False)
    vector: np.ndarray | None = None
    model: str | None = None
    searched: str = None  # type: ignore[assignment]  # the text, unless make_query focused it
    labels: LabelQuery | None = None
    # The vector being made beside the keyword streams (make_query's `ahead`).
    embedding: Future[np.ndarray | None] | None = field(default=None, repr=False,
                                                         compare=False)
    # Stream results already computed for this query: the session stream reads the
    # same BM25 and vector ranks that are fused beside it.
    _ranked: dict[tuple, list[int]] = field(default_factory=dict, repr=False, compare=False)
    _depths: dict[tuple, int] = field(default_factory=dict, repr=False, compare=False)
    # Vector searches started ahead (search_ahead): kind -> (depth, hits when done).
    _ahead: dict[str, tuple[int, Callable[[], list[tuple[int, float]]]]] = field(
        default_factory=dict, repr=False, compare=False)
    # Vector searches made: kind -> (depth, (owner, cosine) best first); see nearest().
    _nearest: dict[str, tuple[int, list[tuple[int, float]]]] = field(
        default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.searched is None:
            self.searched = self.text
        self.match = build_match_query(self.searched)

    @property
    def searches_vectors(self) -> bool:
        """A vector is here or on its way, from a known model."""
        return self.model is not None and (self.vector is not None or self.embedding is not None)

    def vector_now(self) -> np.ndarray | None:
        """The vector (None: no embedder, or it failed), once made."""
        return self.embedding.result() if self.embedding is not None else self.vector

    def ranked(self, key: tuple, compute: Callable[[], list[int]]) -> list[int]:
        if key not in self._ranked:
            self._ranked[key] = compute()
        return self._ranked[key]

    def ranked_to(self, key: tuple, depth: int, compute: Callable[[int], list[int]]) -> list[int]:
        """A ranking cut to `depth`, computed once at the deepest depth asked for first
        (the fusion reads a stream deeper than the session stream does)."""
        known = self._ranked.get(key)
        if known is None or (len(known) < depth and self._depths.get(key, 0) < depth):
            known = self._ranked[key] = compute(depth)
            self._depths[key] = depth
        return known[:depth]


def make_query(user_id: str, text: str, embedder: Embedder | None = None, *,
               con: apsw.Connection | None = None, now: datetime | None = None,
               ahead: bool = False) -> Query:
    """The query for one turn, embedded once and shared by every kind searched.

    With `con`, the question is read against what the memory knows (focus_question):
    the times it names and whether it names the user become labels, and the words
    that would mislead keyword and vector search are left out of both. `now` is when
    the question is asked (relative times such as "yesterday" count from it).

    `ahead`: the question is embedded on a thread of its own and the query returned at
    once, so the keyword streams run while the model server embeds it (milliseconds to
    tens of them); the vector searches wait for it.

    If the embedder fails (model server down), the query goes on without a vector:
    keyword, importance and recency streams still answer.
    """
    searched, labels = text, None
    if con is not None:
        searched, labels = focus_question(con, user_id, text, now)
    query = Query(user_id, text, searched=searched, labels=labels)
    if embedder is None or not searched.strip():
        return query
    if ahead:
        query.model, query.embedding = embedder.model, _embeddings().submit(
            _embedded, embedder, searched)
    else:
        query.vector = _embedded(embedder, searched)
        query.model = embedder.model if query.vector is not None else None
    return query


def _embedded(embedder: Embedder, searched: str) -> np.ndarray | None:
    """The searched words' vector; None when the embedder fails."""
    try:
        # The embedder may be a server: what the user typed reaches it as it would be
        # stored, secrets redacted.
        return embedder.embed([redact_secrets(searched).text])[0]
    except EmbedderUnavailable:
        return None  # the embedder has said so, once
    except Exception as exc:  # noqa: BLE001 - any embedder failure degrades to keywords
        log.warning("query_embedding_failed", model=embedder.model, error=str(exc))
        return None


@functools.cache
def _embeddings() -> ThreadPoolExecutor:
    """Where questions are embedded ahead: two threads, for two turns at once."""
    from concurrent.futures import ThreadPoolExecutor  # start-up: only a turn embeds ahead

    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="hilo-query-embed")


Stream = Callable[[apsw.Connection, Query, OwnerKind, int], list[int]]

# -- full text ----------------------------------------------------------------------------
#
# BM25 over an OR of the user's words scores every row any word matches — and FTS5's
# bm25() also walks each word's whole doclist to count the rows holding it — so on a big
# memory a few common words cost tens of milliseconds. A query whose words match at
# most BM25_ROW_BUDGET rows in all is ranked by FTS5's bm25() as is. Past that, the words
# are split by how many rows hold them: the rarest, together holding at most the budget,
# pick and rank the candidates with bm25(); the common ones only add their share of the
# BM25 score to those candidates, computed here from the candidates' own text with
# FTS5's tokenizer, its row and token totals and cached row counts. So the cost is
# bounded by the budget, not the memory, and the order is BM25's on the whole query for
# every candidate found (on LoCoMo, recall@10 within 0.5 point of plain bm25()). Rows
# holding only common words come after, newest first. All of a query's figures are
# read in one read transaction, so they agree with each other.

@dataclass(frozen=True)
class _FullText:
    table: str  # the FTS5 table
    content: str  # the table it indexes
    join: str  # joined to it, keeping only the user's own, current rows
    text: str  # the indexed text, as one string


_FTS_PARTS = {
    "fact": _FullText("facts_fts", "facts", "JOIN facts o ON o.id = facts_fts.rowid WHERE "
                      "facts_fts MATCH ? AND o.user_id = ? AND o.superseded_at IS NULL "
                      "AND o.deleted_at IS NULL", "key || ' ' || value"),
    "card": _FullText("cards_fts", "context_cards", "JOIN context_cards o ON o.id = "
                      "cards_fts.rowid WHERE cards_fts MATCH ? AND o.user_id = ? "
                      "AND o.folded_into IS NULL", "summary || ' ' || keywords"),
    "event": _FullText("events_fts", "events", "JOIN events o ON o.id = events_fts.rowid "
                       "WHERE events_fts MATCH ? AND o.user_id = ?", "content"),
}
_FTS_SQL = {kind: f"SELECT o.id, bm25({f.table}) FROM {f.table} {f.join} "
                  f"ORDER BY bm25({f.table}) LIMIT ?" for kind, f in _FTS_PARTS.items()}
# FTS5 walks doclists backwards and stops at the limit: no scoring, no sort.
_FTS_NEWEST_SQL = {kind: f"SELECT o.id, 0.0 FROM {f.table} {f.join} "
                         f"ORDER BY {f.table}.rowid DESC LIMIT ?" for kind, f in _FTS_PARTS.items()}
# The same orders read from the index alone: the joins above look up every matching row
# (up to BM25_ROW_BUDGET, on pages all over a large table) to keep the user's current
# ones; reading twice the depth and looking up only those is about twice as fast.
_FTS_ONLY_SQL = {
    "bm25": {kind: f"SELECT rowid, bm25({f.table}) FROM {f.table} WHERE {f.table} MATCH ? "
                   f"ORDER BY bm25({f.table}) LIMIT ?" for kind, f in _FTS_PARTS.items()},
    "newest": {kind: f"SELECT rowid, 0.0 FROM {f.table} WHERE {f.table} MATCH ? "
                     "ORDER BY rowid DESC LIMIT ?" for kind, f in _FTS_PARTS.items()},
}
_FTS_JOINED_SQL = {"bm25": _FTS_SQL, "newest": _FTS_NEWEST_SQL}
BM25_ROW_BUDGET = 500
# A common word's row count is estimated from the newest this-many rows of a bigger table.
COUNT_SAMPLE_ROWS = 50 * BM25_ROW_BUDGET
# The tokenizer of every *_fts table (migrations/0001_initial.sql) and bm25()'s constants.
_TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])
_K1, _B = 1.2, 0.75
# Cached row counts are redone once the table has grown by this share.
_RECOUNT_GROWTH = 0.1


# FTS5's totals, read through its documented auxiliary-function API (xRowCount,
# xColumnTotalSize): the same figures bm25() uses. Any row serves to call them.
_TOTALS_FUNCTIONS: dict[str, Callable[[apsw.FTS5ExtensionApi], int]] = {
    "hilo_fts_row_count": lambda api: api.row_count,
    "hilo_fts_token_count": lambda api: api.column_total_size(-1),
}
_TOTALS_SQL = {f.table: f"SELECT hilo_fts_row_count({f.table}), hilo_fts_token_count({f.table}) "
                        f"FROM {f.table} LIMIT 1" for f in _FTS_PARTS.values()}
# Connections the functions are registered on; FTS5 keeps every registration until the
# connection closes, so each connection gets them once.
_WITH_TOTALS: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
_registering = threading.Lock()


def _index_size(con: apsw.Connection, table: str) -> tuple[int, float]:
    """Rows in an FTS5 index and their mean length in tokens, as bm25() sees them."""
    if con not in _WITH_TOTALS:
        with _registering:
            if con not in _WITH_TOTALS:
                for name, function in _TOTALS_FUNCTIONS.items():
                    con.register_fts5_function(name, function)
                _WITH_TOTALS.add(con)
    row = con.execute(_TOTALS_SQL[table]).fetchone()
    if row is None or not row[0]:
        return 0, 0.0
    rows, tokens = row
    return rows, tokens / rows


def _count_rows(con: apsw.Connection, part: _FullText, word: str, rows: int) -> int:
    """Rows holding the word: exact up to the budget; past it, estimated from the newest
    rows, so a word in half a million rows costs no more than a rare one."""
    match = build_match_query(word)
    table = part.table
    found = con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? "
                        "LIMIT ?)", (match, BM25_ROW_BUDGET + 1)).fetchone()[0]
    if found <= BM25_ROW_BUDGET:
        return found
    if rows <= COUNT_SAMPLE_ROWS:
        return con.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                           (match,)).fetchone()[0]
    newest = con.execute(f"SELECT max(id) FROM {part.content}").fetchone()[0] or 0
    sampled = con.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ? AND "
                          f"{table}.rowid > ?", (match, newest - COUNT_SAMPLE_ROWS)).fetchone()[0]
    return max(BM25_ROW_BUDGET + 1, round(sampled * rows / COUNT_SAMPLE_ROWS))


@dataclass
class _TableCounts:
    rows: int  # rows in the FTS index when these counts were made
    words: dict[str, int] = field(default_factory=dict)  # word -> rows holding it


class _TermCounts:
    """Rows per word and FTS table, cached per database file; redone when the table has
    grown by a tenth, or shrunk."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], _TableCounts] = {}
        self._lock = threading.Lock()

    def counts(self, con: apsw.Connection, part: _FullText, words: list[str],
               rows: int) -> dict[str, int]:
        key = (con.filename, part.table)
        with self._lock:
            cached = self._tables.get(key)
            if (cached is None or not con.filename  # an in-memory database: nothing to key on
                    or rows < cached.rows or rows > cached.rows * (1 + _RECOUNT_GROWTH)):
                cached = self._tables[key] = _TableCounts(rows)
            known = {w: cached.words[w] for w in words if w in cached.words}
        missing = {w: _count_rows(con, part, w, rows) for w in words if w not in known}
        with self._lock:
            cached.words.update(missing)
        return known | missing


_TERM_COUNTS = _TermCounts()


def _idf(rows: int, holding: int) -> float:
    """bm25()'s inverse document frequency of a word held by `holding` of `rows` rows.

    A count cached from a newer snapshot than `rows` can exceed it: it counts as every row.
    """
    holding = min(holding, rows)
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5)))


def _common_share(con: apsw.Connection, part: _FullText, words: list[str],
                  counts: dict[str, int], rows: int, mean_length: float,
                  owner_ids: list[int]) -> dict[int, float]:
    """Each owner's share of the BM25 score from these words, as bm25() would add it
    (negative: lower is better), from the owner's text."""
    if not words or not owner_ids or not rows:
        return {}
    tokenizer = con.fts5_tokenizer(*_TOKENIZER)

    def tokenize(text: str) -> list[str]:
        return tokenizer(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                         include_offsets=False, include_colocated=False)

    phrases = [(tokenize(w), _idf(rows, counts[w])) for w in words]
    marks = ",".join("?" * len(owner_ids))
    shares = {}
    for owner_id, text in con.execute(
            f"SELECT id, {part.text} FROM {part.content} WHERE id IN ({marks})", owner_ids):
        tokens = tokenize(text)
        norm = _K1 * (1 - _B + _B * len(tokens) / mean_length) if mean_length else _K1
        score = 0.0
        for phrase, idf in phrases:
            if len(phrase) == 1:
                hits = tokens.count(phrase[0])
            else:
                hits = sum(tokens[i:i + len(phrase)] == phrase
                           for i in range(len(tokens) - len(phrase) + 1)) if phrase else 0
            if hits:
                score += idf * hits * (_K1 + 1) / (hits + norm)
        shares[owner_id] = -score
    return shares


def _fts_read(con: apsw.Connection, kind: OwnerKind, order: Literal["bm25", "newest"],
              match: str, user_id: str, depth: int) -> list[tuple[int, float]]:
    """The user's current rows matching, first `depth` in this order, with bm25() (0.0
    for "newest"): read from the index alone, and joined only when too few of the first
    2 x depth rows are the user's current ones (many users, or much superseded)."""
    read = 2 * depth
    rows = con.execute(_FTS_ONLY_SQL[order][kind], (match, read)).fetchall()
    kept = set(_owned(con, user_id, kind, [row[0] for row in rows]))
    found = [row for row in rows if row[0] in kept]
    if len(found) >= depth or len(rows) < read:
        return found[:depth]
    return con.execute(_FTS_JOINED_SQL[order][kind], (match, user_id, depth)).fetchall()


def bm25_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    return query.ranked_to(("bm25", kind), depth, lambda d: _bm25_ranks(con, query, kind, d))


def _bm25_ranks(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    if query.match is None:
        return []
    # One read transaction: the row totals, the word counts and the rows scored all come
    # from one snapshot, whatever commits meanwhile.
    with con:
        return _bm25_ranks_in_snapshot(con, query, kind, depth)


def _bm25_ranks_in_snapshot(con: apsw.Connection, query: Query, kind: OwnerKind,
                            depth: int) -> list[int]:
    part = _FTS_PARTS[kind]
    user_id = query.user_id
    words = terms(query.searched)
    rows, mean_length = _index_size(con, part.table)
    counts = _TERM_COUNTS.counts(con, part, words, rows)
    if sum(counts.values()) <= BM25_ROW_BUDGET:
        return [owner_id for owner_id, _ in _fts_read(con, kind, "bm25", query.match, user_id,
                                                       depth)]
    rare, spent = [], 0
    for word in sorted(words, key=counts.__getitem__):
        if spent + counts[word] > BM25_ROW_BUDGET:
            break
        rare.append(word)
        spent += counts[word]
    common = [w for w in words if w not in rare]
    scores: dict[int, float] = {}
    if rare:
        scores.update(_fts_read(con, kind, "bm25", build_match_query(" ".join(rare)), user_id,
                                depth))
    if len(scores) < depth:
        for owner_id, _ in _fts_read(con, kind, "newest", build_match_query(" ".join(common)),
                                     user_id, depth):
            scores.setdefault(owner_id, 0.0)
    shares = _common_share(con, part, common, counts, rows, mean_length, list(scores))
    for owner_id, share in shares.items():
        scores[owner_id] += share
    return sorted(scores, key=lambda owner_id: (scores[owner_id], -owner_id))[:depth]


# Only current facts and live cards are retrievable; every event is (compacted too).
# "+user_id": with more than a few ids SQLite would otherwise pick the user's index and
# walk all of their rows instead of looking the ids up.
_CURRENT_SQL = {
    "fact": "SELECT id FROM facts WHERE +user_id = ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL AND id IN ({marks})",
    "card": "SELECT id FROM context_cards WHERE +user_id = ? AND folded_into IS NULL "
            "AND id IN ({marks})",
}


_OWNED_SQL = {**_CURRENT_SQL,
              "event": "SELECT id FROM events WHERE +user_id = ? AND id IN ({marks})"}


def _current(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> list[int]:
    """The ids that are current facts or live cards (any other kind: all of them), in order."""
    return _owned(con, user_id, kind, ids) if kind in _CURRENT_SQL else ids


def _owned(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> list[int]:
    """The ids that are the user's, and current or live, in order."""
    if not ids:
        return ids
    sql = _OWNED_SQL[kind].format(marks=",".join("?" * len(ids)))
    keep = {row[0] for row in con.execute(sql, (user_id, *ids))}
    return [i for i in ids if i in keep]


# Past events get a second, deeper look (app.turn.context: QUOTE_DEPTHS): their first read
# keeps this many, so the second reuses it instead of searching again. Facts and cards
# are read as deep as asked: an approximate index pays for every hit it returns.
EVENT_VECTOR_DEPTH = 100


def _vector_read_depth(kind: OwnerKind, depth: int) -> int:
    return max(depth, EVENT_VECTOR_DEPTH) if kind == "event" else depth


def _hits_wanted(kind: OwnerKind, depth: int) -> int:
    # Superseded facts and folded cards keep their vectors: look deeper, then filter.
    return 2 * depth if kind in _CURRENT_SQL else depth


def _vector_index() -> VectorIndex:
    # start-up: app.recall.vectors loads numpy, which a search without an embedder (`hilo memory
    # search` with `[embedder] kind = "none"`) never needs
    from app.recall.vectors import VECTOR_INDEX

    return VECTOR_INDEX


def search_ahead(con: apsw.Connection, query: Query, limits: Mapping[OwnerKind, int]) -> None:
    """Start the searches to come (kind -> search()'s limit) before any is fused: the
    vector searches now, to run on their own thread (app.recall.vectors: nearest_soon), and,
    while the question is still being embedded (make_query's `ahead`), each kind's BM25
    ranks here meanwhile, instead of waiting for the vector in the first search."""
    if not query.searches_vectors:
        return
    depths = {kind: _stream_depth(limit) for kind, limit in limits.items() if limit > 0}
    for kind, depth in depths.items():
        wanted = _hits_wanted(kind, _vector_read_depth(kind, depth))
        query._ahead[kind] = (wanted, _vector_index().nearest_soon(
            con, query.user_id, query.model, kind,
            query.vector if query.embedding is None else query.embedding, wanted))
    if query.embedding is not None and not query.embedding.done():
        for kind, depth in depths.items():
            bm25_stream(con, query, kind, depth)


def vector_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners whose stored vector (same model as the query's) is closest by cosine."""
    return query.ranked_to(("vector", kind), _vector_read_depth(kind, depth),
                           lambda d: _vector_ranks(con, query, kind, d))[:depth]


def _vector_ranks(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    if query.model is None or query.vector_now() is None:
        return []
    hits = nearest(con, query, kind, _hits_wanted(kind, depth))
    return _current(con, query.user_id, kind, [owner_id for owner_id, _ in hits])[:depth]


def nearest(con: apsw.Connection, query: Query, kind: OwnerKind,
            depth: int) -> list[tuple[int, float]]:
    """The `depth` owners whose vectors are nearest the query's, best first, with cosine:
    searched once per query and kind at the deepest depth asked first (the vector
    stream, then the evidence check of `matching`), or started ahead."""
    known_depth, hits = query._nearest.get(kind, (0, []))
    if known_depth < depth:
        ahead_depth, ahead = query._ahead.pop(kind, (0, None))
        if ahead is not None and ahead_depth >= depth:
            known_depth, hits = ahead_depth, ahead()
        else:
            known_depth, hits = depth, _vector_index().nearest(
                con, query.user_id, query.model, kind, query.vector_now(), depth)
        query._nearest[kind] = (known_depth, hits)
    return hits[:depth]


# The threshold is written into the SQL, not bound, so SQLite can use partial indexes
# "WHERE importance >= 0.8" (without them, each query scans the user's rows).
_IMPORTANCE_SQL = {
    "fact": f"SELECT id FROM facts WHERE user_id = ? AND importance >= {IMPORTANT} "
            "AND superseded_at IS NULL AND deleted_at IS NULL "
            "ORDER BY importance DESC, updated_at DESC, id DESC LIMIT ?",
    "card": f"SELECT id FROM context_cards WHERE user_id = ? AND importance >= {IMPORTANT} "
            "AND folded_into IS NULL ORDER BY importance DESC, created_at DESC, id DESC LIMIT ?",
    "event": f"SELECT id FROM events WHERE user_id = ? AND importance >= {IMPORTANT} "
             "ORDER BY importance DESC, created_at DESC, id DESC LIMIT ?",
}


def importance_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners marked important (>= 0.8), most important and then newest first."""
    return [row[0] for row in con.execute(_IMPORTANCE_SQL[kind], (query.user_id, depth))]


_RECENCY_SQL = {
    "fact": "SELECT id FROM facts WHERE user_id = ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL ORDER BY updated_at DESC, id DESC LIMIT ?",
    "card": "SELECT id FROM context_cards WHERE user_id = ? AND folded_into IS NULL "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
    "event": "SELECT id FROM events WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
}


def recency_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """The newest owners."""
    return [row[0] for row in con.execute(_RECENCY_SQL[kind], (query.user_id, depth))]


# -- session: text evidence, spread to session neighbours ----------------------------
# In a conversation the answer is often a turn or two away from the words that match:
# "What's the pup's name?" matches the question, "I named him Buddy" is the reply. The
# session stream first combines the text evidence: an owner's evidence is its
# reciprocal rank in the BM25 and vector streams (k = SESSION_EVIDENCE_K, both weighing
# 1). Facts and cards are ranked by that evidence. An event is ranked by its own
# evidence plus, for each distance d = 1, 2, ..., SESSION_SPREAD[d - 1] times the
# stronger evidence of the two events d places before and after it in its session
# (the stronger, not the sum: many weak neighbours must not outscore one strong
# match). The numbers were chosen on LoCoMo's development conversations
# (tests/bench/locomo.py): recall@10 of events stays within 0.01 for spreads from
# (0.4, 0.2) to (0.6, 0.4), and drops once a neighbour counts as much as the event
# itself; without spreading, this evidence alone beats the RRF of BM25 and vectors at
# k = 60 (0.668 against 0.627).
#
# A message that asks is weak evidence of what was said: "What's your best camping
# memory?" matches "where has she camped?" better than the answer does, but only the
# answer tells. So an event's own evidence counts ASKING_WEIGHT for the share of its
# sentences that are questions (a message of one question: ASKING_WEIGHT; half of its
# sentences: halfway), while what it spreads to its neighbours keeps its full weight.
# LoCoMo development conversations (tests/bench/locomo.py --tune, the product's stored
# form), fusion recall@10 at ASKING_WEIGHT 1 (no difference), 0.25 and 0: 0.763, 0.780,
# 0.779; recall@2 0.483, 0.502, 0.510. The share of sentences, not "ends with ?": a
# question after news is still news.
SESSION_EVIDENCE_K = 5
SESSION_SPREAD: tuple[float, ...] = (0.4, 0.3)
ASKING_WEIGHT = 0.25
# How deep the session stream reads the BM25 and vector streams.
SESSION_DEPTH = 50

# For each event: up to ?2 event ids before and after it in its session, compacted or
# not (one index seek per direction and `compacted` value, whatever the session's size).
_NEIGHBOUR_ARM = ("(SELECT group_concat(id) FROM (SELECT n.id FROM events n "
                  "WHERE n.user_id = e.user_id AND n.session_id = e.session_id "
                  "AND n.compacted = {compacted} AND n.id {op} e.id ORDER BY n.id {order} "
                  "LIMIT ?2))")
_NEIGHBOURS_SQL = (
    "SELECT e.id, "
    + ", ".join(_NEIGHBOUR_ARM.format(compacted=c, op=op, order=order)
                for op, order in (("<", "DESC"), (">", "ASC")) for c in (0, 1))
    + " FROM json_each(?1) j CROSS JOIN events e ON e.id = j.value WHERE e.user_id = ?3"
)


def _ids(joined: str | None) -> list[int]:
    return [int(i) for i in joined.split(",")] if joined else []


def session_neighbours(con: apsw.Connection, user_id: str, event_ids: list[int],
                       width: int) -> dict[int, tuple[list[int], list[int]]]:
    """For each of the user's events: the ids of up to `width` events before it in its
    session (nearest first) and up to `width` after it (nearest first)."""
    if not event_ids or width < 1:
        return {}
    found = {}
    for event_id, *arms in con.execute(_NEIGHBOURS_SQL, (json.dumps(event_ids), width, user_id)):
        before = sorted(_ids(arms[0]) + _ids(arms[1]), reverse=True)[:width]
        after = sorted(_ids(arms[2]) + _ids(arms[3]))[:width]
        found[event_id] = (before, after)
    return found


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
# +user_id: the ids pick the rows; an index on user_id would read all the user's events.
_CONTENT_SQL = "SELECT id, content FROM events WHERE +user_id = ? AND id IN ({marks})"


def asking_share(text: str) -> float:
    """The share of the text's sentences that are questions (0 for no sentence)."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    return sum(s.endswith("?") for s in sentences) / len(sentences) if sentences else 0.0


def _own_weights(con: apsw.Connection, user_id: str, event_ids: list[int]) -> dict[int, float]:
    """What each event's own evidence counts for: less the more of it asks."""
    sql = _CONTENT_SQL.format(marks=",".join("?" * len(event_ids)))
    return {owner_id: 1.0 - (1.0 - ASKING_WEIGHT) * asking_share(content)
            for owner_id, content in con.execute(sql, (user_id, *event_ids))}


def _ranked(scores: dict[int, float], depth: int) -> list[int]:
    return sorted(scores, key=lambda owner_id: (-scores[owner_id], -owner_id))[:depth]


def session_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners ranked by their BM25 and vector evidence combined; events also by the
    evidence for the events around them in their session, and their own evidence less
    the more of them asks."""
    return query.ranked(("session", kind, depth), lambda: _session_ranks(con, query, kind, depth))


def _session_ranks(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    evidence: dict[int, float] = defaultdict(float)
    for stream in (bm25_stream, vector_stream):
        for position, owner_id in enumerate(stream(con, query, kind, SESSION_DEPTH), start=1):
            if owner_id is not None:  # a stream may hold a place for an owner left out
                evidence[owner_id] += 1.0 / (SESSION_EVIDENCE_K + position)
    if kind != "event" or not evidence:
        return _ranked(evidence, depth)
    # strongest[event][d - 1]: the best evidence d places away from the event.
    strongest: dict[int, list[float]] = defaultdict(lambda: [0.0] * len(SESSION_SPREAD))
    neighbours = session_neighbours(con, query.user_id, list(evidence), len(SESSION_SPREAD))
    for owner_id, own in evidence.items():
        before, after = neighbours.get(owner_id, ([], []))
        for side in (before, after):
            for distance, neighbour in enumerate(side):
                best = strongest[neighbour]
                best[distance] = max(best[distance], own)
    weights = _own_weights(con, query.user_id, list(evidence))
    scores = {owner_id: evidence.get(owner_id, 0.0) * weights.get(owner_id, 1.0)
              + sum(share * best for share, best in zip(SESSION_SPREAD, strongest[owner_id]))
              for owner_id in evidence.keys() | strongest.keys()}
    return _ranked(scores, depth)


# -- labels: when and by whom -------------------------------------------------------------
# A question that names a time ("in June", "on 13 October 2023", "last summer") or the
# user (by the name in their profile) is asked about events of that time, or said by
# the user. The labels stream holds the events the text streams found (in the session
# stream's order) that carry those labels (app/recall/event_labels.py), then, when the
# question names a time, the newest other events of that time: "what did I do in May?"
# has no words to search for, but May has events. On LoCoMo's development
# conversations: fusion recall@10 0.713 without it, 0.761 with it (recall@2 0.394,
# 0.478); its weight from 0.5 to 2 changes recall@10 by less than 0.005, and the newest
# others by 0.001 (its questions name the time beside words that match).

_LABELS_SQL = "SELECT id, labels FROM event_labels WHERE id IN ({marks})"
_LABELLED_SQL = ("SELECT e.id FROM event_labels_fts JOIN events e ON e.id = event_labels_fts.rowid "
                 "WHERE event_labels_fts MATCH ? AND e.user_id = ? "
                 "ORDER BY event_labels_fts.rowid DESC LIMIT ?")


def labels_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Events that carry the labels the question names: text matches first, then the
    newest others of the time it names. Empty for facts and cards, and for questions
    that name no time and not the user."""
    if kind != "event" or query.labels is None:
        return []
    return query.ranked(("labels", depth), lambda: _label_ranks(con, query, depth))


def _label_ranks(con: apsw.Connection, query: Query, depth: int) -> list[int]:
    labels = query.labels
    assert labels is not None
    matched = session_stream(con, query, "event", SESSION_DEPTH)
    found: dict[int, set[str]] = {}
    if matched:
        sql = _LABELS_SQL.format(marks=",".join("?" * len(matched)))
        found = {owner_id: set(line.split()) for owner_id, line in con.execute(sql, matched)}
    ranked = [owner_id for owner_id in matched if labels.holds(found.get(owner_id, set()))]
    if labels.times and len(ranked) < depth:
        seen = set(ranked)
        for (owner_id,) in con.execute(_LABELLED_SQL, (labels.match(), query.user_id, depth)):
            if owner_id not in seen:
                ranked.append(owner_id)
    return ranked[:depth]


# -- reading the question ------------------------------------------------------------------
# Names mislead both keyword and vector search in a conversation. The user's own name:
# the user seldom says it, the assistant says it all the time ("Thanks, Caroline!"), so
# it finds the assistant's pleasantries; it becomes the label "said by the user"
# instead. And a name in a large share of the stored events — the other person's, which
# the user says in greetings and thanks — is left out of the words searched and of the
# text embedded (unless nothing else is left). Only words written as names: a topic
# that fills a small memory ("the garden project") must still be searched for. On
# LoCoMo's development conversations (tests/bench/locomo.py, the product's stored
# form), fusion recall@10 of events went from 0.654 without either to 0.762 with both
# and the labels stream (leaving out every common word, not only names: 0.761). A
# name is common from COMMON_SHARE of the events: 0.05: 0.743, 0.075: 0.744, 0.1:
# 0.749, 0.15: 0.736, 0.2: 0.736 (measured before the rule on naming someone else).
COMMON_SHARE = 0.1
# ... and never a word in fewer events than this: a small memory has no common words.
COMMON_MIN_ROWS = 50

_NAME_SQL = ("SELECT value FROM profile WHERE user_id = ? AND key = 'name' "
             "AND deleted_at IS NULL")


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    kept, at = [], 0
    for start, end in sorted(spans):
        kept.append(text[at:start])
        at = max(at, end)
    kept.append(text[at:])
    return " ".join("".join(kept).split())


def focus_question(con: apsw.Connection, user_id: str, text: str,
                   now: datetime | None = None) -> tuple[str, LabelQuery | None]:
    """The words of the question worth searching for, and its labels."""
    row = con.execute(_NAME_SQL, (user_id,)).fetchone()
    read = read_question(text, now or datetime.now(timezone.utc), [row[0]] if row else [])
    labels = read.labels
    searched = _without(text, list(read.name_spans)) if read.name_spans else text
    words = terms(searched)
    common: list[str] = []
    if words:
        part = _FTS_PARTS["event"]
        rows, _ = _index_size(con, part.table)
        counts = _TERM_COUNTS.counts(con, part, words, rows)
        floor = max(COMMON_MIN_ROWS, COMMON_SHARE * rows)
        common = [w for w in words if counts[w] >= floor]
    if common:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, common)) + r")\b",
                             re.IGNORECASE)
        names = [m for m in pattern.finditer(searched)
                 if m.group()[0].isupper() and m.start() > 0]
        searched = _without(searched, [m.span() for m in names])
        # Someone the user talks with or about: a question naming them as well as the
        # user is about both, not only what the user said.
        if names and labels is not None and labels.role is not None:
            labels = LabelQuery(labels.times) if labels.times else None
    if not terms(searched):  # nothing left to search for: better the words than none
        searched = text
    return searched, labels


STREAMS: dict[str, Stream] = {
    "bm25": bm25_stream,
    "vector": vector_stream,
    "session": session_stream,
    "labels": labels_stream,
    "importance": importance_stream,
    "recency": recency_stream,
}
# A stream's weight multiplies its RRF term; streams not listed weigh 1. The text
# evidence enters through the session stream, which already combines BM25 and vectors:
# on LoCoMo's development conversations (tests/bench/locomo.py, all-MiniLM-L6-v2)
# every extra weight on the raw BM25 and vector ranks lowered recall@10 (0.05 each:
# -0.003, 0.1: -0.007, 0.25: -0.018), so they only break ties (and still show in
# explain() and decide "did anything match"). Importance (>= 0.8: set on purpose by
# the user or a worker) lifts an owner a few places among comparable matches; LoCoMo
# has no important turns, so that weight is a choice, not a measurement. Recency only
# breaks near-ties: more pushes the newest turns into every answer. Re-checked on the
# product's stored form (issue 14; recall@10 with the labels stream, before the rule on
# names): BM25 = vector = 0, 0.05, 0.1, 0.25: 0.754, 0.749, 0.749, 0.748; RRF k = 5,
# 10, 20, 60: 0.753, 0.749, 0.748, 0.746; spreads (0.3, 0.2), (0.4, 0.3, 0.1), (0.5,
# 0.3): 0.750, 0.753, 0.747 — all within noise, so nothing moved. Tried there and not
# kept: re-ranking the top 50 by MiniLM cosine (-0.000 to -0.001), pseudo-relevance
# feedback from the top 3-5 events, as BM25 terms (-0.009 to +0.007) or as a vector
# (+0.004 to +0.006, recall@2 -0.003 to -0.005), and leaving the time words out of the
# words searched (-0.003).
WEIGHTS: dict[str, float] = {"bm25": 0.05, "vector": 0.05, "session": 1.0, "labels": 1.0,
                             "importance": 0.25, "recency": 0.1}
# Streams that judge the question itself; the others are priors over every owner.
MATCH_STREAMS = frozenset({"bm25", "vector", "session", "labels"})


def fuse(ranked: dict[str, list[int | None]], kind: OwnerKind,
         weights: dict[str, float] | None = None, limit: int | None = None) -> list[Candidate]:
    """Reciprocal Rank Fusion: score = Σ w_stream / (k + rank), deduplicated by owner id;
    ties broken by id, newest first; the first `limit` (None: all). Without weights every
    stream weighs 1."""
    weights = weights or {}
    ranks: dict[int, dict[str, int]] = {}
    for stream, ids in ranked.items():
        for position, owner_id in enumerate(ids, start=1):
            if owner_id is not None:  # None holds a position for an owner left out
                ranks.setdefault(owner_id, {}).setdefault(stream, position)
    scores = {owner_id: sum(weights.get(s, 1.0) / (RRF_K + p) for s, p in r.items())
              for owner_id, r in ranks.items()}
    # Candidates only for what is returned: a search keeps a few of a hundred or more.
    best = sorted(scores, key=lambda owner_id: (-scores[owner_id], -owner_id))[:limit]
    return [Candidate(kind, owner_id, ranks[owner_id], scores[owner_id]) for owner_id in best]


def _stream_depth(limit: int) -> int:
    """How deep each stream is read for a search of the top `limit`."""
    return max(limit, STREAM_DEPTH)


def search(con: apsw.Connection, user_id: str, text: str, kind: OwnerKind,
           limit: int, streams: dict[str, Stream] | None = None, *,
           query: Query | None = None, embedder: Embedder | None = None,
           weights: dict[str, float] | None = None,
           require_match: bool = True) -> list[Candidate]:
    """The top `limit` owners of one kind for this text, fused across streams.

    Pass `query` (from make_query) to embed the text once for several kinds, or
    `embedder` to embed it here; with neither, the vector stream is silent. With
    `require_match`, the priors (importance, recency) re-rank what the text streams
    found but add nothing of their own, so "nothing matched" stays visible to callers.
    """
    if query is None:
        query = make_query(user_id, text, embedder, con=con)
    streams = STREAMS if streams is None else streams
    depth = _stream_depth(limit)
    ranked: dict[str, list[int | None]] = {
        name: stream(con, query, kind, depth) for name, stream in streams.items()
        if name in MATCH_STREAMS}
    matched = {owner_id for ids in ranked.values() for owner_id in ids}
    if require_match and ranked:
        if not matched:
            return []
        # Priors only re-rank what matched: the others keep their place in the ranking
        # but are never built into candidates.
        for name, stream in streams.items():
            if name not in ranked:
                ids = stream(con, query, kind, depth)
                ranked[name] = [i if i in matched else None for i in ids]
    else:
        ranked.update((name, stream(con, query, kind, depth))
                      for name, stream in streams.items() if name not in ranked)
    ranked = {name: ranked[name] for name in streams}  # the callers' stream order
    return fuse(ranked, kind, WEIGHTS if weights is None else weights, limit)


@dataclass(frozen=True)
class SearchHit:
    """One search result for people (the REPL's /search, the API, the CLI)."""

    kind: OwnerKind
    id: int
    text: str
    created_at: str
    candidate: Candidate

    def to_dict(self, explain: bool = False) -> dict:
        hit = {"kind": self.kind, "id": self.id, "text": self.text, "created_at": self.created_at}
        if explain:
            hit["explain"] = self.candidate.explain()
        return hit


_TEXT_SQL = {
    "fact": "SELECT category || ' · ' || key || ': ' || value, updated_at FROM facts "
            "WHERE id = ? AND user_id = ?",
    "card": "SELECT summary, created_at FROM context_cards WHERE id = ? AND user_id = ?",
    "event": "SELECT role || ': ' || content, created_at FROM events WHERE id = ? AND user_id = ?",
}


# A search a person typed shows what matches: the nearest vectors always exist, so one
# found only by meaning must be at least this close (cosine) to count as a match.
SEARCH_MIN_SIMILARITY = 0.6


def search_memory(con: apsw.Connection, user_id: str, text: str,
                  limit: int = 10, *, embedder: Embedder | None = None) -> list[SearchHit]:
    """Facts, then cards, then raw events (compacted ones included) matching the text: a
    keyword match, or a meaning at least SEARCH_MIN_SIMILARITY close; no match, no hits."""
    hits: list[SearchHit] = []
    query = make_query(user_id, text, embedder, con=con)
    for kind in ("fact", "card", "event"):
        found = search(con, user_id, text, kind, limit - len(hits), query=query)
        for candidate in matching(con, query, kind, found):
            row = con.execute(_TEXT_SQL[kind], (candidate.id, user_id)).fetchone()
            if row:
                hits.append(SearchHit(kind, candidate.id, row[0], row[1], candidate))
        if len(hits) >= limit:
            break
    return hits


def matching(con: apsw.Connection, query: Query, kind: OwnerKind,
             found: list[Candidate]) -> list[Candidate]:
    """`found` when some of it matches by keyword or by close meaning; then without what
    only a distant vector brought. Session neighbours stay beside a match."""
    close: set[int] = set()
    if query.model is not None and query.vector_now() is not None:
        close = {owner_id for owner_id, cosine in nearest(
            con, query, kind, 2 * max(len(found), STREAM_DEPTH))
            if cosine >= SEARCH_MIN_SIMILARITY}
    evident = {c.id for c in found if "bm25" in c.ranks or c.id in close}
    if not evident:
        return []
    return [c for c in found if c.id in evident or "session" in c.ranks]
