"""compact: oldest chunks become context cards, one card per chunk, until below threshold."""

from __future__ import annotations

import threading

import pytest

from app.fts import build_match_query
from app.learn.compact import (
    CARD_SCHEMA,
    CardText,
    ChunkEvent,
    compact_session,
    next_chunk,
    write_card,
)
from app.learn.reading import reading
from app.model.client import ModelClient
from tests.workers.support import add_turn, query, scalar, scripted_model, snapshot, worker_config


@pytest.fixture
def job_parts(config, data_dir, writer, fake_ollama):
    # Chunks of four at a threshold of eight: small numbers to count cards by.
    cfg = worker_config(config, fake_ollama).replace(
        memory={"compaction_threshold": 8, "chunk_size": 4})
    fake_ollama.responder = scripted_model
    with ModelClient.from_config(cfg) as model:
        yield cfg, writer, model, fake_ollama


def turns(cfg, writer, count, session="s1", user="ana"):
    for n in range(count):
        add_turn(writer, cfg, user, session, f"Step {n}: configure the nginx proxy for {session}",
                 f"Done with step {n}.")


def test_a_session_over_the_threshold_is_compacted_until_below_it(job_parts):
    cfg, writer, model, fake = job_parts
    turns(cfg, writer, 9)  # 18 events
    cards = compact_session(writer, model, cfg, "ana", "s1")
    # 18 → 14 → 10 → 6 un-compacted: three chunks of four.
    assert len(cards) == 3
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 0") == 6
    rows = query(cfg, "SELECT id, first_event_id, last_event_id, event_count, level, is_extractive "
                      "FROM context_cards ORDER BY id")
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [(1, 4, 4, 0, 0), (5, 8, 4, 0, 0),
                                                              (9, 12, 4, 0, 0)]
    assert query(cfg, "SELECT card_id, count(*) FROM events WHERE compacted = 1 GROUP BY card_id") == [
        (rows[0][0], 4), (rows[1][0], 4), (rows[2][0], 4)]
    body = fake.bodies("/api/generate")[0]
    assert body["format"] == CARD_SCHEMA and body["options"]["temperature"] == 0.1


def test_a_card_is_found_by_full_text_search(job_parts):
    cfg, writer, model, _ = job_parts
    turns(cfg, writer, 4)
    compact_session(writer, model, cfg, "ana", "s1")
    found = query(cfg, "SELECT rowid FROM cards_fts WHERE cards_fts MATCH ?",
                  (build_match_query("progress"),))
    assert found == [(1,)]
    assert query(cfg, "SELECT owner_kind, action, worker FROM memory_log") == [("card", "insert", "compact")]


def test_below_the_threshold_nothing_happens(job_parts):
    cfg, writer, model, fake = job_parts
    turns(cfg, writer, 3)
    assert compact_session(writer, model, cfg, "ana", "s1") == []
    assert fake.bodies("/api/generate") == []


def test_compacting_twice_leaves_the_same_database(job_parts):
    cfg, writer, model, fake = job_parts
    turns(cfg, writer, 6)
    compact_session(writer, model, cfg, "ana", "s1")
    before = snapshot(cfg)
    assert compact_session(writer, model, cfg, "ana", "s1") == []
    assert snapshot(cfg) == before


def test_one_chunk_never_yields_two_cards(job_parts):
    cfg, writer, _, _ = job_parts
    turns(cfg, writer, 4)
    with reading(writer) as con:
        chunk = next_chunk(con, cfg, "ana", "s1")
    card = CardText("summary", "k")
    first = writer.submit(lambda con: write_card(con, "ana", "s1", chunk, card))
    second = writer.submit(lambda con: write_card(con, "ana", "s1", chunk, card))
    assert first is not None and second is None
    assert scalar(cfg, "SELECT count(*) FROM context_cards") == 1


def test_the_unique_index_backs_the_check(job_parts):
    cfg, writer, _, _ = job_parts
    turns(cfg, writer, 4)
    with reading(writer) as con:
        chunk = next_chunk(con, cfg, "ana", "s1")
    writer.submit(lambda con: write_card(con, "ana", "s1", chunk, CardText("a", "k")))
    # Even with the events un-marked, a second card for the same first event is refused.
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 0, card_id = NULL"))
    assert writer.submit(lambda con: write_card(con, "ana", "s1", chunk, CardText("b", "k"))) is None


def test_concurrent_compactions_of_one_session_make_each_card_once(job_parts):
    cfg, writer, model, fake = job_parts
    fake.latency = 0.01
    turns(cfg, writer, 20)  # 40 events
    results: list[list[int]] = []
    threads = [threading.Thread(target=lambda: results.append(
        compact_session(writer, model, cfg, "ana", "s1"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 40 → 4 left: nine chunks, each exactly one card, whichever thread wrote it.
    assert sorted(card for run in results for card in run) == list(range(1, 10))
    assert scalar(cfg, "SELECT count(*) FROM context_cards") == 9
    assert scalar(cfg, "SELECT count(*) FROM events WHERE compacted = 1 AND card_id IS NULL") == 0


def test_the_extractive_card_quotes_the_chunk_and_is_flagged(job_parts):
    cfg, writer, _, fake = job_parts
    turns(cfg, writer, 4)
    compact_session(writer, None, cfg, "ana", "s1", extractive=True)
    summary, keywords, extractive = query(
        cfg, "SELECT summary, keywords, is_extractive FROM context_cards")[0]
    assert extractive == 1
    assert summary.startswith("user: Step 0: configure the nginx proxy for s1 · assistant: Done")
    assert "nginx" in keywords and "proxy" in keywords
    assert fake.bodies("/api/generate") == []


def test_chunk_events_carry_their_importance_to_the_card(job_parts):
    cfg, writer, _, _ = job_parts
    events = [ChunkEvent(i, "user", "x", imp) for i, imp in enumerate([0.2, 0.9], start=1)]
    turns(cfg, writer, 1)
    writer.submit(lambda con: write_card(con, "ana", "s1", events, CardText("s", "k")))
    assert scalar(cfg, "SELECT importance FROM context_cards") == 0.9
