"""Embedders, stored vectors, the embed job and the re-embedding backfill."""

from __future__ import annotations

import numpy as np
import pytest

from app.config import Config
from app.db import connect_readonly
from app.events import append_event
from app.learn.embed import EmbedFailed, embed_pending, reembed
from app.memory import upsert_fact
from app.model.client import ModelClient
from app.model.embedders import LOCAL_DIM, OllamaEmbedder, make_embedder
from app.recall.query import make_query
from app.recall.streams import vector_stream
from app.recall.vectors import count_pending, decode_vector, encode_vector, pending_owners
from tests.embedding_fixtures import ConceptEmbedder


def rows(writer, sql, *params):
    con = connect_readonly(writer.path)
    try:
        return list(con.execute(sql, params))
    finally:
        con.close()


def read(writer):
    return connect_readonly(writer.path)


class FailingEmbedder(ConceptEmbedder):
    """Fails on any text containing `poison`; after `interrupt_after` calls, interrupts."""

    def __init__(self, model="concept-v1", dim=24, interrupt_after: int | None = None):
        super().__init__(model, dim)
        self.calls = 0
        self.interrupt_after = interrupt_after

    def embed(self, texts):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt  # the process stopped mid-backfill
        if any("poison" in t for t in texts):
            raise RuntimeError("the model rejected this text")
        return super().embed(texts)


