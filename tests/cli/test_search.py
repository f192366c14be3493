"""A search a person types shows what matches, and says so when nothing does."""

from __future__ import annotations

import pytest

from app.db import connect_readonly
from app.events import append_event
from app.learn.embed import embed_pending
from app.recall.fusion import search_memory
from tests.embedding_fixtures import ConceptEmbedder

TEXTS = [
    "I adopted a golden retriever puppy last weekend",
    "My neighbour has two pets, a cat and a parrot",
    "We cooked pasta for dinner on Friday",
    "The flight to Lisbon was delayed by two hours",
]


@pytest.fixture
def seeded(writer, config):
    embedder = ConceptEmbedder()
    for text in TEXTS:
        append_event(writer, config, "ana", "s1", "user", text)
    embed_pending(writer, embedder)
    return connect_readonly(writer.path), embedder


def test_a_search_nothing_matches_finds_nothing_even_with_vectors(seeded, recall):
    con, embedder = seeded
    assert search_memory(con, "ana", "zzzqqq", 10, embedder=embedder, recall=recall) == []


def test_a_search_still_finds_by_keyword_and_by_close_meaning(seeded, recall):
    con, embedder = seeded
    hits = search_memory(con, "ana", "pasta", 10, embedder=embedder, recall=recall)
    assert hits[0].text == "user: We cooked pasta for dinner on Friday"
    assert any("puppy" in h.text
               for h in search_memory(con, "ana", "dog", 10, embedder=embedder, recall=recall))


def test_a_search_lists_what_ranks_highest_each_with_why(seeded, recall):
    con, embedder = seeded
    hits = search_memory(con, "ana", "pasta dinner", 10, embedder=embedder, recall=recall)
    assert hits[0].text == "user: We cooked pasta for dinner on Friday"
    assert hits[0].why.words == ("pasta", "dinner")
    # What the fusion ranks after it is listed too, each with its reason: said near the
    # match, or near it in meaning. Nothing without one.
    assert len(hits) > 1 and all(h.why.text() for h in hits)
    assert not any(h.why.words for h in hits[1:])


def test_a_search_finds_what_was_said_at_the_time_it_names(writer, config, recall):
    said = append_event(writer, config, "ana", "s1", "user", "Finally booked the ferry tickets",
                        created_at="2026-05-14T10:00:00Z")
    append_event(writer, config, "ana", "s2", "user", "Booked nothing",
                 created_at="2026-08-02T10:00:00Z")
    con = connect_readonly(writer.path)
    hits = search_memory(con, "ana", "what happened in May 2026?", 10, recall=recall)
    assert [(h.id, h.why.when) for h in hits] == [(said.id, ("may 2026",))]


def test_a_search_shows_the_reply_to_a_question_that_matches(writer, config, recall):
    asked = append_event(writer, config, "ana", "s1", "assistant", "What's the pup's name?")
    reply = append_event(writer, config, "ana", "s1", "user", "Buddy, after my grandfather!")
    con = connect_readonly(writer.path)
    hits = search_memory(con, "ana", "pup name", 10, recall=recall)
    why = {h.id: h.why.text() for h in hits}
    assert why == {asked.id: "words: pup, name",
                   reply.id: f"the reply to event #{asked.id}, which matches"}


def test_hilo_memory_search_prints_each_hit_with_why(writer, config, data_dir, capsys):
    from app.cli import main

    append_event(writer, config, "ana", "s1", "user", "We cooked pasta for dinner on Friday")
    append_event(writer, config, "ana", "s1", "user", "The flight to Lisbon was delayed")
    assert main(["memory", "search", "pasta", "--user", "ana", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "pasta for dinner" in out and "(words: pasta)" in out
    # Said beside the match, so the fusion ranks it: listed, with that reason.
    assert "(said near event #1, which matches)" in out


def test_a_hit_on_a_tool_call_shows_the_call_never_empty_text(writer, config, recall):
    append_event(writer, config, "ana", "s2", "user", "what is the weather in Lisbon?")
    append_event(writer, config, "ana", "s2", "assistant", "",
                 tool_calls=[{"name": "get_weather", "arguments": {"city": "Lisbon"}}])
    append_event(writer, config, "ana", "s2", "tool", "sunny, 24 °C", tool_name="get_weather")
    con = connect_readonly(writer.path)

    hits = search_memory(con, "ana", "weather Lisbon", 10, recall=recall)

    texts = [h.text for h in hits]
    assert 'assistant: [called get_weather({"city": "Lisbon"})]' in texts
    assert all(text.split(": ", 1)[1].strip() for text in texts)
