"""A search a person types shows what matches, and says so when nothing does."""

from __future__ import annotations

import pytest

from app.db import connect_readonly
from app.events import append_event
from app.recall.fusion import search_memory
from tests.embedding_fixtures import ConceptEmbedder
from app.learn.embed import embed_pending

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
