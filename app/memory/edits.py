"""The memory edits a person makes by hand, one function each, so every front-end (the
HTTP memory API, MCP clients) makes them the same way: as source and worker "user",
through the dedupe policy, and answering with the row as it was stored, read in the same
transaction. Run them on the front-end's writer (`service.edit(lambda con: ...)`).

Each front-end states whose hand the edit is (`from_outside`,
app.memory.provenance.is_outside): the owner's at the machine or on the memory page; a
client's (the HTTP memory API, MCP) is content from outside, and so is an edit that
states nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.errors import NotFound
from app.memory.dedupe import SIMILAR_FACT_THRESHOLD, store_fact
from app.memory.diary import add_diary_entry
from app.memory.facts import Fact, get_fact, upsert_fact
from app.memory.provenance import WriteAction
from app.memory.validation import MAX_ID_LENGTH, InvalidMemory, check_text

__all__ = ["DIARY_ENTRY_CHARS", "FactNotFound", "EditedFact", "remember_fact", "correct_fact",
           "write_diary_entry"]

# A hand-written diary entry is a summary for the next session, not a transcript.
DIARY_ENTRY_CHARS = 8000


class FactNotFound(NotFound):
    """No current fact with that id for this user: one wording on every front-end."""

    def __init__(self, fact_id: int) -> None:
        super().__init__(f"no current fact {fact_id}: list the facts to see the current ids")


@dataclass(frozen=True)
class EditedFact:
    action: WriteAction
    fact: Fact | None  # None when nothing was stored ("tombstoned")


def remember_fact(con: apsw.Connection, user_id: str, category: str, key: str, value: str, *,
                  importance: float = 0.5,
                  similarity: float = SIMILAR_FACT_THRESHOLD,
                  from_outside: bool = True) -> EditedFact:
    """The user states a fact: a new value, or a similar text under another key, supersedes
    the current fact (kept as history). `similarity` is [memory] dedupe_similarity;
    `from_outside`: not the owner's own hand, or stated reading outside content (module
    docstring)."""
    written = store_fact(con, user_id, category, key, value, source="user", worker="user",
                         importance=importance, similarity=similarity,
                         from_outside=from_outside)
    fact = get_fact(con, user_id, written.fact_id) if written.fact_id else None
    return EditedFact(written.action, fact)


def correct_fact(con: apsw.Connection, user_id: str, fact_id: int, value: str, *,
                 from_outside: bool = True) -> EditedFact:
    """A new value for a current fact, under its category and key: the old row is kept as
    superseded history. FactNotFound when the user has no such current fact.
    `from_outside`: the new value is not the owner's own (module docstring)."""
    fact = get_fact(con, user_id, fact_id)
    if fact is None or fact.superseded_at is not None or fact.deleted_at is not None:
        raise FactNotFound(fact_id)
    written = upsert_fact(con, user_id, fact.category, fact.key, value, source="user",
                          worker="user", importance=fact.importance, from_outside=from_outside)
    return EditedFact(written.action, get_fact(con, user_id, written.fact_id))


def write_diary_entry(con: apsw.Connection, user_id: str, session_id: str,
                      entry: str, *, from_outside: bool = True) -> WriteAction:
    """The session's diary entry written by hand (a client's hand-off note for the next
    session), replacing the one it had: "insert" or "update". `from_outside`: not the
    owner's own hand (module docstring): an MCP client's note is a model's text."""
    if not session_id.strip() or len(session_id) > MAX_ID_LENGTH or not session_id.isprintable():
        raise InvalidMemory(f"session_id must be 1 to {MAX_ID_LENGTH} printable characters")
    entry = check_text("value", entry, DIARY_ENTRY_CHARS)
    return add_diary_entry(con, user_id, session_id, entry, is_extractive=False, worker="user",
                           from_outside=from_outside)
