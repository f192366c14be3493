"""Layer 2, context cards: a chunk of a session's events (level 0), or older cards folded
together (level 1+), as a short summary with keywords.

A chunk never yields two cards (the unique index cards_one_per_chunk); a folded card
stays, pointing at the card it was folded into. Marking the events a card covers is
the caller's part (events are app/events.py's), in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import apsw

from app.memory.embeddings import delete_vectors
from app.memory.provenance import log_change, log_deletions
from app.timeutil import utc_now

__all__ = ["Card", "NewCard", "add_card", "fold_cards", "link_folded_card",
           "replace_extractive_card", "remove_cards", "clear_cards", "list_cards", "cards_by_ids"]


@dataclass(frozen=True)
class Card:
    id: int
    user_id: str
    session_id: str | None
    summary: str
    keywords: str
    created_at: str
    first_event_id: int | None
    last_event_id: int | None
    level: int = 0
    is_extractive: bool = False
    from_outside: bool = False  # summarises outside content (a tool's result, an import)


@dataclass(frozen=True)
class NewCard:
    """A card to store. Times default to now; an import passes the card's own."""

    session_id: str | None
    summary: str
    keywords: str
    first_event_id: int | None
    last_event_id: int | None
    event_count: int
    level: int = 0
    is_extractive: bool = False
    importance: float = 0.5
    access_count: int = 0
    last_accessed_at: str | None = None
    created_at: str | None = None
    updated_at: str | None = None  # None: created_at
    # It summarises content from outside (app.memory.provenance.is_outside; unstated: outside).
    from_outside: bool = True


def add_card(con: apsw.Connection, user_id: str, card: NewCard, *, worker: str,
             source_event_id: int | None = None) -> int | None:
    """Store a card; None when its chunk of events already has one (cards_one_per_chunk)."""
    created_at = card.created_at or utc_now()
    try:
        con.execute(
            "INSERT INTO context_cards (user_id, session_id, summary, keywords, first_event_id, "
            "last_event_id, event_count, level, is_extractive, importance, access_count, "
            "last_accessed_at, created_at, updated_at, from_outside) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, card.session_id, card.summary, card.keywords, card.first_event_id,
             card.last_event_id, card.event_count, card.level, int(card.is_extractive),
             card.importance, card.access_count, card.last_accessed_at, created_at,
             card.updated_at or created_at, int(card.from_outside)))
    except apsw.ConstraintError:
        return None
    card_id = con.last_insert_rowid()
    log_change(con, user_id, "card", card_id, "insert", None, card.summary, worker=worker,
               created_at=created_at, source_event_id=source_event_id)
    return card_id


def fold_cards(con: apsw.Connection, user_id: str, card: NewCard, folded_ids: list[int], *,
               worker: str) -> int | None:
    """Store `card` in place of the cards `folded_ids`, which point at it from then on.

    None when one of them was folded meanwhile (another run got there first).
    """
    marks = ",".join("?" * len(folded_ids))
    (still_open,) = con.execute(f"SELECT count(*) FROM context_cards WHERE id IN ({marks}) "
                                "AND folded_into IS NULL", folded_ids).fetchone()
    if still_open != len(folded_ids):
        return None
    card = replace(card, created_at=card.created_at or utc_now())
    folded_into = add_card(con, user_id, card, worker=worker)
    con.execute(f"UPDATE context_cards SET folded_into = ?, updated_at = ? WHERE id IN ({marks})",
                (folded_into, card.created_at, *folded_ids))
    return folded_into


def link_folded_card(con: apsw.Connection, card_id: int, folded_into: int) -> None:
    """Record the card this one was folded into, unless already known (imports link rows
    once every record is stored)."""
    con.execute("UPDATE context_cards SET folded_into = ? WHERE id = ? AND folded_into IS NULL",
                (folded_into, card_id))


