"""What a search may return: an owner (a fact, a card or an event) of the asking user,
and of facts and cards only the current ones. The full-text and vector streams read
candidate ids from their indexes and keep those through `owned` and `current`; the
fusion leaves out what is `withheld` (a regenerated reply, what said a forgotten fact)."""

from __future__ import annotations

from typing import Literal

import apsw

from app.events import superseded_among
from app.memory.corrections import corrections_of

__all__ = ["OwnerKind", "CURRENT_ONLY", "current", "owned", "withheld"]

OwnerKind = Literal["fact", "card", "event"]

# Only current facts and live cards are retrievable; every event is (compacted too).
# "+user_id": with more than a few ids SQLite would otherwise pick the user's index and
# walk all of their rows instead of looking the ids up.
_CURRENT_SQL = {
    "fact": "SELECT id FROM facts WHERE +user_id = ? AND superseded_at IS NULL "
            "AND deleted_at IS NULL AND id IN ({marks})",
    "card": "SELECT id FROM context_cards WHERE +user_id = ? AND folded_into IS NULL "
            "AND id IN ({marks})",
}
# The kinds of which only the current owners are retrievable.
CURRENT_ONLY: frozenset[str] = frozenset(_CURRENT_SQL)
_OWNED_SQL = {**_CURRENT_SQL,
              "event": "SELECT id FROM events WHERE +user_id = ? AND id IN ({marks})"}


def current(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> list[int]:
    """The ids that are current facts or live cards (any other kind: all of them), in order."""
    return owned(con, user_id, kind, ids) if kind in CURRENT_ONLY else ids


def owned(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> list[int]:
    """The ids that are the user's, and current or live, in order."""
    if not ids:
        return ids
    sql = _OWNED_SQL[kind].format(marks=",".join("?" * len(ids)))
    keep = {row[0] for row in con.execute(sql, (user_id, *ids))}
    return [i for i in ids if i in keep]


def withheld(con: apsw.Connection, user_id: str, kind: OwnerKind, ids: list[int]) -> set[int]:
    """Of the user's events and cards `ids`, those never recalled: a reply a client
    regenerated (events.superseded_by), and what said a fact the person has since
    forgotten (app/memory/corrections.py)."""
    if kind == "fact" or not ids:
        return set()
    left_out = {owner_id for owner_id, found in corrections_of(con, user_id, kind, ids).items()
                if found.withheld}
    if kind == "event":
        left_out |= superseded_among(con, user_id, ids)
    return left_out
