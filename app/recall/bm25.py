"""The full-text stream: the user's words ranked by FTS5's BM25, at a bounded cost.

BM25 over an OR of the user's words scores every row any word matches — and FTS5's
bm25() also walks each word's whole doclist to count the rows holding it — so on a big
memory a few common words cost tens of milliseconds. A query whose words match at
most BM25_ROW_BUDGET rows in all is ranked by FTS5's bm25() as is. Past that, the words
are split by how many rows hold them: the rarest, together holding at most the budget,
pick and rank the candidates with bm25(); the common ones only add their share of the
BM25 score to those candidates, computed here from the candidates' own text with
FTS5's tokenizer, its row and token totals and cached row counts (`TermCounts`, kept
by the process's Recall: app/recall/state.py). So the cost is bounded by the budget,
not the memory, and the order is BM25's on the whole query for every candidate found
(on LoCoMo, recall@10 within 0.5 point of plain bm25()). Rows holding only common words
come after, newest first. All of a query's figures are read in one read transaction,
so they agree with each other.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import apsw

from app.fts import build_match_query, terms
from app.recall.owners import OwnerKind, owned

__all__ = ["FTS_SQL", "BM25_ROW_BUDGET", "COUNT_SAMPLE_ROWS", "TOKENIZER", "RECOUNT_GROWTH",
           "TermCounts", "rows_holding", "indexed_texts", "bm25_ranks"]


@dataclass(frozen=True)
class _FullText:
    table: str  # the FTS5 table
    content: str  # the table it indexes
    join: str  # joined to it, keeping only the user's own, current rows
    text: str  # the indexed text, as one string


_FTS_PARTS = {
    "fact": _FullText("facts_fts", "facts", "JOIN facts o ON o.id = facts_fts.rowid WHERE "
                      "facts_fts MATCH ? AND o.user_id = ? AND o.superseded_at IS NULL "
                      "AND o.deleted_at IS NULL", "key || ' ' || value"),
    "card": _FullText("cards_fts", "context_cards", "JOIN context_cards o ON o.id = "
                      "cards_fts.rowid WHERE cards_fts MATCH ? AND o.user_id = ? "
                      "AND o.folded_into IS NULL", "summary || ' ' || keywords"),
    "event": _FullText("events_fts", "events", "JOIN events o ON o.id = events_fts.rowid "
                       "WHERE events_fts MATCH ? AND o.user_id = ?", "content"),
}
# Plain bm25() over every matching row: the stream within its row budget, and what the
# bounded stream is measured against (tests/bench/context.py).
FTS_SQL = {kind: f"SELECT o.id, bm25({f.table}) FROM {f.table} {f.join} "
                 f"ORDER BY bm25({f.table}) LIMIT ?" for kind, f in _FTS_PARTS.items()}
# FTS5 walks doclists backwards and stops at the limit: no scoring, no sort.
_FTS_NEWEST_SQL = {kind: f"SELECT o.id, 0.0 FROM {f.table} {f.join} "
                         f"ORDER BY {f.table}.rowid DESC LIMIT ?" for kind, f in _FTS_PARTS.items()}
# The same orders read from the index alone: the joins above look up every matching row
# (up to BM25_ROW_BUDGET, on pages all over a large table) to keep the user's current
# ones; reading twice the depth and looking up only those is about twice as fast.
_FTS_ONLY_SQL = {
    "bm25": {kind: f"SELECT rowid, bm25({f.table}) FROM {f.table} WHERE {f.table} MATCH ? "
                   f"ORDER BY bm25({f.table}) LIMIT ?" for kind, f in _FTS_PARTS.items()},
    "newest": {kind: f"SELECT rowid, 0.0 FROM {f.table} WHERE {f.table} MATCH ? "
                     "ORDER BY rowid DESC LIMIT ?" for kind, f in _FTS_PARTS.items()},
}
_FTS_JOINED_SQL = {"bm25": FTS_SQL, "newest": _FTS_NEWEST_SQL}
BM25_ROW_BUDGET = 500
# A common word's row count is estimated from the newest this-many rows of a bigger table.
COUNT_SAMPLE_ROWS = 50 * BM25_ROW_BUDGET
# The tokenizer of every *_fts table (migrations/0001_initial.sql) and bm25()'s constants.
TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])
_K1, _B = 1.2, 0.75
# Cached row counts are redone once the table has grown by this share.
RECOUNT_GROWTH = 0.1


# FTS5's totals, read through its documented auxiliary-function API (xRowCount,
# xColumnTotalSize): the same figures bm25() uses. Any row serves to call them.
_TOTALS_FUNCTIONS: dict[str, Callable[[apsw.FTS5ExtensionApi], int]] = {
    "hilo_fts_row_count": lambda api: api.row_count,
    "hilo_fts_token_count": lambda api: api.column_total_size(-1),
}
_TOTALS_SQL = {f.table: f"SELECT hilo_fts_row_count({f.table}), hilo_fts_token_count({f.table}) "
                        f"FROM {f.table} LIMIT 1" for f in _FTS_PARTS.values()}
# Connections the functions are registered on; FTS5 keeps every registration until the
# connection closes, so each connection gets them once.
_WITH_TOTALS: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
_registering = threading.Lock()


def _index_size(con: apsw.Connection, table: str) -> tuple[int, float]:
    """Rows in an FTS5 index and their mean length in tokens, as bm25() sees them."""
    if con not in _WITH_TOTALS:
        with _registering:
            if con not in _WITH_TOTALS:
                for name, function in _TOTALS_FUNCTIONS.items():
                    con.register_fts5_function(name, function)
                _WITH_TOTALS.add(con)
    row = con.execute(_TOTALS_SQL[table]).fetchone()
    if row is None or not row[0]:
        return 0, 0.0
    rows, tokens = row
    return rows, tokens / rows


def _count_rows(con: apsw.Connection, part: _FullText, word: str, rows: int) -> int:
    """Rows holding the word: exact up to the budget; past it, estimated from the newest
    rows, so a word in half a million rows costs no more than a rare one."""
    match = build_match_query(word)
    table = part.table
    found = con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? "
                        "LIMIT ?)", (match, BM25_ROW_BUDGET + 1)).fetchone()[0]
    if found <= BM25_ROW_BUDGET:
        return found
    if rows <= COUNT_SAMPLE_ROWS:
        return con.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                           (match,)).fetchone()[0]
    newest = con.execute(f"SELECT max(id) FROM {part.content}").fetchone()[0] or 0
    sampled = con.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ? AND "
                          f"{table}.rowid > ?", (match, newest - COUNT_SAMPLE_ROWS)).fetchone()[0]
    return max(BM25_ROW_BUDGET + 1, round(sampled * rows / COUNT_SAMPLE_ROWS))


@dataclass
class _TableCounts:
    rows: int  # rows in the FTS index when these counts were made
    words: dict[str, int] = field(default_factory=dict)  # word -> rows holding it


class TermCounts:
    """Rows per word and FTS table, cached per database file; redone when the table has
    grown by a tenth, or shrunk."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], _TableCounts] = {}
        self._lock = threading.Lock()

    def counts(self, con: apsw.Connection, part: _FullText, words: list[str],
               rows: int) -> dict[str, int]:
        key = (con.filename, part.table)
        with self._lock:
            cached = self._tables.get(key)
            if (cached is None or not con.filename  # an in-memory database: nothing to key on
                    or rows < cached.rows or rows > cached.rows * (1 + RECOUNT_GROWTH)):
                cached = self._tables[key] = _TableCounts(rows)
            known = {w: cached.words[w] for w in words if w in cached.words}
        missing = {w: _count_rows(con, part, w, rows) for w in words if w not in known}
        with self._lock:
            cached.words.update(missing)
        return known | missing