def replace_extractive_card(con: apsw.Connection, card_id: int, summary: str, keywords: str, *,
                            worker: str) -> bool:
    """The model's summary in place of a card quoted without it; False if it is not one."""
    row = con.execute("SELECT user_id, summary FROM context_cards WHERE id = ? AND is_extractive = 1",
                      (card_id,)).fetchone()
    if row is None:
        return False
    now = utc_now()
    con.execute("UPDATE context_cards SET summary = ?, keywords = ?, is_extractive = 0, "
                "updated_at = ? WHERE id = ?", (summary, keywords, now, card_id))
    log_change(con, row[0], "card", card_id, "update", row[1], summary, worker=worker,
               created_at=now)
    return True


def remove_cards(con: apsw.Connection, user_id: str, card_ids: list[int], *,
                 worker: str) -> list[int]:
    """Delete the user's cards `card_ids` and every card they were folded into (each
    summarises what they said); the cards folded into a deleted one stand alone again
    (ON DELETE SET NULL). Returns the ids deleted."""
    if not card_ids:
        return []
    marks = ",".join("?" * len(card_ids))
    gone = [row[0] for row in con.execute(
        f"WITH RECURSIVE up (id) AS (SELECT id FROM context_cards WHERE user_id = ? AND id IN "
        f"({marks}) UNION SELECT c.folded_into FROM context_cards c JOIN up ON c.id = up.id "
        "WHERE c.folded_into IS NOT NULL) SELECT id FROM up ORDER BY id", (user_id, *card_ids))]
    if not gone:
        return []
    ids = ",".join("?" * len(gone))
    # The log keeps that each card was there, not what it said.
    con.execute(f"UPDATE memory_log SET old_value = NULL, new_value = NULL WHERE user_id = ? "
                f"AND owner_kind = 'card' AND owner_id IN ({ids})",
                (user_id, *(str(i) for i in gone)))
    log_deletions(con, f"SELECT user_id, 'card' AS kind, id AS owner_id, NULL AS old_value "
                  f"FROM context_cards WHERE id IN ({ids})", worker=worker,
                  created_at=utc_now(), params=tuple(gone))
    delete_vectors(con, "card", gone)
    con.execute(f"DELETE FROM context_cards WHERE id IN ({ids})", gone)
    return gone


def clear_cards(con: apsw.Connection, *, worker: str) -> int:
    """Delete every user's cards (rebuild); their events lose card_id (ON DELETE SET NULL)."""
    log_deletions(con, "SELECT user_id, 'card' AS kind, id AS owner_id, summary AS old_value "
                  "FROM context_cards", worker=worker, created_at=utc_now())
    con.execute("DELETE FROM context_cards")
    return con.changes()


# -- reads ---------------------------------------------------------------------------------

_CARD_COLUMNS = ("id, user_id, session_id, summary, keywords, created_at, first_event_id, "
                 "last_event_id, level, is_extractive, from_outside")


def _card(row: tuple) -> Card:
    *head, is_extractive, from_outside = row
    return Card(*head, is_extractive=bool(is_extractive), from_outside=bool(from_outside))


def list_cards(con: apsw.Connection, user_id: str, *, limit: int | None = None) -> list[Card]:
    """Cards not folded into a higher-level card, most recent first."""
    sql = (f"SELECT {_CARD_COLUMNS} FROM context_cards WHERE user_id = ? AND folded_into IS NULL "
           "ORDER BY created_at DESC, id DESC")
    params: tuple = (user_id,)
    if limit is not None:
        sql += " LIMIT ?"
        params += (limit,)
    return [_card(row) for row in con.execute(sql, params)]


def cards_by_ids(con: apsw.Connection, user_id: str, ids: list[int]) -> list[Card]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    found = {row[0]: _card(row) for row in con.execute(
        f"SELECT {_CARD_COLUMNS} FROM context_cards WHERE +user_id = ? AND id IN ({marks})",
        (user_id, *ids))}
    return [found[i] for i in ids if i in found]
