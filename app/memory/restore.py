"""Undoing a forget: a forgotten fact's value stored again, as it was learned or set.

The database keeps nothing of a forgotten value (app.memory.facts.forget_fact): what is
restored is what the front-end that forgot it held in memory for a while (the memory
page's undo, app/ui/undo.py). It goes through the one write path of facts
(`upsert_fact`), with its original provenance — who stated it (`source`), the message it
came from (when that message is still stored), whether from outside — once the forget's
tombstone is gone: undoing the forget removes what the forget left, and what said the value
is recalled again (app.memory.corrections).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import apsw

from app.memory.corrections import unmark_forgotten
from app.memory.facts import Fact, current_fact, upsert_fact

__all__ = ["Restored", "restore_forgotten_fact"]


@dataclass(frozen=True)
class Restored:
    """What an undo did: "restored" (`fact_id` is the fact stored again), "stated_again"
    (its key has a current value since the forget: `fact_id`, left as it is) or "gone"
    (the forget's tombstone is not there any more: nothing to undo)."""

    outcome: Literal["restored", "stated_again", "gone"]
    fact_id: int | None


def restore_forgotten_fact(con: apsw.Connection, fact: Fact, *, worker: str = "user") -> Restored:
    """Store `fact` (as it was before `forget_fact`) again; its earlier values stay gone."""
    now = current_fact(con, fact.user_id, fact.category, fact.key)
    if now is not None and now.deleted_at is None:
        return Restored("stated_again", now.id)
    tombstone = con.execute(
        "SELECT deleted_at FROM facts WHERE id = ? AND user_id = ? AND deleted_at IS NOT NULL "
        "AND value = ''", (fact.id, fact.user_id)).fetchone()
    if tombstone is None:
        return Restored("gone", None)
    unmark_forgotten(con, fact.user_id, fact.value, at=tombstone[0])
    con.execute("DELETE FROM facts WHERE id = ?", (fact.id,))
    source_event = fact.source_event_id
    if source_event is not None and con.execute(
            "SELECT 1 FROM events WHERE id = ? AND user_id = ?",
            (source_event, fact.user_id)).fetchone() is None:
        source_event = None  # its message was deleted since: the fact says where it came from no more
    written = upsert_fact(con, fact.user_id, fact.category, fact.key, fact.value,
                          source=fact.source, worker=worker, source_event_id=source_event,
                          importance=fact.importance, from_outside=fact.from_outside)
    return Restored("restored", written.fact_id)
