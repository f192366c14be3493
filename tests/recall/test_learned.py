"""The learned stream: a question that matches what memory learned (a fact, a card)
reaches the messages it was learned from, even when they share no word with it."""

from __future__ import annotations

from app.db import connect_readonly
from app.events import append_event, mark_compacted
from app.memory import delete_fact, upsert_fact
from app.memory.cards import NewCard, add_card
from app.recall.fusion import search

HOBBY = "I spent the whole weekend with my watercolours by the lake"
OTHERS = ["The train was late again this morning",
          "We ordered pizza after the match",
          "My sister is moving to Porto in the spring"]


def said(writer, config, texts: list[str], session: str = "s1") -> list[int]:
    return [append_event(writer, config, "ana", session, "user", text).id for text in texts]


def test_a_question_matching_a_fact_finds_the_message_it_was_learned_from(writer, config,
                                                                          recall):
    ids = said(writer, config, [*OTHERS, HOBBY])
    writer.submit(lambda con: upsert_fact(con, "ana", "preference", "hobbies",
                                          "painting and reading", source="agent",
                                          worker="distill", source_event_id=ids[-1]))
    con = connect_readonly(writer.path)
    found = search(con, "ana", "What are my hobbies?", "event", 3, recall=recall)
    assert [c.id for c in found] == [ids[-1]]
    assert "learned" in found[0].ranks


def test_a_question_matching_a_card_finds_the_messages_it_summarises(writer, config, recall):
    chunk = said(writer, config, ["Booked two nights near the glacier", HOBBY])
    later = said(writer, config, OTHERS)

    def compact(con):
        card = add_card(con, "ana", NewCard("s1", "A trip to Iceland was planned",
                                            "iceland trip", chunk[0], chunk[-1], 2),
                        worker="compact")
        mark_compacted(con, chunk, card)

    writer.submit(compact)
    con = connect_readonly(writer.path)
    found = search(con, "ana", "When is the Iceland trip?", "event", 5, recall=recall)
    assert sorted(c.id for c in found) == sorted(chunk)
    assert not set(later) & {c.id for c in found}


def test_a_forgotten_fact_points_nowhere(writer, config, recall):
    ids = said(writer, config, [*OTHERS, HOBBY])
    fact = writer.submit(lambda con: upsert_fact(con, "ana", "preference", "hobbies",
                                                 "painting and reading", source="agent",
                                                 worker="distill", source_event_id=ids[-1]))
    writer.submit(lambda con: delete_fact(con, "ana", fact.fact_id))
    con = connect_readonly(writer.path)
    assert search(con, "ana", "What are my hobbies?", "event", 3, recall=recall) == []
