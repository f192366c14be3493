"""Retrieval: which facts, cards and events are relevant to what the user just said.

Each stream returns ranked owner ids for one user; the streams are fused by
Reciprocal Rank Fusion (k = 60), so no stream needs calibrated scores. Today's stream
is full text (FTS5 BM25); vectors, importance and recency plug in as further streams
in `STREAMS`. When nothing matches, the caller falls back to the most recent items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

import apsw

from app.fts import build_match_query

RRF_K = 60
# How many candidates each stream contributes before fusion.
STREAM_DEPTH = 50

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
    """What a stream needs: the user, the text and its FTS5 form (None if no terms)."""

    user_id: str
    text: str
    match: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.match = build_match_query(self.text)


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


def bm25_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    if query.match is None:
        return []
    return [row[0] for row in con.execute(_FTS_SQL[kind], (query.match, query.user_id, depth))]


STREAMS: dict[str, Stream] = {"bm25": bm25_stream}


def fuse(ranked: dict[str, list[int]], kind: OwnerKind) -> list[Candidate]:
    """Reciprocal Rank Fusion: score = Σ 1 / (k + rank); ties broken by id, newest first."""
    ranks: dict[int, dict[str, int]] = {}
    for stream, ids in ranked.items():
        for position, owner_id in enumerate(ids, start=1):
            ranks.setdefault(owner_id, {}).setdefault(stream, position)
    candidates = [
        Candidate(kind, owner_id, r, sum(1.0 / (RRF_K + p) for p in r.values()))
        for owner_id, r in ranks.items()
    ]
    candidates.sort(key=lambda c: (-c.score, -c.id))
    return candidates


def search(con: apsw.Connection, user_id: str, text: str, kind: OwnerKind,
           limit: int, streams: dict[str, Stream] | None = None) -> list[Candidate]:
    """The top `limit` owners of one kind for this text, fused across streams."""
    query = Query(user_id, text)
    streams = STREAMS if streams is None else streams
    ranked = {name: stream(con, query, kind, max(limit, STREAM_DEPTH))
              for name, stream in streams.items()}
    return fuse(ranked, kind)[:limit]


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
                  limit: int = 10) -> list[SearchHit]:
    """Facts, then cards, then raw events (compacted ones included) matching the text."""
    hits: list[SearchHit] = []
    for kind in ("fact", "card", "event"):
        for candidate in search(con, user_id, text, kind, limit - len(hits)):
            row = con.execute(_TEXT_SQL[kind], (candidate.id, user_id)).fetchone()
            if row:
                hits.append(SearchHit(kind, candidate.id, row[0], row[1], candidate))
        if len(hits) >= limit:
            break
    return hits
