"""The word-neighbours bench's own parts (tests/bench/wordnear.py): the vocabulary it
builds from the memory, and the neighbours it finds for a question's words."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("sklearn")  # tests.bench.ltr, whose stores the bench reuses

from app.db import connect_readonly
from app.events import append_event
from tests.bench.wordnear import Vocabulary, neighbour_scores

# Words on three axes; anything else is orthogonal to all of them.
AXES = {"hobbies": 0, "painting": 0, "watercolour": 0, "camping": 1, "tent": 1, "dog": 2}
EVENTS = [
    "I spent the weekend painting a watercolour of the lake",
    "More painting today, and a new watercolour set",
    "We went camping and the tent leaked",
    "Camping again in 2023, new tent this time",
    "The dog slept all day",
]


class WordEmbedder:
    """One dimension per axis (slightly apart, so cosines differ), and one per other word."""

    model = "words"

    def embed(self, texts):
        rows = np.zeros((len(texts), 64), np.float32)
        for i, text in enumerate(texts):
            axis = AXES.get(text)
            if axis is None:
                rows[i, 8 + hash(text) % 56] = 1.0
            else:
                rows[i, axis] = 1.0
                rows[i, 3 + len(text) % 5] = 0.3
        return rows


def test_the_vocabulary_holds_the_memory_s_content_words_held_more_than_once(writer, config):
    for text in EVENTS:
        append_event(writer, config, "ana", "s1", "user", text)
    con = connect_readonly(writer.path)
    vocab = Vocabulary.build(con, "ana", WordEmbedder(), max_share=1.0)
    # Stemmed as the full-text index stems, embedded as most often written.
    assert dict(zip(vocab.stems, vocab.surfaces, strict=True)) == {
        "camp": "camping", "new": "new", "paint": "painting", "tent": "tent",
        "watercolour": "watercolour"}
    # Once a word is in more than the share of events, it is left out.
    assert "camp" not in Vocabulary.build(con, "ana", WordEmbedder(), max_share=0.2).stems


def test_a_question_word_the_memory_never_says_reaches_the_events_of_its_neighbours(
        writer, config):
    ids = [append_event(writer, config, "ana", "s1", "user", text).id for text in EVENTS]
    con = connect_readonly(writer.path)
    embedder = WordEmbedder()
    vocab = Vocabulary.build(con, "ana", embedder, max_share=1.0)
    near = vocab.neighbours(con, embedder, "what are her hobbies?", 5, 0.5, defaultdict(list))
    assert set(near) == {"painting", "watercolour"}
    scores = neighbour_scores(con, "ana", near, defaultdict(list))
    assert set(scores) == {ids[0], ids[1]}
    # A word's own stem is not its neighbour: "tent" finds camping, not "tents".
    assert set(vocab.neighbours(con, embedder, "tents", 5, 0.5, defaultdict(list))) == {"camping"}
