"""Forget: a fact gone for good — from every row, index and prompt, and from the disk.

`forget_fact` is the change itself, run in the writer's transaction: the fact's value,
every earlier version, their vectors and the values memory_log kept go; what stays is a
tombstone holding hashes of its key and value (app.memory.facts.forgotten_key,
value_hash), so no worker learns the same statement again, nor anything from messages
older than the forget. With `with_sources`, the messages it was learned from go too, with
the assistant's replies that repeat them, and the cards and diary entries that summed
them up (the workers make those again from what is left).

`forget` is what every front-end calls: the change, then the write-ahead log
checkpointed and truncated (app.db.checkpoint_wal), so the text is in no file. Deleted
text never lingers in the database file either: every connection deletes securely
(PRAGMA secure_delete, app/db.py) and the full-text indexes remove a deleted row's words
from their own data (FTS5 'secure-delete', migrations/0022_forget_from_disk.sql).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import apsw

from app.db import checkpoint_wal
from app.events import delete_events, replies_to, uncompact
from app.fts import terms
from app.log import get_logger
from app.memory.cards import remove_cards
from app.memory.corrections import mark_forgotten
from app.memory.diary import remove_diary_entries
from app.memory.embeddings import delete_vectors
from app.memory.facts import Fact, forgotten_key, get_fact, value_hash
from app.memory.provenance import log_change
from app.timeutil import utc_now
from app.writer import Writer

__all__ = ["log", "Forgotten", "forget", "forget_fact"]

log = get_logger(__name__)


@dataclass(frozen=True)
class Forgotten:
    """What `forget_fact` removed: the fact's versions, and the source messages if asked.
    `fact` is the fact as it was, held only by the caller (to say what was forgotten, or to
    offer an undo that stores it again): the database keeps hashes."""

    fact_id: int
    category: str
    key: str
    versions: int
    events: int
    fact: Fact | None = None
    wal_truncated: bool | None = None  # the WAL held none of it after (`forget`); None: not asked

    def to_json(self) -> dict:
        return {"forgotten": self.fact_id, "category": self.category, "key": self.key,
                "versions": self.versions, "events": self.events}


def forget(writer: Writer, user_id: str, fact_id: int, *, worker: str = "user",
           with_sources: bool = False) -> Forgotten | None:
    """Forget a current fact for good (forget_fact on `writer`), then take its text out of
    the write-ahead log. None when the user has no such current fact."""
    gone = writer.submit(lambda con: forget_fact(con, user_id, fact_id, worker=worker,
                                                 with_sources=with_sources))
    if gone is None:
        return None
    truncated = checkpoint_wal(writer.path)
    if not truncated:
        # A reader held an older snapshot: the next checkpoint overwrites what is left.
        log.warning("forget.wal_not_truncated", fact=fact_id, path=str(writer.path))
    return replace(gone, wal_truncated=truncated)


def forget_fact(con: apsw.Connection, user_id: str, fact_id: int, *, worker: str = "user",
                with_sources: bool = False) -> Forgotten | None:
    """The forget itself, inside the caller's transaction (module docstring); None when the
    user has no such current fact."""
    current = con.execute(
        "SELECT category, key, value FROM facts WHERE id = ? AND user_id = ? "
        "AND superseded_at IS NULL AND deleted_at IS NULL", (fact_id, user_id)).fetchone()
    if current is None:
        return None
    category, key, value = current
    fact = get_fact(con, user_id, fact_id)
    versions = [(row[0], row[1], row[2]) for row in con.execute(
        "SELECT id, source_event_id, value FROM facts WHERE user_id = ? AND category = ? "
        "AND key = ?", (user_id, category, key))]
    ids = [version_id for version_id, _, _ in versions]
    now = utc_now()
    # What said any of its values is never recalled again (app/memory/corrections.py).
    mark_forgotten(con, user_id, category, key, [v for _, _, v in versions], at=now)
    marks = ", ".join("?" * len(ids))
    delete_vectors(con, "fact", ids)
    # memory_log keeps that each change happened, not what it said.
    con.execute(f"UPDATE memory_log SET old_value = NULL, new_value = NULL WHERE user_id = ? "
                f"AND owner_kind = 'fact' AND owner_id IN ({marks})",
                [user_id, *(str(i) for i in ids)])
    tombstone = forgotten_key(key)
    # One tombstone per key: an earlier forget of it gives way to this one.
    con.execute("DELETE FROM facts WHERE user_id = ? AND category = ? AND key = ? "
                "AND forgotten_hash IS NOT NULL", (user_id, category, tombstone))
    con.execute(f"UPDATE facts SET superseded_by = NULL WHERE superseded_by IN ({marks})", ids)
    con.execute(f"DELETE FROM facts WHERE id IN ({marks}) AND id != ?", [*ids, fact_id])
    con.execute("UPDATE facts SET key = ?, value = '', forgotten_hash = ?, deleted_at = ?, "
                "updated_at = ?, source_event_id = NULL WHERE id = ?",
                (tombstone, value_hash(value), now, now, fact_id))
    log_change(con, user_id, "fact", fact_id, "delete", None, None, worker=worker, created_at=now)
    events = 0
    if with_sources:
        sources = [e for _, e, _ in versions if e is not None]
        events = _forget_sources(con, user_id, sources, [v for _, _, v in versions],
                                 worker=worker)
    return Forgotten(fact_id, category, key, len(ids), events, fact)


def _forget_sources(con: apsw.Connection, user_id: str, sources: list[int], values: list[str],
                    *, worker: str) -> int:
    """Delete the messages `sources`, the assistant's replies to them that repeat one of
    `values` (a word of it), and what summed them up; returns how many messages."""
    words = {word.casefold() for value in values for word in terms(value, min_length=3)}
    repeats = [e.id for e in replies_to(con, user_id, sources)
               if words & {w.casefold() for w in terms(e.content, min_length=3)}]
    doomed = sorted(set(sources) | set(repeats))
    if not doomed:
        return 0
    marks = ",".join("?" * len(doomed))
    rows = list(con.execute(f"SELECT DISTINCT session_id, card_id FROM events WHERE user_id = ? "
                            f"AND id IN ({marks})", (user_id, *doomed)))
    cards = sorted({card for _, card in rows if card is not None})
    if cards:
        uncompact(con, cards)  # compaction sums up what is left of them anew
        remove_cards(con, user_id, cards, worker=worker)
    remove_diary_entries(con, user_id, sorted({session for session, _ in rows}), worker=worker)
    return delete_events(con, user_id, doomed)