@pytest.mark.slow
def test_local_embedder_makes_384_dimensional_vectors_from_shipped_weights_offline(local_embedder):
    vectors = local_embedder.embed(["The cat sat on the mat.", "A feline rested on a rug."])
    assert vectors.shape == (2, LOCAL_DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert float(vectors[0] @ vectors[1]) > 0.5  # a real sentence model, not noise


def test_config_chooses_the_embedder(config):
    assert make_embedder(config.replace(embedder={"kind": "none"})) is None
    assert make_embedder(config.replace(embedder={"kind": "local"})).model == "all-MiniLM-L6-v2"
    assert make_embedder(config.replace(embedder={"kind": "ollama"})).model == "nomic-embed-text"


def test_ollama_embedder_sends_batches_to_api_embed(fake_ollama):
    client = ModelClient.from_config(Config().replace(llm={"url": fake_ollama.url}))
    embedder = OllamaEmbedder(client, "nomic-embed-text", batch_size=2)
    vectors = embedder.embed([f"text {i}" for i in range(5)])
    assert vectors.shape == (5, fake_ollama.embedding_dim) and vectors.dtype == np.float32
    assert [r.path for r in fake_ollama.requests if "embed" in r.path] == ["/api/embed"] * 3


def test_vectors_are_stored_as_float32_with_model_and_dim(writer, config):
    event = append_event(writer, config, "ana", "s1", "user", "I adopted a puppy")
    assert embed_pending(writer, ConceptEmbedder()) == 1
    [(model, dim, blob, error)] = rows(
        writer, "SELECT model, dim, vector, error FROM embeddings WHERE owner_id = ?", event.id)
    assert (model, dim, error) == ("concept-v1", 24, None)
    assert len(blob) == 24 * 4
    assert np.allclose(decode_vector(blob), ConceptEmbedder().embed(["I adopted a puppy"])[0])
    assert decode_vector(encode_vector([1.5, -2.0])).tolist() == [1.5, -2.0]


def test_embed_job_embeds_new_events_facts_and_cards_once(writer, config):
    append_event(writer, config, "ana", "s1", "user", "first message")
    writer.submit(lambda con: upsert_fact(con, "ana", "preference", "editor", "helix",
                                          source="user", worker="user"))
    writer.submit(lambda con: con.execute(
        "INSERT INTO context_cards (user_id, session_id, summary, created_at, updated_at) "
        "VALUES ('ana', 's1', 'talked about editors', '2026-01-01T00:00:00Z', "
        "'2026-01-01T00:00:00Z')"))
    assert embed_pending(writer, ConceptEmbedder()) == 3
    assert embed_pending(writer, ConceptEmbedder()) == 0
    kinds = {r[0] for r in rows(writer, "SELECT owner_kind FROM embeddings")}
    assert kinds == {"event", "fact", "card"}


def test_embed_failure_is_recorded_per_owner_and_retried(writer, config):
    good = append_event(writer, config, "ana", "s1", "user", "a fine message")
    bad = append_event(writer, config, "ana", "s1", "user", "poison pill")
    with pytest.raises(EmbedFailed, match="1 of 2"):
        embed_pending(writer, FailingEmbedder())
    stored = dict(rows(writer, "SELECT owner_id, coalesce(error, 'ok') FROM embeddings"))
    assert stored[good.id] == "ok"
    assert "rejected" in stored[bad.id]
    # The retry (the queue's, with backoff) picks up only the failed owner.
    writer.submit(lambda con: con.execute("UPDATE events SET content = 'cured' WHERE id = ?", (bad.id,)))
    assert embed_pending(writer, FailingEmbedder()) == 1
    assert rows(writer, "SELECT count(*) FROM embeddings WHERE error IS NOT NULL") == [(0,)]


def test_count_pending_counts_what_pending_owners_would_return(writer, config):
    for text in ("first", "second", "poison"):
        append_event(writer, config, "ana", "s1", "user", text)
    append_event(writer, config, "bob", "s1", "user", "other user")
    writer.submit(lambda con: upsert_fact(con, "ana", "preference", "editor", "helix",
                                          source="user", worker="user"))
    writer.submit(lambda con: upsert_fact(con, "ana", "preference", "editor", "vim",
                                          source="user", worker="user"))  # supersedes helix
    with pytest.raises(EmbedFailed):
        embed_pending(writer, FailingEmbedder(), user_id="ana")
    con = read(writer)
    try:
        for user in (None, "ana", "bob"):
            for model in ("concept-v1", "other"):
                expected = len(pending_owners(con, model, user_id=user, limit=10**6))
                assert count_pending(con, model, user_id=user) == expected
        # ana's current fact and events have vectors but "poison": an error row still waits.
        assert count_pending(con, "concept-v1", user_id="ana") == 1
        assert count_pending(con, "concept-v1") == 2  # and bob's event
        assert count_pending(con, "other") == 5  # every current fact and event, both users
    finally:
        con.close()


def test_switching_model_never_compares_vectors_of_different_models(writer, config, recall):
    old, new = ConceptEmbedder("old-model", 24), ConceptEmbedder("new-model", 16)
    puppy = append_event(writer, config, "ana", "s1", "user", "I adopted a puppy")
    embed_pending(writer, old)
    # Mid-switch: the new model has vectors for nothing yet, and a new event arrives.
    car = append_event(writer, config, "ana", "s1", "user", "I drove my car")
    embed_pending(writer, new, limit=1)  # only the first pending owner (the puppy)
    con = read(writer)
    try:
        for model, expected in ((old, [puppy.id]), (new, [puppy.id])):
            query = make_query("ana", "my dog", model, recall=recall)
            assert vector_stream(con, query, "event", 10) == expected
        embed_pending(writer, new)
        query = make_query("ana", "my dog", new, recall=recall)
        assert vector_stream(con, query, "event", 10)[0] == puppy.id
        assert set(vector_stream(con, query, "event", 10)) == {puppy.id, car.id}
        # The old model's index never saw the car: no vector of another model leaked in.
        old_query = make_query("ana", "my dog", old, recall=recall)
        assert vector_stream(con, old_query, "event", 10) == [puppy.id]
    finally:
        con.close()


def test_reembed_backfills_with_progress_and_resumes_after_an_interruption(writer, config):
    for i in range(10):
        append_event(writer, config, "ana", "s1", "user", f"message number {i} about my dog")
    embed_pending(writer, ConceptEmbedder("old-model"))
    progress: list[tuple[int, int]] = []

    interrupted = FailingEmbedder("new-model", interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        reembed(config, lambda done, total: progress.append((done, total)),
                embedder=interrupted, writer=writer, batch_size=3)
    assert progress == [(0, 10), (3, 10), (6, 10)]
    counts = rows(writer, "SELECT model, count(*) FROM embeddings GROUP BY model ORDER BY model")
    assert counts == [("new-model", 6), ("old-model", 10)]  # both kept: not yet complete

    progress.clear()
    result = reembed(config, lambda done, total: progress.append((done, total)),
                     embedder=ConceptEmbedder("new-model"), writer=writer, batch_size=3)
    assert (result.embedded, result.failed, result.remaining, result.removed) == (4, 0, 0, 10)
    assert progress[0] == (0, 4) and progress[-1] == (4, 4)
    assert rows(writer, "SELECT model, count(*) FROM embeddings GROUP BY model") == [("new-model", 10)]


def test_reembed_keeps_the_old_model_while_some_owners_fail(writer, config):
    append_event(writer, config, "ana", "s1", "user", "fine")
    append_event(writer, config, "ana", "s1", "user", "poison")
    embed_pending(writer, ConceptEmbedder("old-model"))
    result = reembed(config, None, embedder=FailingEmbedder("new-model"), writer=writer)
    assert (result.embedded, result.failed, result.remaining, result.removed) == (1, 1, 1, 0)
    assert rows(writer, "SELECT count(*) FROM embeddings WHERE model = 'old-model'") == [(2,)]


class RecordingEmbedder:
    """Remembers every text it is asked to embed (as a model server would see it)."""

    model = "recording-v1"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        self.texts += texts
        return [np.ones(8, dtype=np.float32) for _ in texts]


def test_a_secret_in_a_question_never_reaches_the_embedder_when_its_words_are_common(
        writer, config, recall):
    # The words of a PGP block's first line said all the time: reading the question
    # leaves such capitalised common words out, which used to leave a key's body that
    # no longer looked like one, and was sent to the embedder as it was.
    for i in range(60):
        append_event(writer, config, "ana", "s1", "user", f"begin pgp private key block {i}")
    body = ["".join(chr(65 + (i * 7 + n) % 26) for i in range(64)) + "+/9" for n in range(4)]
    question = ("keep this for me\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n" + "\n".join(body)
                + "\n-----END PGP PRIVATE KEY BLOCK-----")
    embedder = RecordingEmbedder()
    con = read(writer)
    try:
        query = make_query("ana", question, embedder, recall=recall, con=con, ahead=True)
        query.embedding.result(timeout=10)
        make_query("ana", question, embedder, recall=recall, con=con)
    finally:
        con.close()

    assert len(embedder.texts) == 2
    assert not any(line in text for text in embedder.texts for line in body), embedder.texts
