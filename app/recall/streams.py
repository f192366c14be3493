"""The streams besides full text: each ranks owner ids of one kind for a query.

vector: cosine against the query's embedding (same model only), read from the Recall's
vector index (app/recall/vectors.py). importance: what was marked important (>= 0.8).
recency: the newest. session: the BM25 and vector evidence combined and, for events,
spread to the turns around them in their session. labels: for events, those said at
the time the question names, or by the user when it names them. The full-text stream
is app/recall/bm25.py, asked here as bm25_stream; app/recall/fusion.py fuses them all. They stand together because
they build on each other (session reads the full-text and vector ranks, labels the
session's), and each is a few SQL statements and a ranking.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import apsw

from app.recall.bm25 import bm25_ranks
from app.recall.event_labels import stored_labels
from app.recall.owners import CURRENT_ONLY, OwnerKind, current
from app.recall.sentences import sentences

if TYPE_CHECKING:
    from app.recall.query import Query

__all__ = ["bm25_stream", "EVENT_VECTOR_DEPTH", "vector_search_ahead", "vector_stream", "nearest",
           "IMPORTANT", "importance_stream", "recency_stream", "SESSION_EVIDENCE_K",
           "SESSION_SPREAD", "ANSWER_SPREAD", "ASKING_WEIGHT", "SESSION_DEPTH", "KEPT_SHARE_CHARS",
           "session_neighbours", "asking_share", "Reach", "reach", "session_stream",
           "session_evidence", "event_labels", "labels_stream"]


# -- full text ---------------------------------------------------------------------------


def bm25_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners whose text holds the words searched, best BM25 first (app/recall/bm25.py)."""
    return query.ranked_to(("bm25", kind), depth, lambda d: bm25_ranks(
        con, query.user_id, query.searched, query.match, query.recall.term_counts, kind, d))


# -- vectors -----------------------------------------------------------------------------

# Past events get a second, deeper look (app.turn.context: QUOTE_DEPTHS): their first read
# keeps this many, so the second reuses it instead of searching again. Facts and cards
# are read as deep as asked: an approximate index pays for every hit it returns.
EVENT_VECTOR_DEPTH = 100


def _vector_read_depth(kind: OwnerKind, depth: int) -> int:
    return max(depth, EVENT_VECTOR_DEPTH) if kind == "event" else depth


def _hits_wanted(kind: OwnerKind, depth: int) -> int:
    # Superseded facts and folded cards keep their vectors: look deeper, then filter.
    return 2 * depth if kind in CURRENT_ONLY else depth


