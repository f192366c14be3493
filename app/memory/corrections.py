"""What a person's correction changes about what Hilo recalls: the messages, context
cards and diary entries that said the old value.

A fact the person corrects (Vidal → Ortega), deletes or forgets was learned from
messages, and repeated in replies, cards and diary entries that are still recalled by
their words. When the person changes it, every such item said before the change — the
user's own items that hold all the words of the old value the new one does not have
("vidal"), found in the full-text indexes — is marked here, in the change's own
transaction:

- corrected or deleted: the item keeps its (category, key), and is recalled with what
  the fact says now (`Correction.note`, read from the current row at recall time, so a
  second correction shows the latest value);
- forgotten: the item is never recalled again (`Correction.withheld`), and the mark
  keeps neither the key nor the value.

A worker's newer value marks nothing: the message that said it is in memory too, dated.
Items said after the change are the person's new words, never marked. Only the memory
package writes this table (facts.py calls `mark_corrected`, forget.py `mark_forgotten` and
restore.py, undoing a forget, `unmark_forgotten`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import apsw

from app.fts import quote_term, terms

__all__ = ["MarkedKind", "MAX_MARKED", "Correction", "changed_words", "mark_corrected",
           "mark_forgotten", "unmark_forgotten", "has_corrections", "corrections_of",
           "session_corrections"]

MarkedKind = Literal["event", "card", "diary"]
# Of a common word, at most this many items are marked per change.
MAX_MARKED = 10_000

# The user's items said before a time that hold every one of some words (MATCH "a" AND "b").
_HOLDING_SQL = {
    "event": "SELECT e.id FROM events_fts JOIN events e ON e.id = events_fts.rowid "
             "WHERE events_fts MATCH ?1 AND e.user_id = ?2 AND e.created_at <= ?3 LIMIT ?4",
    "card": "SELECT c.id FROM cards_fts JOIN context_cards c ON c.id = cards_fts.rowid "
            "WHERE cards_fts MATCH ?1 AND c.user_id = ?2 AND c.created_at <= ?3 LIMIT ?4",
}


@dataclass(frozen=True)
class Correction:
    """What recall does with one marked item: leave it out (`withheld`), or show it with
    `note`, what the person made of the fact it stated."""

    withheld: bool
    note: str | None = None


def changed_words(old: str, new: str | None) -> list[str]:
    """The words of the old value the new one does not say (all of them when there is no
    new one): what an item must hold to be saying the old value."""
    kept = set(terms(new)) if new else set()
    return [word for word in terms(old) if word not in kept]


def _holding(con: apsw.Connection, user_id: str, kind: MarkedKind, words: list[str],
             before: str) -> list[int]:
    if kind == "diary":  # a few rows per user, no full-text index: their words
        wanted = set(words)
        return [diary_id for diary_id, entry in con.execute(
            "SELECT id, entry FROM diary WHERE user_id = ? AND created_at <= ?",
            (user_id, before)) if wanted <= set(terms(entry))]
    match = " AND ".join(quote_term(word) for word in words)
    return [row[0] for row in con.execute(_HOLDING_SQL[kind], (match, user_id, before,
                                                               MAX_MARKED))]


def _mark(con: apsw.Connection, user_id: str, words: list[str], category: str | None,
          key: str | None, at: str) -> int:
    if not words:
        return 0
    marked = 0
    for kind in ("event", "card", "diary"):
        for owner_id in _holding(con, user_id, kind, words, at):
            con.execute("INSERT OR IGNORE INTO corrections (user_id, owner_kind, owner_id, "
                        "category, key, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                        (user_id, kind, owner_id, category, key, at))
            marked += con.changes()
    return marked


def mark_corrected(con: apsw.Connection, user_id: str, category: str, key: str, old: str,
                   new: str | None, *, at: str) -> int:
    """The person corrected the fact (category, key) from `old` to `new` (None: deleted
    it) at `at`: mark what said `old` before then. Returns how many items were marked."""
    return _mark(con, user_id, changed_words(old, new), category, key, at)


def mark_forgotten(con: apsw.Connection, user_id: str, category: str, key: str,
                   values: Iterable[str], *, at: str) -> int:
    """The person forgot the fact (category, key), whose values were `values`: what said
    any of them before `at` is never recalled again, and the fact's corrections marks go
    (they named its key). Returns how many items were marked."""
    con.execute("DELETE FROM corrections WHERE user_id = ? AND category = ? AND key = ?",
                (user_id, category, key))
    return sum(_mark(con, user_id, changed_words(value, None), None, None, at)
               for value in set(values) if value)


def unmark_forgotten(con: apsw.Connection, user_id: str, value: str, *, at: str) -> int:
    """A forget made at `at` is undone and `value` is the fact's again: what said it is
    recalled again. What said only an earlier value of the fact stays withheld (the undo
    brings back the last value only). Returns how many items were unmarked."""
    words = changed_words(value, None)
    if not words:
        return 0
    unmarked = 0
    for kind in ("event", "card", "diary"):
        for owner_id in _holding(con, user_id, kind, words, at):
            con.execute("DELETE FROM corrections WHERE user_id = ? AND owner_kind = ? "
                        "AND owner_id = ? AND key IS NULL AND created_at = ?",
                        (user_id, kind, owner_id, at))
            unmarked += con.changes()
    return unmarked


def has_corrections(con: apsw.Connection, user_id: str) -> bool:
    """Whether anything of the user's is marked: most users' turns need look no further."""
    return con.execute("SELECT 1 FROM corrections WHERE user_id = ? LIMIT 1",
                       (user_id,)).fetchone() is not None


def corrections_of(con: apsw.Connection, user_id: str, kind: MarkedKind,
                   ids: Iterable[int]) -> dict[int, Correction]:
    """The marked ones among the user's items `ids` of one kind, with what recall does
    with each; the others are not in the answer."""
    ids = sorted(set(ids))
    if not ids or not has_corrections(con, user_id):
        return {}
    marks = ",".join("?" * len(ids))
    found: dict[int, Correction] = {}
    notes: dict[int, list[str]] = {}
    # +user_id: the ids pick the rows.
    for owner_id, key, value, deleted_at in con.execute(
            "SELECT c.owner_id, c.key, f.value, f.deleted_at FROM corrections c "
            "LEFT JOIN facts f ON f.user_id = c.user_id AND f.category = c.category "
            "AND f.key = c.key AND f.superseded_at IS NULL "
            f"WHERE c.owner_kind = ? AND +c.user_id = ? AND c.owner_id IN ({marks}) "
            "ORDER BY c.owner_id, c.id", (kind, user_id, *ids)):
        if key is None:
            found[owner_id] = Correction(withheld=True)
        elif value is not None:
            notes.setdefault(owner_id, []).append(
                f"{key}: deleted by the user" if deleted_at else f"{key} is now {value}")
    for owner_id, said in notes.items():
        if owner_id not in found:
            found[owner_id] = Correction(False, "corrected since: " + "; ".join(said))
    return found


def session_corrections(con: apsw.Connection, user_id: str,
                        session_id: str) -> dict[str, Correction]:
    """The session's marked messages, by their text: a conversation a client resends is
    matched to them by what it says."""
    if not has_corrections(con, user_id):
        return {}
    rows = list(con.execute(
        "SELECT e.id, e.content FROM corrections c JOIN events e ON e.id = c.owner_id "
        "WHERE c.user_id = ? AND c.owner_kind = 'event' AND e.session_id = ?",
        (user_id, session_id)))
    found = corrections_of(con, user_id, "event", [event_id for event_id, _ in rows])
    return {" ".join(content.split()): found[event_id] for event_id, content in rows
            if event_id in found}