def rows_holding(con: apsw.Connection, term_counts: TermCounts, kind: OwnerKind,
                 words: list[str]) -> tuple[int, dict[str, int]]:
    """The rows in the kind's full-text index, and how many of them hold each word."""
    part = _FTS_PARTS[kind]
    rows, _ = _index_size(con, part.table)
    return rows, term_counts.counts(con, part, words, rows)


def indexed_texts(con: apsw.Connection, kind: OwnerKind, owner_ids: list[int]) -> dict[int, str]:
    """The text the full-text index holds for each owner (a fact's key and value, a
    card's summary and keywords, an event's content)."""
    if not owner_ids:
        return {}
    part = _FTS_PARTS[kind]
    marks = ",".join("?" * len(owner_ids))
    return dict(con.execute(f"SELECT id, {part.text} FROM {part.content} WHERE id IN ({marks})",
                            owner_ids))


def _idf(rows: int, holding: int) -> float:
    """bm25()'s inverse document frequency of a word held by `holding` of `rows` rows.

    A count cached from a newer snapshot than `rows` can exceed it: it counts as every row.
    """
    holding = min(holding, rows)
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5)))


def _common_share(con: apsw.Connection, part: _FullText, words: list[str],
                  counts: dict[str, int], rows: int, mean_length: float,
                  owner_ids: list[int]) -> dict[int, float]:
    """Each owner's share of the BM25 score from these words, as bm25() would add it
    (negative: lower is better), from the owner's text."""
    if not words or not owner_ids or not rows:
        return {}
    tokenizer = con.fts5_tokenizer(*TOKENIZER)

    def tokenize(text: str) -> list[str]:
        return tokenizer(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                         include_offsets=False, include_colocated=False)

    phrases = [(tokenize(w), _idf(rows, counts[w])) for w in words]
    marks = ",".join("?" * len(owner_ids))
    shares = {}
    for owner_id, text in con.execute(
            f"SELECT id, {part.text} FROM {part.content} WHERE id IN ({marks})", owner_ids):
        tokens = tokenize(text)
        norm = _K1 * (1 - _B + _B * len(tokens) / mean_length) if mean_length else _K1
        score = 0.0
        for phrase, idf in phrases:
            if len(phrase) == 1:
                hits = tokens.count(phrase[0])
            else:
                hits = sum(tokens[i:i + len(phrase)] == phrase
                           for i in range(len(tokens) - len(phrase) + 1)) if phrase else 0
            if hits:
                score += idf * hits * (_K1 + 1) / (hits + norm)
        shares[owner_id] = -score
    return shares


