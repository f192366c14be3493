"""The learned stream: the messages that what memory learned came from.

A fact or a card that matches the question points to the messages it was learned from:
a fact to the message it was distilled from (`facts.source_event_id`), a card to the
chunk of messages it summarises (its session, `first_event_id` to `last_event_id`). The
fact may share the question's words ("hobbies: painting, reading") where the message
does not ("I spent the weekend with my watercolours"), so the message is reached through
what memory already knows. Cards folded into a higher-level card cover too many messages
to point to; they point to none.

Events are ranked by the best rank of a fact or card pointing to them (facts before
cards at the same rank: a fact names one message, a card several), then by their own
text evidence (the session stream's order), then newest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from app.recall.owners import OwnerKind
from app.recall.streams import SESSION_DEPTH, session_stream

if TYPE_CHECKING:
    from app.recall.query import Query

__all__ = ["LEARNED_FACTS", "LEARNED_CARDS", "learned_stream"]

# How many of the best-matching facts, and cards, point to their messages: the first few
# are what a question is about; deeper ones are the nearest vectors of anything. LoCoMo
# has no facts; with its observations of the user stored as facts from their turns
# (BENCHMARKS.md, issue 28), fusion recall@10 / @2 of events: no learned stream 0.789 /
# 0.550; 10 facts at weight 1: 0.782 / 0.521; 3 at 0.5 (chosen): 0.797 / 0.563; 2, 3
# or 5 at 0.25 or 0.5 all within 0.005 of that. Cards: as many as a context shows.
LEARNED_FACTS = 3
LEARNED_CARDS = 2

_FACT_SOURCES_SQL = ("SELECT id, source_event_id FROM facts WHERE +user_id = ? "
                     "AND source_event_id IS NOT NULL AND id IN ({marks})")
_CARD_EVENTS_SQL = (
    "SELECT e.id FROM context_cards c JOIN events e ON e.user_id = c.user_id "
    "AND e.session_id = c.session_id AND e.id BETWEEN c.first_event_id AND c.last_event_id "
    "WHERE c.id = ? AND c.user_id = ? AND c.level = 0 ORDER BY e.id")


def learned_stream(con: apsw.Connection, query: Query, kind: OwnerKind, depth: int) -> list[int]:
    """Events that the facts and cards matching the question were learned from, best
    pointed to first. Empty for facts and cards."""
    if kind != "event":
        return []
    return query.ranked(("learned", depth), lambda: _learned_ranks(con, query, depth))


def _learned_ranks(con: apsw.Connection, query: Query, depth: int) -> list[int]:
    # The facts' and cards' own ranking, read as deep as the context's searches read it.
    facts = session_stream(con, query, "fact", SESSION_DEPTH)[:LEARNED_FACTS]
    cards = session_stream(con, query, "card", SESSION_DEPTH)[:LEARNED_CARDS]
    pointed: dict[int, tuple[int, int]] = {}  # event -> (rank of what points to it, kind)

    def point(event_id: int, rank: int, order: int) -> None:
        pointed[event_id] = min(pointed.get(event_id, (rank, order)), (rank, order))

    if facts:
        sql = _FACT_SOURCES_SQL.format(marks=",".join("?" * len(facts)))
        sources = dict(con.execute(sql, (query.user_id, *facts)).fetchall())
        for rank, fact_id in enumerate(facts):
            if fact_id in sources:
                point(sources[fact_id], rank, 0)
    for rank, card_id in enumerate(cards):
        for (event_id,) in con.execute(_CARD_EVENTS_SQL, (card_id, query.user_id)):
            point(event_id, rank, 1)
    if not pointed:
        return []
    evidence = {owner_id: position for position, owner_id
                in enumerate(session_stream(con, query, "event", SESSION_DEPTH))}
    unmatched = len(evidence)
    return sorted(pointed, key=lambda event_id: (*pointed[event_id],
                                                 evidence.get(event_id, unmatched),
                                                 -event_id))[:depth]
