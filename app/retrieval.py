"""Retrieval: which facts, cards and events are relevant to what the user just said.

Each stream returns ranked owner ids for one user; the streams are fused by
Reciprocal Rank Fusion (k = 60), so no stream needs calibrated scores. The streams in
`STREAMS`: full text (FTS5 BM25), vectors (cosine against the query's embedding, same
model only), importance (>= 0.8) and recency. Each stream has a weight in the fusion
(`WEIGHTS`): importance and recency are weak priors that break ties between what the
text streams found, not evidence of relevance in themselves. When nothing matches,
the caller falls back to the most recent items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal

import apsw
import numpy as np
import structlog

from app.fts import build_match_query, terms
from app.vectors import VECTOR_INDEX

if TYPE_CHECKING:
    from app.embedders import Embedder

log = structlog.get_logger(__name__)

RRF_K = 60
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
    """What a stream needs: the user, the text, its FTS5 form (None if no terms) and,
    when an embedder is configured, the text's vector and the model that made it."""

    user_id: str
    text: str
    match: str | None = field(init=False)
    vector: np.ndarray | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        self.match = build_match_query(self.text)


def make_query(user_id: str, text: str, embedder: Embedder | None = None) -> Query:
    """The query for one turn, embedded once and shared by every kind searched.

    If the embedder fails (model server down), the query goes on without a vector:
    keyword, importance and recency streams still answer.
    """
    query = Query(user_id, text)
    if embedder is not None and text.strip():
        try:
            query.vector = embedder.embed([text])[0]
            query.model = embedder.model
        except Exception as exc:  # noqa: BLE001 - any embedder failure degrades to keywords
            log.warning("query_embedding_failed", model=embedder.model, error=str(exc))
    return query


Stream = Callable[[apsw.Connection, Query, OwnerKind, int], list[int]]

# Full-text SQL per owner kind: only the user's own, current rows.
_FTS_SQL = {
    "fact": "SELECT f.id FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid "
            "WHERE facts_fts MATCH ? AND f.user_id = ? AND f.superseded_at IS NULL "
            "AND f.deleted_at IS NULL ORDER BY bm25(facts_fts) LIMIT ?",
    "card": "SELECT c.id FROM cards_fts JOIN context_cards c ON c.id = cards_fts.rowid "
            "WHERE cards_fts MATCH ? AND c.user_id = ? AND c.folded_into IS NULL "
            "ORDER BY bm25(cards_fts) LIMIT ?",
    "event": "SELECT e.id FROM events_fts JOIN events e ON e.id = events_fts.rowid "
             "WHERE events_fts MATCH ? AND e.user_id = ? ORDER BY bm25(events_fts) LIMIT ?",
}


# The same rows, newest first: FTS5 walks its doclists backwards and stops at the limit.
_FTS_RECENT_SQL = {
    kind: sql.replace(f"ORDER BY bm25({table})", f"ORDER BY {table}.rowid DESC")
    for kind, sql, table in (("fact", _FTS_SQL["fact"], "facts_fts"),
                             ("card", _FTS_SQL["card"], "cards_fts"),
                             ("event", _FTS_SQL["event"], "events_fts"))
}
_FTS_TABLE = {"fact": "facts_fts", "card": "cards_fts", "event": "events_fts"}
# BM25 scores every row the query matches, so an OR of common words costs in proportion
# to the memory's size. Terms are taken rarest first while together they match at most
# this many rows, and ranked by BM25; the rest — too common to score cheaply, and weak
# evidence anyway (low IDF) — add their matches newest first. Memories whose whole
# query matches fewer rows are ranked by plain BM25, as before.
BM25_ROW_BUDGET = 1000


def _rows_matching(con: apsw.Connection, kind: OwnerKind, match: str, cap: int) -> int:
    """How many rows match, counting no further than cap + 1 (cheap for common terms)."""
    table = _FTS_TABLE[kind]
    return con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? "
                       "LIMIT ?)", (match, cap + 1)).fetchone()[0]


def bm25_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    if query.match is None:
        return []
    if _rows_matching(con, kind, query.match, BM25_ROW_BUDGET) <= BM25_ROW_BUDGET:
        return [row[0] for row in con.execute(_FTS_SQL[kind], (query.match, query.user_id, depth))]
    words = terms(query.text)
    matches = {w: _rows_matching(con, kind, build_match_query(w), BM25_ROW_BUDGET) for w in words}
    rare, spent = [], 0
    for word in sorted(words, key=matches.__getitem__):
        if spent + matches[word] > BM25_ROW_BUDGET:
            break
        rare.append(word)
        spent += matches[word]
    found: list[int] = []
    if rare:
        found = [row[0] for row in con.execute(
            _FTS_SQL[kind], (build_match_query(" ".join(rare)), query.user_id, depth))]
    common = [w for w in words if w not in rare]
    if common and len(found) < depth:
        seen = set(found)
        for (owner_id,) in con.execute(_FTS_RECENT_SQL[kind], (
                build_match_query(" ".join(common)), query.user_id, depth + len(found))):
            if owner_id not in seen:
                found.append(owner_id)
                if len(found) == depth:
                    break
    return found


