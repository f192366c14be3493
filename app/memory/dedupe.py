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

A changed value shares few words with the old one, so text alone misses a change of
mind stated under another key. Keys of one category name the same thing
(`same_subject`, their words stemmed, stop-words dropped) when:
- they have the same words, in any order ("move date", "date of the move");
- they end with the same word and one's words are all in the other's ("editor", "main
  editor": the added word only narrows it; "pet" and "pet food" stay apart);
- they start with the same word, both values are words (not a date, time or number) and
  the new statement names a word of the old value ("backend stack: Kotlin with Ktor",
  then "backend framework: Spring Boot", said as "scratch Ktor, we moved to Spring Boot";
  "favourite colour: blue" and "favourite food: pasta" stay apart).
"""

from __future__ import annotations

import re

import apsw

from app.fts import build_match_query, stems, terms
from app.memory.facts import (
    Fact,
    FactWrite,
    check_fact,
    current_fact,
    get_fact,
    is_forgotten,
    upsert_fact,
)

__all__ = ["SIMILAR_FACT_THRESHOLD", "CANDIDATES", "similar_facts", "value_kind", "same_subject",
           "same_subject_fact", "store_fact"]

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


_MONTHS_AND_DAYS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday "
    "friday saturday sunday today tonight tomorrow yesterday weekend enero febrero marzo "
    "abril mayo junio julio agosto septiembre setiembre octubre noviembre diciembre lunes "
    "martes miércoles miercoles jueves viernes sábado sabado domingo hoy mañana manana ayer")
_WHEN = re.compile(r"\b(?:" + "|".join(_MONTHS_AND_DAYS.split()) + r")\b"
                   r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}:\d{2}\b|\b\d{4}-\d{2}-\d{2}\b",
                   re.IGNORECASE)


def value_kind(value: str) -> str:
    """What kind of thing a value is: "when" (a date or time), "number" or "words"."""
    if _WHEN.search(value):
        return "when"
    return "number" if any(c.isdigit() for c in value) else "words"


def _same_word(a: str, b: str) -> bool:
    return a == b or bool(stems(a) & stems(b))


def same_subject(key: str, value: str, other_key: str, other_value: str,
                 said: str = "") -> bool:
    """Whether `key: value` (said in the message `said`) and `other_key: other_value`, of
    one category, name the same thing (module docstring)."""
    words, others = terms(key), terms(other_key)
    if not words or not others:
        return False
    within = all(any(_same_word(w, o) for o in others) for w in words)
    holds = all(any(_same_word(o, w) for w in words) for o in others)
    if within and holds:
        return True
    if (within or holds) and _same_word(words[-1], others[-1]):
        return True
    named = terms(f"{value} {said}")
    return (_same_word(words[0], others[0])
            and value_kind(value) == value_kind(other_value) == "words"
            and any(_same_word(w, o) for w in terms(other_value) for o in named))


def same_subject_fact(con: apsw.Connection, user_id: str, category: str, key: str,
                      value: str, source_event_id: int | None = None) -> Fact | None:
    """The current fact of the category (tombstoned included) whose key names what `key`
    does (same_subject), latest first; None when there is none."""
    words = terms(key)
    if not words:
        return None
    said = con.execute("SELECT content FROM events WHERE id = ?",
                       (source_event_id,)).fetchone() if source_event_id is not None else None
    # Keys holding the start of one of its words: a superset of those same_subject accepts.
    starts = {w[:3].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
              for w in (words[0], words[-1])}
    likes = " OR ".join("key LIKE ? ESCAPE '\\'" for _ in starts)
    for fact_id, other_key, other_value in con.execute(
            "SELECT id, key, value FROM facts WHERE user_id = ? AND category = ? "
            f"AND superseded_at IS NULL AND forgotten_hash IS NULL AND key != ? AND ({likes}) "
            "ORDER BY updated_at DESC, id DESC",
            (user_id, category, key, *(f"%{start}%" for start in sorted(starts)))):
        if same_subject(key, value, other_key, other_value, said[0] if said else ""):
            return get_fact(con, user_id, fact_id)
    return None


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
    """Store a statement of a fact: upsert_fact, after redirecting a similar fact, or one
    whose key names the same thing, onto the existing row's key. `similarity` is the
    config's [memory] dedupe_similarity."""
    stored_key, stored_value = check_fact(category, source, key, value)
    if current_fact(con, user_id, category, stored_key) is None:
        similar = similar_facts(con, user_id, category, f"{key} {value}", threshold=similarity)
        fact = similar[0][0] if similar else same_subject_fact(
            con, user_id, category, stored_key, stored_value, source_event_id)
        if fact is not None:
            # A deleted fact blocks similar text; a forgotten one is decided by upsert_fact,
            # whose value hash and dates tell a new statement from the forgotten one.
            if fact.deleted_at is not None and source != "user" and not is_forgotten(con, fact):
                return FactWrite("tombstoned", None)
            key = fact.key
    return upsert_fact(con, user_id, category, key, value, source=source, worker=worker,
                       source_event_id=source_event_id, importance=importance,
                       from_outside=from_outside)
