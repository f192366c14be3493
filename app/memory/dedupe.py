"""Dedupe on write: one current fact per (user, category, key) — or per similar text.

The one policy for a new statement of a fact, whoever makes it: the user (the API's
POST /memory/facts) or a worker (distill). A fact whose (category, key) is new, but
whose text is close to a current fact of the same category, takes that fact's key, so
upsert_fact supersedes it instead of adding a second row (the old value stays as a
superseded row and in memory_log). A tombstoned fact blocks similar facts too: no
worker re-creates what the user deleted; the user's own statement brings it back, as
it would under the same key.

Similarity is BM25 over facts_fts, normalised by the candidate's score against its own
words: 1.0 means the new text contains every (IDF-weighted) word of the existing fact.
"""

from __future__ import annotations

import apsw

from app.fts import build_match_query
from app.memory.facts import (
    Fact,
    FactWrite,
    check_fact,
    current_fact,
    get_fact,
    is_forgotten,
    upsert_fact,
)

# Share of an existing fact's BM25 weight the new text must cover to be "the same fact";
# [memory] dedupe_similarity in config.toml, this is its default.
SIMILAR_FACT_THRESHOLD = 0.75
CANDIDATES = 5


def _self_score(con: apsw.Connection, fact: Fact) -> float | None:
    query = build_match_query(f"{fact.key} {fact.value}")
    if query is None:
        return None
    row = con.execute("SELECT bm25(facts_fts) FROM facts_fts WHERE facts_fts MATCH ? AND rowid = ?",
                      (query, fact.id)).fetchone()
    return row[0] if row else None


def similar_facts(con: apsw.Connection, user_id: str, category: str, text: str,
                  *, threshold: float = SIMILAR_FACT_THRESHOLD,
                  exclude: int | None = None) -> list[tuple[Fact, float]]:
    """Current facts (tombstoned included) of the category that `text` covers, best first."""
    query = build_match_query(text)
    if query is None:
        return []
    rows = list(con.execute(
        "SELECT f.id, bm25(facts_fts) FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid "
        "WHERE facts_fts MATCH ? AND f.user_id = ? AND f.category = ? "
        "AND f.superseded_at IS NULL ORDER BY bm25(facts_fts) LIMIT ?",
        (query, user_id, category, CANDIDATES + (exclude is not None)),
    ))
    found = []
    for fact_id, score in rows:
        if fact_id == exclude:
            continue
        fact = get_fact(con, user_id, fact_id)
        own = _self_score(con, fact) if fact else None
        if fact is None or not own:
            continue
        similarity = score / own  # both negative: more negative is a better match
        if similarity >= threshold:
            found.append((fact, similarity))
    found.sort(key=lambda pair: -pair[1])
    return found


def store_fact(
    con: apsw.Connection,
    user_id: str,
    category: str,
    key: str,
    value: str,
    *,
    source: str,
    worker: str,
    source_event_id: int | None = None,
    importance: float = 0.5,
    similarity: float = SIMILAR_FACT_THRESHOLD,
    from_outside: bool = True,
) -> FactWrite:
    """Store a statement of a fact: upsert_fact, after redirecting a similar fact onto the
    existing row's key. `similarity` is the config's [memory] dedupe_similarity."""
    stored_key, _ = check_fact(category, source, key, value)
    if current_fact(con, user_id, category, stored_key) is None:
        similar = similar_facts(con, user_id, category, f"{key} {value}", threshold=similarity)
        if similar:
            fact = similar[0][0]
            # A deleted fact blocks similar text; a forgotten one is decided by upsert_fact,
            # whose value hash and dates tell a new statement from the forgotten one.
            if fact.deleted_at is not None and source != "user" and not is_forgotten(con, fact):
                return FactWrite("tombstoned", None)
            key = fact.key
    return upsert_fact(con, user_id, category, key, value, source=source, worker=worker,
                       source_event_id=source_event_id, importance=importance,
                       from_outside=from_outside)