# Only current facts and live cards are retrievable; every event is (compacted too).
_CURRENT_SQL = {
    "fact": "SELECT id FROM facts WHERE user_id = ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL AND id IN ({marks})",
    "card": "SELECT id FROM context_cards WHERE user_id = ? AND folded_into IS NULL "
            "AND id IN ({marks})",
}


def _current(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> list[int]:
    if kind not in _CURRENT_SQL or not ids:
        return ids
    sql = _CURRENT_SQL[kind].format(marks=",".join("?" * len(ids)))
    keep = {row[0] for row in con.execute(sql, (user_id, *ids))}
    return [i for i in ids if i in keep]


def vector_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners whose stored vector (same model as the query's) is closest by cosine."""
    if query.vector is None or query.model is None:
        return []
    # Superseded facts and folded cards keep their vectors: look deeper, then filter.
    extra = depth if kind in _CURRENT_SQL else 0
    nearest = VECTOR_INDEX.nearest(con, query.user_id, query.model, kind, query.vector,
                                   depth + extra)
    return _current(con, query.user_id, kind, [owner_id for owner_id, _ in nearest])[:depth]


_IMPORTANCE_SQL = {
    "fact": "SELECT id FROM facts WHERE user_id = ? AND importance >= ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL ORDER BY importance DESC, updated_at DESC, id DESC LIMIT ?",
    "card": "SELECT id FROM context_cards WHERE user_id = ? AND importance >= ? "
            "AND folded_into IS NULL ORDER BY importance DESC, created_at DESC, id DESC LIMIT ?",
    "event": "SELECT id FROM events WHERE user_id = ? AND importance >= ? "
             "ORDER BY importance DESC, created_at DESC, id DESC LIMIT ?",
}


def importance_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners marked important (>= 0.8), most important and then newest first."""
    return [row[0] for row in con.execute(_IMPORTANCE_SQL[kind], (query.user_id, IMPORTANT, depth))]


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


STREAMS: dict[str, Stream] = {
    "bm25": bm25_stream,
    "vector": vector_stream,
    "importance": importance_stream,
    "recency": recency_stream,
}
# A stream's weight multiplies its RRF term; streams not listed weigh 1. The priors'
# and the vector stream's weights were chosen on LoCoMo's development conversations
# (tests/bench/locomo.py --tune, all-MiniLM-L6-v2): the priors at 1 push the newest
# turns into every answer, and MiniLM's vectors at full weight dilute BM25's good ranks.
WEIGHTS: dict[str, float] = {"bm25": 1.0, "vector": 0.25, "importance": 0.1, "recency": 0.1}
# Streams that judge the text itself; the others are priors over every owner.
MATCH_STREAMS = frozenset({"bm25", "vector"})


def fuse(ranked: dict[str, list[int]], kind: OwnerKind,
         weights: dict[str, float] | None = None) -> list[Candidate]:
    """Reciprocal Rank Fusion: score = Σ w_stream / (k + rank), deduplicated by owner id;
    ties broken by id, newest first. Without weights every stream weighs 1."""
    weights = weights or {}
    ranks: dict[int, dict[str, int]] = {}
    for stream, ids in ranked.items():
        for position, owner_id in enumerate(ids, start=1):
            ranks.setdefault(owner_id, {}).setdefault(stream, position)
    candidates = [
        Candidate(kind, owner_id, r,
                  sum(weights.get(s, 1.0) / (RRF_K + p) for s, p in r.items()))
        for owner_id, r in ranks.items()
    ]
    candidates.sort(key=lambda c: (-c.score, -c.id))
    return candidates


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
        query = make_query(user_id, text, embedder)
    streams = STREAMS if streams is None else streams
    ranked = {name: stream(con, query, kind, max(limit, STREAM_DEPTH))
              for name, stream in streams.items()}
    candidates = fuse(ranked, kind, WEIGHTS if weights is None else weights)
    if require_match and MATCH_STREAMS & streams.keys():
        candidates = [c for c in candidates if MATCH_STREAMS & c.ranks.keys()]
    return candidates[:limit]


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


def search_memory(con: apsw.Connection, user_id: str, text: str,
                  limit: int = 10, *, embedder: Embedder | None = None) -> list[SearchHit]:
    """Facts, then cards, then raw events (compacted ones included) matching the text."""
    hits: list[SearchHit] = []
    query = make_query(user_id, text, embedder)
    for kind in ("fact", "card", "event"):
        for candidate in search(con, user_id, text, kind, limit - len(hits), query=query):
            row = con.execute(_TEXT_SQL[kind], (candidate.id, user_id)).fetchone()
            if row:
                hits.append(SearchHit(kind, candidate.id, row[0], row[1], candidate))
        if len(hits) >= limit:
            break
    return hits
