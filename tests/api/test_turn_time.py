"""Hilo's own time in a chat turn through `hilo serve`: what can run at once does, and what
can wait for the reply's first piece does — without changing what is recalled, sent or
stored (tests/bench/serve_turn.py measures it)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.api.conversation import KnownKeys
from app.events import prepare_event
from tests.api.support import HiloServer
from tests.api.test_chat import MODEL, ollama_client, user

# Bound on waiting for something the code under test is expected to have started already.
WAIT_S = 5.0
QUESTION = "Where did we leave the retry policy for the payment webhooks?"


class Recording:
    """The service's embedder, saying when it is asked for the question."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked = threading.Event()
        self.questions: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts):
        if any("retry policy" in t for t in texts):
            self.questions.extend(texts)
            self.asked.set()
        return self.inner.embed(texts)


@pytest.fixture
def embedder(hilo: HiloServer, monkeypatch: pytest.MonkeyPatch) -> Recording:
    """The question's embedder, and the store of the user's message held until the
    embedder is asked for the question (or WAIT_S passed): `stored_after_asked` says
    which it was, for each message stored."""
    service = hilo.app.state.service
    recording = Recording(service.embedder)
    monkeypatch.setattr(service, "embedder", recording)
    store = service.append_all
    recording.stored_after_asked = []

    def append_all(user_id, session_id, messages):
        if any(role == "user" for role, _, _ in messages):
            recording.stored_after_asked.append(recording.asked.wait(WAIT_S))
        return store(user_id, session_id, messages)

    monkeypatch.setattr(service, "append_all", append_all)
    return recording


def test_the_question_is_embedded_while_its_message_is_stored(hilo, embedder):
    hilo.fake.script_chat("Five attempts with backoff, then the dead-letter table.")
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user(QUESTION)])

    assert reply.message.content == "Five attempts with backoff, then the dead-letter table."
    # The embedder was asked before the message was stored, not after it.
    assert embedder.stored_after_asked == [True]
    # Once: the turn's recall took that vector rather than asking again.
    assert len(embedder.questions) == 1
    assert hilo.events("s1") == [("user", QUESTION), (
        "assistant", "Five attempts with backoff, then the dead-letter table.")]


def test_a_resent_history_is_matched_as_it_would_be_stored(config):
    """The stored form of resent messages is remembered, within a bound, and is the form
    storing them gives (secrets redacted)."""
    known = KnownKeys(max_chars=200)
    said = {"role": "user", "content": "my token is ghp_" + "a1B2" * 9}
    key = known.key(config, "default", said)

    assert key == known.key(config, "default", dict(said))
    assert key[1] == prepare_event(config, "default", "-", "user", said["content"]).content
    assert "ghp_" not in key[1]
    for n in range(20):
        known.key(config, "default", {"role": "assistant", "content": f"reply number {n}"})
    assert known._chars <= 200