def vector_search_ahead(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> None:
    """Start the vector stream's search to `depth` now, on the index's search thread
    (app.recall.vectors: nearest_soon); nearest() takes its hits when they are asked for."""
    wanted = _hits_wanted(kind, _vector_read_depth(kind, depth))
    query.vectors_ahead[kind] = (wanted, query.recall.vectors.nearest_soon(
        con, query.user_id, query.model, kind,
        query.vector if query.embedding is None else query.embedding, wanted))


def vector_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners whose stored vector (same model as the query's) is closest by cosine."""
    return query.ranked_to(("vector", kind), _vector_read_depth(kind, depth),
                           lambda d: _vector_ranks(con, query, kind, d))[:depth]


def _vector_ranks(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    if query.model is None or query.vector_now() is None:
        return []
    hits = nearest(con, query, kind, _hits_wanted(kind, depth))
    return current(con, query.user_id, kind, [owner_id for owner_id, _ in hits])[:depth]


def nearest(con: apsw.Connection, query: Query, kind: OwnerKind,
            depth: int) -> list[tuple[int, float]]:
    """The `depth` owners whose vectors are nearest the query's, best first, with cosine:
    searched once per query and kind at the deepest depth asked first (the vector
    stream, then the evidence check of `matching`), or started ahead."""
    known_depth, hits = query.vectors_found.get(kind, (0, []))
    if known_depth < depth:
        ahead_depth, ahead = query.vectors_ahead.pop(kind, (0, None))
        if ahead is not None and ahead_depth >= depth:
            known_depth, hits = ahead_depth, ahead()
        else:
            known_depth, hits = depth, query.recall.vectors.nearest(
                con, query.user_id, query.model, kind, query.vector_now(), depth)
        query.vectors_found[kind] = (known_depth, hits)
    return hits[:depth]


# -- importance and recency: priors over every owner -------------------------------------

# Owners at or above this importance form the importance stream.
IMPORTANT = 0.8
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
# The conversation's structure (reach): between a question and its reply the spread is
# ANSWER_SPREAD instead of SESSION_SPREAD[0], in proportion to the asking share, both
# ways. LoCoMo development (tests/bench/locomo.py's product form), fusion R@2 / R@10 at
# ANSWER_SPREAD 0.2, 0.4 (as before), 0.6, 0.8: 0.493 / 0.780, 0.501 / 0.779, 0.509 /
# 0.778, 0.511 / 0.777; context recall at the default 0.685, 0.682, 0.682, 0.690. Not
# kept: a message that asks reaching 0.15 back to the message three before it ("have
# you had it?"): R@10 0.776, no gain.
ANSWER_SPREAD = 0.8
ASKING_WEIGHT = 0.25
# How deep the session stream reads the BM25 and vector streams.
SESSION_DEPTH = 50

# For each event: the id `offset` places before it, or after it, in its session, compacted
# or not (a seek in events_in_session, whatever the session's size).
_NEIGHBOUR = ("(SELECT n.id FROM events n WHERE n.user_id = e.user_id "
              "AND n.session_id = e.session_id AND n.id {op} e.id ORDER BY n.id {order} "
              "LIMIT 1 OFFSET {offset})")


@lru_cache(maxsize=8)
def _neighbours_sql(width: int) -> str:
    """One row per event: its id, then the ids 1..width places before it, then after it."""
    return ("SELECT e.id, " + ", ".join(
        _NEIGHBOUR.format(op=op, order=order, offset=offset)
        for op, order in (("<", "DESC"), (">", "ASC")) for offset in range(width))
        + " FROM json_each(?1) j CROSS JOIN events e ON e.id = j.value WHERE e.user_id = ?2")


def session_neighbours(con: apsw.Connection, user_id: str, event_ids: list[int],
                       width: int) -> dict[int, tuple[list[int], list[int]]]:
    """For each of the user's events: the ids of up to `width` events before it in its
    session (nearest first) and up to `width` after it (nearest first)."""
    if not event_ids or width < 1:
        return {}
    found = {}
    for event_id, *near in con.execute(_neighbours_sql(width), (json.dumps(event_ids), user_id)):
        found[event_id] = ([i for i in near[:width] if i is not None],
                           [i for i in near[width:] if i is not None])
    return found


# +user_id: the ids pick the rows; an index on user_id would read all the user's events.
# Only a text with a question mark can ask: the others' share is 0, and stays in SQLite.
_ASKING_SQL = ("SELECT id, content FROM events WHERE +user_id = ? AND id IN ({marks}) "
               "AND instr(content, '?')")


# A turn reads the asking share of a few hundred messages, and the next turn mostly the
# same ones: kept per text (ids can be reused in another database), for texts of at most
# this many characters, so the cache holds at most ~32 MB.
KEPT_SHARE_CHARS = 2_000


def asking_share(text: str) -> float:
    """The share of the text's sentences that are questions (0 for no sentence)."""
    return _kept_asking_share(text) if len(text) <= KEPT_SHARE_CHARS else _asking_share(text)


def _asking_share(text: str) -> float:
    said = sentences(text)
    return sum(s.endswith("?") for s in said) / len(said) if said else 0.0


_kept_asking_share = lru_cache(maxsize=16_384)(_asking_share)


def _asking_shares(con: apsw.Connection, user_id: str, event_ids: list[int]) -> dict[int, float]:
    """The asking share (asking_share) of each event that asks; the others' is 0."""
    sql = _ASKING_SQL.format(marks=",".join("?" * len(event_ids)))
    return {owner_id: asking_share(content)
            for owner_id, content in con.execute(sql, (user_id, *event_ids))}


class Reach(NamedTuple):
    """Where an event's evidence spreads: to `neighbour`, `distance` places away in its
    session, at `share` of it; `link` says how the two are joined: "reply" (the
    neighbour answers the event, which asks), "question" (the neighbour asks what the
    event answers) or "near" (said around it)."""

    neighbour: int
    distance: int
    share: float
    link: str


def reach(con: apsw.Connection, user_id: str,
          event_ids: list[int]) -> tuple[dict[int, list[Reach]], dict[int, float]]:
    """Where each event's evidence spreads in its session, following the conversation:
    SESSION_SPREAD[d - 1] d places either way, and ANSWER_SPREAD between a message that
    asks and the reply after it, in both directions (a match on either reaches the
    other). Also the asking shares that count, of each event and of the message just
    before it: those that ask (the others' is 0)."""
    spreads, asks = _spreads(con, user_id, event_ids)
    return {owner_id: [Reach(*spread) for spread in spread_list]
            for owner_id, spread_list in spreads.items()}, asks


def _spreads(con: apsw.Connection, user_id: str, event_ids: list[int]
             ) -> tuple[dict[int, list[tuple[int, int, float, str]]], dict[int, float]]:
    """reach() as plain tuples (the session stream reads hundreds a turn)."""
    neighbours = session_neighbours(con, user_id, event_ids, len(SESSION_SPREAD))
    # Only a message and the one just before it can be a question and its reply.
    needed = set(event_ids)
    needed.update(before[0] for before, _ in neighbours.values() if before)
    asks = _asking_shares(con, user_id, list(needed)) if needed else {}
    nearest = SESSION_SPREAD[0]
    found: dict[int, list[tuple[int, int, float, str]]] = {}
    for owner_id in event_ids:
        before, after = neighbours.get(owner_id, ((), ()))
        spread = []
        # The message before may ask what this one answers; this one may ask what the
        # message after answers.
        for side, question, link in ((before, asks.get(before[0], 0.0) if before else 0.0,
                                      "question"),
                                     (after, asks.get(owner_id, 0.0), "reply")):
            if not side:
                continue
            if question:  # a question and the reply that answers it
                spread.append((side[0], 1, nearest + (ANSWER_SPREAD - nearest) * question, link))
            else:
                spread.append((side[0], 1, nearest, "near"))
            spread.extend((neighbour, distance, SESSION_SPREAD[distance - 1], "near")
                          for distance, neighbour in enumerate(side[1:], start=2))
        found[owner_id] = spread
    return found, asks


def _ranked(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda owner_id: (-scores[owner_id], -owner_id))


def session_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Owners ranked by their BM25 and vector evidence combined; events also by the
    evidence for the events around them in their session, and their own evidence less
    the more of them asks."""
    # Ranked once, whole, for every depth asked: the evidence does not depend on it.
    return query.ranked(("session", kind), lambda: _session_ranks(con, query, kind))[:depth]


def session_evidence(con: apsw.Connection, query: Query, kind: OwnerKind) -> dict[int, float]:
    """Each owner's own text evidence: its reciprocal ranks in the BM25 and vector streams."""
    evidence: dict[int, float] = defaultdict(float)
    for stream in (bm25_stream, vector_stream):
        for position, owner_id in enumerate(stream(con, query, kind, SESSION_DEPTH), start=1):
            if owner_id is not None:  # a stream may hold a place for an owner left out
                evidence[owner_id] += 1.0 / (SESSION_EVIDENCE_K + position)
    return evidence


def _session_ranks(con: apsw.Connection, query: Query, kind: OwnerKind) -> list[int]:
    evidence = session_evidence(con, query, kind)
    if kind != "event" or not evidence:
        return _ranked(evidence)
    # strongest[(event, d)]: the best evidence spread to the event from d places away.
    strongest: dict[tuple[int, int], float] = {}
    spreads, asks = _spreads(con, query.user_id, list(evidence))
    for owner_id, own in evidence.items():
        for neighbour, distance, share, _ in spreads.get(owner_id, ()):
            key, spread = (neighbour, distance), share * own
            if key not in strongest or spread > strongest[key]:
                strongest[key] = spread
    scores = {owner_id: own * (1.0 - (1.0 - ASKING_WEIGHT) * asks.get(owner_id, 0.0))
              for owner_id, own in evidence.items()}
    for (neighbour, _), spread in strongest.items():
        scores[neighbour] = scores.get(neighbour, 0.0) + spread
    return _ranked(scores)


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

_ROLE_TIME_SQL = "SELECT id, role, created_at FROM events WHERE id IN ({marks})"
_LABELS_SQL = "SELECT id, labels FROM event_labels WHERE id IN ({marks})"
_LABELLED_SQL = ("SELECT e.id FROM event_labels_fts JOIN events e ON e.id = event_labels_fts.rowid "
                 "WHERE event_labels_fts MATCH ? AND e.user_id = ? "
                 "ORDER BY event_labels_fts.rowid DESC LIMIT ?")


def event_labels(con: apsw.Connection, event_ids: list[int]) -> dict[int, frozenset[str]]:
    """Each event's label words (who said it, when: app/recall/event_labels.py), as the
    view `event_labels` gives them: read from its role and time (stored_labels), and
    from the view for a time in another form."""
    if not event_ids:
        return {}
    found, others = {}, []
    for owner_id, role, created_at in con.execute(
            _ROLE_TIME_SQL.format(marks=",".join("?" * len(event_ids))), event_ids):
        labels = stored_labels(role, created_at)
        if labels is None:
            others.append(owner_id)
        else:
            found[owner_id] = labels
    if others:
        found.update((owner_id, frozenset(line.split())) for owner_id, line in con.execute(
            _LABELS_SQL.format(marks=",".join("?" * len(others))), others))
    return found


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
    found = event_labels(con, matched)
    ranked = [owner_id for owner_id in matched if labels.holds(found.get(owner_id, set()))]
    if labels.times and len(ranked) < depth:
        seen = set(ranked)
        for (owner_id,) in con.execute(_LABELLED_SQL, (labels.match(), query.user_id, depth)):
            if owner_id not in seen:
                ranked.append(owner_id)
    return ranked[:depth]
