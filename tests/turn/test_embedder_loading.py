"""The first message after a start does not wait for an embedder to load: recall goes by
keywords while the model loads in the background, and by meaning too once it is ready."""

from __future__ import annotations

import threading

import pytest

from app.learn.embed import embed_pending
from app.memory import upsert_fact
from app.model import embedders
from app.turn.chat import ChatService
from tests.embedding_fixtures import ConceptEmbedder

WAIT_S = 30.0  # bound on waiting for a background load that is already unblocked


class LoadingEmbedder(ConceptEmbedder):
    """An in-process model whose load lasts until the test says it is done."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = threading.Event()
        self.loads_started = 0
        self.questions: list[str] = []

    @property
    def ready(self) -> bool:
        return self.loaded.is_set()

    def start_loading(self) -> None:
        self.loads_started += 1

    def embed(self, texts):
        self.loaded.wait()  # what the real model makes a caller do while it loads
        self.questions.extend(texts)
        return super().embed(texts)


@pytest.fixture
def service(config, data_dir, fake_ollama, writer):
    writer.submit(lambda con: upsert_fact(con, "default", "fact", "pet",
                                          "a golden retriever puppy", source="user",
                                          worker="user"))
    embed_pending(writer, ConceptEmbedder())
    with ChatService(config.replace(llm={"url": fake_ollama.url})) as service:
        service.embedder = LoadingEmbedder()
        yield service


def vector_ranked(context) -> bool:
    return any("vector" in fact.get("ranks", {}) for fact in context.explain["facts"])


def test_the_first_message_is_answered_while_the_embedder_loads(service):
    outcome = service.start_turn("default", "s", "tell me about my dog").run()

    assert outcome.reply_event is not None and outcome.reply_event.content
    assert service.embedder.loads_started == 1 and service.embedder.questions == []
    assert not vector_ranked(outcome.context)


def test_recall_goes_by_meaning_once_the_embedder_is_ready(service):
    service.start_turn("default", "s", "tell me about my dog").run()
    service.embedder.loaded.set()

    context = service.build_context("default", "s", "tell me about my dog")

    assert service.embedder.questions == ["tell me about my dog"]
    assert vector_ranked(context)


def test_a_turn_goes_on_while_the_local_model_loads_then_it_is_ready(monkeypatch, service):
    release, loads = threading.Event(), []

    def slow_load(threads: int):
        with embedders._local_lock:  # held for the whole load, as the real one does
            loads.append(threads)
            release.wait()
            embedders._local_model = object()
            return embedders._local_model

    monkeypatch.setattr(embedders, "_local_model", None)
    monkeypatch.setattr(embedders, "_loading", None)
    monkeypatch.setattr(embedders, "_load_local_model", slow_load)
    service.embedder = embedders.LocalEmbedder(threads=1)
    assert service.warm_vectors().wait(WAIT_S)  # as hilo serve starts
    outcomes = []
    turn = threading.Thread(target=lambda: outcomes.append(
        service.start_turn("default", "s", "tell me about my dog").run()))

    turn.start()
    turn.join(WAIT_S)
    answered_while_loading = not turn.is_alive() and not service.embedder.ready
    release.set()
    embedders._loading.join(WAIT_S)
    turn.join(WAIT_S)

    assert answered_while_loading and outcomes[0].reply_event is not None
    assert service.embedder.ready and loads == [1]  # loaded once, for the start and the turn


def test_a_local_model_that_cannot_load_leaves_recall_to_keywords(monkeypatch, service):
    def missing(threads: int):
        raise embedders.EmbedderUnavailable("the local extra is not installed")

    monkeypatch.setattr(embedders, "_local_model", None)
    monkeypatch.setattr(embedders, "_loading", None)
    monkeypatch.setattr(embedders, "_load_local_model", missing)
    service.embedder = embedders.LocalEmbedder(threads=1)

    assert service.warm_vectors().wait(WAIT_S)
    embedders._loading.join(WAIT_S)
    outcome = service.start_turn("default", "s", "tell me about my dog").run()

    assert not service.embedder.ready and outcome.reply_event is not None


def test_until_the_start_has_made_the_embedder_questions_go_by_keywords(monkeypatch, config,
                                                                         data_dir, fake_ollama):
    # Making the embedder loads numpy (~0.15 s): hilo serve does it on a thread, and a
    # message that comes first is recalled by keywords instead of waiting for it.
    from app.turn import chat

    made, release = [], threading.Event()

    def slow_embedder(config, client):
        release.wait(WAIT_S)
        made.append(LoadingEmbedder())
        made[-1].loaded.set()
        return made[-1]

    monkeypatch.setattr(chat, "configured_embedder", slow_embedder)
    with ChatService(config.replace(llm={"url": fake_ollama.url})) as service:
        warmed = service.warm_vectors()
        outcome = service.start_turn("default", "s", "tell me about my dog").run()
        assert outcome.reply_event is not None and made == []
        release.set()
        assert warmed.wait(WAIT_S)
        assert service.query_embedder is made[0] and len(made) == 1
