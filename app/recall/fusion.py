"""Fusion: which facts, cards and events are relevant to what the user just said.

Each stream returns ranked owner ids for one user; the streams are fused by
Reciprocal Rank Fusion (`RRF_K`), so no stream needs calibrated scores. The streams in
`STREAMS`: full text (FTS5 BM25: app/recall/bm25.py), vectors, session, labels,
importance and recency (app/recall/streams.py), and learned (app/recall/learned.py).
Each stream has a weight in the fusion (`WEIGHTS`): importance and recency are priors that re-rank what the other streams
found (importance lifts what was marked important, recency only breaks ties), not
evidence of relevance in themselves. When nothing matches, the caller falls back to
the most recent items. The question itself is read first (app/recall/query.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import apsw

from app.events import Event
from app.model.tool_calls import text_with_tool_calls
from app.recall.bm25 import indexed_texts
from app.recall.learned import learned_stream
from app.recall.owners import OwnerKind, withheld
from app.recall.query import Query, make_query
from app.recall.sentences import WordsHeld
from app.recall.streams import (
    bm25_stream,
    event_labels,
    importance_stream,
    labels_stream,
    nearest,
    reach,
    recency_stream,
    session_stream,
    vector_search_ahead,
    vector_stream,
)

if TYPE_CHECKING:
    from app.model.embedders import Embedder
    from app.recall.state import Recall

__all__ = ["RRF_K", "STREAM_DEPTH", "Candidate", "Stream", "STREAMS", "WEIGHTS", "MATCH_STREAMS",
           "fuse", "search_ahead", "search", "Why", "SearchHit", "said_text", "event_text",
           "SEARCH_MIN_SIMILARITY", "search_memory", "reasons", "why_matched", "matching"]


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


@dataclass(frozen=True)
class Candidate:
    """One owner a search found: its rank in each stream and its fused score."""

    kind: OwnerKind
    id: int
    ranks: dict[str, int]  # stream name -> 1-based rank in that stream
    score: float  # fused RRF score

    def explain(self) -> dict:
        return {"kind": self.kind, "id": self.id, "ranks": self.ranks,
                "score": round(self.score, 6)}


# A stream: the ids of up to `depth` owners of one kind, best first, for the query.
Stream = Callable[[apsw.Connection, Query, OwnerKind, int], list[int]]

STREAMS: dict[str, Stream] = {
    "bm25": bm25_stream,
    "vector": vector_stream,
    "session": session_stream,
    "labels": labels_stream,
    "learned": learned_stream,
    "importance": importance_stream,
    "recency": recency_stream,
}
# A stream's weight multiplies its RRF term; streams not listed weigh 1. Chosen on
# LoCoMo's development conversations (tests/bench/locomo.py): the text evidence enters
# through the session stream, which already combines BM25 and vectors, so the raw BM25
# and vector ranks only break ties; importance lifts what the user or a worker marked;
# recency breaks near-ties; the learned stream (app/recall/learned.py) weighs half, as
# at 1 it crowded out direct matches. What was tried and not kept, with its figures:
# BENCHMARKS.md, the locomo section's notes and issue 28.
WEIGHTS: dict[str, float] = {"bm25": 0.05, "vector": 0.05, "session": 1.0, "labels": 1.0,
                             "learned": 0.5, "importance": 0.25, "recency": 0.1}
# Streams that judge the question itself; the others are priors over every owner.
MATCH_STREAMS = frozenset({"bm25", "vector", "session", "labels", "learned"})


def fuse(ranked: dict[str, list[int | None]], kind: OwnerKind,
         weights: dict[str, float] | None = None, limit: int | None = None) -> list[Candidate]:
    """Reciprocal Rank Fusion: score = Σ w_stream / (k + rank), deduplicated by owner id;
    ties broken by id, newest first; the first `limit` (None: all). Without weights every
    stream weighs 1."""
    weights = weights or {}
    ranks: dict[int, dict[str, int]] = {}
    scores: dict[int, float] = {}
    for stream, ids in ranked.items():
        weight = weights.get(stream, 1.0)
        for position, owner_id in enumerate(ids, start=1):
            if owner_id is None:  # None holds a position for an owner left out
                continue
            found = ranks.get(owner_id)
            if found is None:
                ranks[owner_id] = {stream: position}
                scores[owner_id] = weight / (RRF_K + position)
            elif stream not in found:  # the same sum, in the streams' order
                found[stream] = position
                scores[owner_id] += weight / (RRF_K + position)
    # Candidates only for what is returned: a search keeps a few of a hundred or more.
    best = sorted(scores, key=lambda owner_id: (-scores[owner_id], -owner_id))[:limit]
    return [Candidate(kind, owner_id, ranks[owner_id], scores[owner_id]) for owner_id in best]


def _stream_depth(limit: int) -> int:
    """How deep each stream is read for a search of the top `limit`."""
    return max(limit, STREAM_DEPTH)


def search_ahead(con: apsw.Connection, query: Query, limits: Mapping[OwnerKind, int]) -> None:
    """Start the searches to come (kind -> search()'s limit) before any is fused: the
    vector searches now, to run on their own thread (app.recall.vectors: nearest_soon), and,
    while the question is still being embedded (make_query's `ahead`), each kind's BM25
    ranks here meanwhile, instead of waiting for the vector in the first search."""
    if not query.searches_vectors:
        return
    depths = {kind: _stream_depth(limit) for kind, limit in limits.items() if limit > 0}
    for kind, depth in depths.items():
        vector_search_ahead(con, query, kind, depth)
    if query.embedding is not None and not query.embedding.done():
        for kind, depth in depths.items():
            bm25_stream(con, query, kind, depth)


def search(con: apsw.Connection, user_id: str, text: str, kind: OwnerKind,
           limit: int, streams: dict[str, Stream] | None = None, *,
           query: Query | None = None, recall: Recall | None = None,
           embedder: Embedder | None = None, weights: dict[str, float] | None = None,
           require_match: bool = True) -> list[Candidate]:
    """The top `limit` owners of one kind for this text, fused across streams.

    Pass `query` (from make_query) to embed the text once for several kinds, or
    `recall` to make the query here, and `embedder` to embed it; without an embedder
    the vector stream is silent. With `require_match`, the priors (importance, recency)
    re-rank what the text streams found but add nothing of their own, so "nothing
    matched" stays visible to callers.
    """
    if query is None:
        if recall is None:
            raise TypeError("search() needs the query, or the recall to make it through")
        query = make_query(user_id, text, embedder, recall=recall, con=con)
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
    left_out = withheld(con, user_id, kind, list({i for ids in ranked.values() for i in ids
                                                   if i is not None}))
    if left_out:  # never recalled: each stream's later owners move up
        ranked = {name: [i for i in ids if i not in left_out] for name, ids in ranked.items()}
    return fuse(ranked, kind, WEIGHTS if weights is None else weights, limit)


@dataclass(frozen=True)
class Why:
    """Why an owner counts as a match for a question: the question's words it holds (as
    the full-text index reads them), the times the question names that it was said at,
    its cosine to the question when at least SEARCH_MIN_SIMILARITY, or, for an event
    with none of these, the match it was said beside (a question and its reply:
    app/recall/streams.py, reach)."""

    words: tuple[str, ...] = ()
    when: tuple[str, ...] = ()
    cosine: float | None = None
    beside: int | None = None  # the event id of that match
    link: str | None = None  # how: "reply", "question" or "near" (streams.py, reach)
    found_by: tuple[str, ...] = ()  # with nothing else to say: the streams that found it

    def __bool__(self) -> bool:
        return bool(self.words or self.when or self.cosine is not None or self.beside
                    or self.found_by)

    @property
    def evidence(self) -> bool:
        """Evidence of its own: words, a time the question names, or a close meaning."""
        return bool(self.words or self.when or (
            self.cosine is not None and self.cosine >= SEARCH_MIN_SIMILARITY))

    def to_dict(self) -> dict:
        return {name: value for name, value in (
            ("words", list(self.words)), ("when", list(self.when)), ("cosine", self.cosine),
            ("beside", self.beside), ("link", self.link), ("found_by", list(self.found_by)))
            if value}

    def text(self) -> str:
        """One line for people: "words: dog, named; said in may 2023"."""
        parts = []
        if self.words:
            parts.append("words: " + ", ".join(self.words))
        if self.when:
            parts.append("said in " + " or ".join(self.when))
        if self.cosine is not None:
            parts.append(("close in meaning" if self.cosine >= SEARCH_MIN_SIMILARITY
                          else "near in meaning") + f" ({self.cosine:.2f})")
        if self.beside:
            parts.append(_LINKS.get(self.link or "", "said beside event #{}").format(self.beside)
                         + ", which matches")
        if self.found_by and not parts:
            parts.append("ranked by " + ", ".join(self.found_by))
        return "; ".join(parts)


# How an event without evidence of its own is said beside one that has it.
_LINKS = {"reply": "the reply to event #{}", "question": "the question event #{} answers",
          "near": "said near event #{}"}


@dataclass(frozen=True)
class SearchHit:
    """One search result for people (the REPL's /search, the API, the CLI): what
    matched, and why."""

    kind: OwnerKind
    id: int
    text: str
    created_at: str
    candidate: Candidate
    from_outside: bool = False  # content from outside, or learned from it
    why: Why = Why()

    def to_dict(self, explain: bool = False) -> dict:
        hit = {"kind": self.kind, "id": self.id, "text": self.text, "created_at": self.created_at,
               "from_outside": self.from_outside, "why": self.why.to_dict()}
        if explain:
            hit["explain"] = self.candidate.explain()
        return hit


_TEXT_SQL = {
    "fact": "SELECT category || ' · ' || key || ': ' || value, updated_at, from_outside "
            "FROM facts WHERE id = ? AND user_id = ?",
    "card": "SELECT summary, created_at, from_outside FROM context_cards "
            "WHERE id = ? AND user_id = ?",
    "event": "SELECT role, content, tool_calls_json, created_at, from_outside FROM events "
             "WHERE id = ? AND user_id = ?",
}


def said_text(role: str, content: str, tool_calls_json: str | None) -> str:
    """A message as a person reads it among others: its role, then its text and, for a
    call to a tool, what it called with what (a call alone has no text of its own)."""
    text = text_with_tool_calls(content, tool_calls_json)
    return f"{role}: {text or '(empty)'}"


def event_text(event: Event) -> str:
    return said_text(event.role, event.content, event.tool_calls_json)


# The nearest vectors always exist: one found only by meaning must be at least this
# close (cosine) to count as a match.
SEARCH_MIN_SIMILARITY = 0.6


def search_memory(con: apsw.Connection, user_id: str, text: str, limit: int = 10, *,
                  recall: Recall, embedder: Embedder | None = None,
                  now: datetime | None = None) -> list[SearchHit]:
    """What ranks highest for the text, as a chat turn ranks it (the same query, time
    labels and fusion): facts, cards and raw events (compacted ones included) by their
    fused score, the top `limit` of each kind's fusion and nothing left out, each with
    why it is there (`reasons`). When nothing has evidence of its own (words, a time it
    names, a close meaning), no hits. Searched through `recall` (a ChatService's, or the
    caller's own Recall()); `now` is when the text is asked ("yesterday" counts from it)."""
    query = make_query(user_id, text, embedder, recall=recall, con=con, now=now)
    found = [c for kind in ("fact", "card", "event")
             for c in search(con, user_id, text, kind, limit, query=query)]
    top = sorted(found, key=lambda c: -c.score)[:limit]  # stable: kinds in that order on ties
    whys: dict[tuple[str, int], Why] = {}
    for kind in ("fact", "card", "event"):
        whys.update(((kind, owner_id), why) for owner_id, why in
                    reasons(con, query, kind, [c for c in top if c.kind == kind]).items())
    if not any(why.evidence for why in whys.values()):
        return []
    hits: list[SearchHit] = []
    for candidate in top:
        row = con.execute(_TEXT_SQL[candidate.kind], (candidate.id, user_id)).fetchone()
        if row and candidate.kind == "event":
            row = (said_text(*row[:3]), *row[3:])
        if row:
            hits.append(SearchHit(candidate.kind, candidate.id, row[0], row[1], candidate,
                                  bool(row[2]), whys[(candidate.kind, candidate.id)]))
    return hits


def reasons(con: apsw.Connection, query: Query, kind: OwnerKind,
            found: list[Candidate]) -> dict[int, Why]:
    """Why each of `found` ranks where it does: what why_matched says, else its meaning's
    closeness (any cosine), else, for an event, the match it was said near, else the
    streams that found it."""
    whys = why_matched(con, query, kind, found)
    rest = [c for c in found if c.id not in whys]
    if rest and query.model is not None and query.vector_now() is not None:
        cosines = dict(nearest(con, query, kind, 2 * max(len(found), STREAM_DEPTH)))
        whys.update((c.id, Why(cosine=round(cosines[c.id], 3))) for c in rest
                    if c.id in cosines)
    rest = [c for c in found if c.id not in whys]
    if rest and kind == "event" and whys:
        spreads, _ = reach(con, query.user_id, list(whys))
        near: dict[int, Why] = {}
        for c in found:  # best first: an event is near the best match reaching it
            for spread in spreads.get(c.id, []) if c.id in whys else []:
                near.setdefault(spread.neighbour, Why(beside=c.id, link=spread.link))
        whys.update((c.id, near[c.id]) for c in rest if c.id in near)
    whys.update((c.id, Why(found_by=tuple(s for s in c.ranks if s in MATCH_STREAMS)))
                for c in found if c.id not in whys)
    return whys


def why_matched(con: apsw.Connection, query: Query, kind: OwnerKind,
                found: list[Candidate]) -> dict[int, Why]:
    """Of `found`, those that match the question, with why: evidence of their own (words,
    a time it names, a close meaning), or, for events, a place within the reach of an
    event that has it as a question and its reply. What only a distant vector, a prior,
    or a place near a match brought is left out."""
    close: dict[int, float] = {}
    if query.model is not None and query.vector_now() is not None:
        close = {owner_id: cosine for owner_id, cosine in nearest(
            con, query, kind, 2 * max(len(found), STREAM_DEPTH))
            if cosine >= SEARCH_MIN_SIMILARITY}
    held = WordsHeld(con, query.searched)
    texts = indexed_texts(con, kind, [c.id for c in found if "bm25" in c.ranks]) if held else {}
    times = query.labels.times if query.labels is not None else ()
    labels = (event_labels(con, [c.id for c in found if "labels" in c.ranks])
              if kind == "event" and times else {})
    whys: dict[int, Why] = {}
    for c in found:
        words = tuple(held.words_in(texts[c.id])) if c.id in texts else ()
        when = tuple(" ".join(sorted(t, key=lambda w: (w.isdigit(), w))) for t in times
                     if c.id in labels and t <= labels[c.id])
        cosine = close.get(c.id)
        why = Why(words, when, None if cosine is None else round(cosine, 3))
        if why:
            whys[c.id] = why
    if kind == "event" and whys:
        # A question and its reply: what only sits near a match is not shown as one.
        spreads, _ = reach(con, query.user_id, list(whys))
        reached: dict[int, Why] = {}
        for c in found:  # best first: a neighbour is beside the best match reaching it
            for spread in spreads.get(c.id, []) if c.id in whys else []:
                if spread.link != "near":
                    reached.setdefault(spread.neighbour, Why(beside=c.id, link=spread.link))
        whys.update((c.id, reached[c.id]) for c in found
                    if c.id not in whys and c.id in reached)
    return whys


def matching(con: apsw.Connection, query: Query, kind: OwnerKind,
             found: list[Candidate]) -> list[Candidate]:
    """`found` less what does not match the question (why_matched), in its order."""
    whys = why_matched(con, query, kind, found)
    return [c for c in found if c.id in whys]
