"""The bounded full-text stream: it scores with FTS5's own statistics, and reads them
from one snapshot while writes land."""

from __future__ import annotations

import apsw
import pytest

from app.db import connect_readonly
from app.events import append_event
from app.fts import build_match_query
from app.memory import upsert_fact
from app.recall import bm25
from app.recall.query import make_query
from app.recall.streams import bm25_stream

EVENTS = [
    "alpha beta gamma",
    "alpha alpha delta epsilon zeta eta theta",
    "beta only here, with a few more words than the others have",
    "nothing to see",
    "alpha",
    "we cooked pasta for dinner",
    "the flight to Lisbon was delayed",
    "a quiet afternoon",
]
FACTS = [("editor", "uses helix, alpha build"), ("alpha host", "db2 runs beta postgres"),
         ("city", "lives in Madrid"), ("pet", "a puppy called Biscuit"),
         ("food", "grain free kibble"), ("os", "debian stable")]


def _tokens(con, text: str) -> list[str]:
    tokenizer = con.fts5_tokenizer(*bm25.TOKENIZER)
    return tokenizer(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                     include_offsets=False, include_colocated=False)


@pytest.fixture
def memory(writer, config):
    for text in EVENTS:
        append_event(writer, config, "ana", "s1", "user", text)
    for key, value in FACTS:
        writer.submit(lambda con, k=key, v=value: upsert_fact(
            con, "ana", "fact", k, v, source="user", worker="user"))
    con = connect_readonly(writer.path)
    yield con
    con.close()


@pytest.mark.parametrize("table, sql", [
    ("events_fts", "SELECT content FROM events"),
    ("facts_fts", "SELECT key || ' ' || value FROM facts"),
])
def test_row_and_token_totals_are_those_of_the_indexed_text(memory, table, sql):
    texts = [text for (text,) in memory.execute(sql)]
    rows, mean_length = bm25._index_size(memory, table)
    assert rows == len(texts)
    assert mean_length == pytest.approx(sum(len(_tokens(memory, t)) for t in texts) / len(texts))


@pytest.mark.parametrize("kind", ["event", "fact"])
def test_the_scores_added_for_common_words_are_fts5s_own_bm25(memory, kind):
    part = bm25._FTS_PARTS[kind]
    words = ["alpha", "beta"]
    rows, mean_length = bm25._index_size(memory, part.table)
    counts = {w: bm25._count_rows(memory, part, w, rows) for w in words}
    expected = dict(memory.execute(
        f"SELECT rowid, bm25({part.table}) FROM {part.table} WHERE {part.table} MATCH ?",
        (build_match_query(" ".join(words)),)))
    shares = bm25._common_share(memory, part, words, counts, rows, mean_length, list(expected))
    assert len(expected) >= 2
    assert shares == pytest.approx(expected, rel=1e-9)


def test_ranking_reads_its_figures_from_one_snapshot_while_writes_land(writer, config, memory,
                                                                       monkeypatch, recall):
    # Few rows, a tiny budget: every query word is "common", scored from the row totals
    # and word counts. Writes landing between reading those once made a word seem to
    # be in more rows than the table had (math domain error, HTTP 500).
    monkeypatch.setattr(bm25, "BM25_ROW_BUDGET", 1)
    count_rows = bm25._count_rows
    landed: list[int] = []

    def count_while_writes_land(con, part, word, rows):
        if not landed:
            landed.extend(append_event(writer, config, "ana", "s1", "user", "alpha").id
                          for _ in range(len(EVENTS) * 2))
        return count_rows(con, part, word, rows)

    monkeypatch.setattr(bm25, "_count_rows", count_while_writes_land)
    ranked = bm25_stream(memory, make_query("ana", "alpha beta", recall=recall), "event", 10)
    assert landed and not set(ranked) & set(landed)
    assert sorted(ranked) == [1, 2, 3, 5]


def test_a_word_count_above_the_row_total_scores_like_a_word_in_every_row(memory):
    # Word counts are cached across connections, so one may come from a newer snapshot.
    part = bm25._FTS_PARTS["event"]
    rows, mean_length = bm25._index_size(memory, part.table)
    ids = [1, 2, 5]
    newer = bm25._common_share(memory, part, ["alpha"], {"alpha": rows + 3}, rows,
                               mean_length, ids)
    everywhere = bm25._common_share(memory, part, ["alpha"], {"alpha": rows}, rows,
                                    mean_length, ids)
    assert newer == everywhere and set(newer) == set(ids)


@pytest.mark.parametrize("kind", ["event", "fact"])
def test_the_stream_keeps_only_the_users_current_rows_even_when_others_outrank_them(
        writer, config, kind, recall):
    # Read from the index alone, the best-scored rows are another user's and superseded
    # facts: the stream still gives this user's current rows, in bm25()'s order.
    for n in range(30):
        append_event(writer, config, "bob", "s1", "user", f"alpha alpha alpha {n}")
        writer.submit(lambda con, n=n: upsert_fact(con, "bob", "fact", f"alpha {n}",
                                                   "alpha alpha", source="user", worker="user"))
    for n in range(3):
        append_event(writer, config, "ana", "s2", "user", f"alpha and other words {n}")
        for version in ("alpha alpha alpha", f"alpha and other words {n}"):  # one superseded
            writer.submit(lambda con, n=n, v=version: upsert_fact(
                con, "ana", "fact", f"topic {n}", v, source="user", worker="user"))
    con = connect_readonly(writer.path)
    expected = [row[0] for row in con.execute(
        bm25.FTS_SQL[kind], (build_match_query("alpha"), "ana", 50))]
    assert len(expected) == 3
    assert bm25_stream(con, make_query("ana", "alpha", recall=recall), kind, 2) == expected[:2]
    con.close()