def _fts_read(con: apsw.Connection, kind: OwnerKind, order: Literal["bm25", "newest"],
              match: str, user_id: str, depth: int) -> list[tuple[int, float]]:
    """The user's current rows matching, first `depth` in this order, with bm25() (0.0
    for "newest"): read from the index alone, and joined only when too few of the first
    2 x depth rows are the user's current ones (many users, or much superseded)."""
    read = 2 * depth
    rows = con.execute(_FTS_ONLY_SQL[order][kind], (match, read)).fetchall()
    kept = set(owned(con, user_id, kind, [row[0] for row in rows]))
    found = [row for row in rows if row[0] in kept]
    if len(found) >= depth or len(rows) < read:
        return found[:depth]
    return con.execute(_FTS_JOINED_SQL[order][kind], (match, user_id, depth)).fetchall()


def bm25_ranks(con: apsw.Connection, user_id: str, searched: str, match: str | None,
               term_counts: TermCounts, kind: OwnerKind, depth: int) -> list[int]:
    """The user's owners of `kind` whose text holds the words `searched` (`match`: their
    FTS5 form), best BM25 first (see the module's docstring for how the common words are
    scored). The stream that asks with a Query is app/recall/streams.py's bm25_stream."""
    if match is None:
        return []
    # One read transaction: the row totals, the word counts and the rows scored all come
    # from one snapshot, whatever commits meanwhile.
    with con:
        return _bm25_ranks_in_snapshot(con, user_id, searched, match, term_counts, kind, depth)


def _bm25_ranks_in_snapshot(con: apsw.Connection, user_id: str, searched: str, match: str,
                            term_counts: TermCounts, kind: OwnerKind, depth: int) -> list[int]:
    part = _FTS_PARTS[kind]
    words = terms(searched)
    rows, mean_length = _index_size(con, part.table)
    if not rows:  # nothing indexed (a memory with no facts or cards yet): nothing matches
        return []
    counts = term_counts.counts(con, part, words, rows)
    if sum(counts.values()) <= BM25_ROW_BUDGET:
        return [owner_id for owner_id, _ in _fts_read(con, kind, "bm25", match, user_id,
                                                       depth)]
    rare, spent = [], 0
    for word in sorted(words, key=counts.__getitem__):
        if spent + counts[word] > BM25_ROW_BUDGET:
            break
        rare.append(word)
        spent += counts[word]
    common = [w for w in words if w not in rare]
    scores: dict[int, float] = {}
    if rare:
        scores.update(_fts_read(con, kind, "bm25", build_match_query(" ".join(rare)), user_id,
                                depth))
    if len(scores) < depth:
        for owner_id, _ in _fts_read(con, kind, "newest", build_match_query(" ".join(common)),
                                     user_id, depth):
            scores.setdefault(owner_id, 0.0)
    shares = _common_share(con, part, common, counts, rows, mean_length, list(scores))
    for owner_id, share in shares.items():
        scores[owner_id] += share
    return sorted(scores, key=lambda owner_id: (scores[owner_id], -owner_id))[:depth]
