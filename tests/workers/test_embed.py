"""The embed job on the queue: a turn's events and facts get vectors; failures retry."""

from __future__ import annotations

from tests.fake_ollama import Fault
from tests.workers.support import add_turn, drain, handoff, query
from workers.queue import failed_jobs


def test_a_turn_leaves_vectors_for_its_events_and_facts(cfg, writer, fake_ollama):
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha7"))
    drain()
    rows = query(cfg, "SELECT owner_kind, model, dim, error FROM embeddings ORDER BY owner_kind")
    kinds = [r[0] for r in rows]
    assert kinds.count("event") == 2 and kinds.count("fact") == 1
    assert {(r[1], r[2], r[3]) for r in rows} == {("nomic-embed-text", 16, None)}
    assert fake_ollama.bodies("/api/embed")


def test_embedding_errors_are_retried_then_recorded_on_the_owner(cfg, writer, fake_ollama):
    fake_ollama.script_embed(*[Fault.http_500("embedder down")] * 20)
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha8"))
    drain()
    errors = query(cfg, "SELECT error FROM embeddings WHERE vector IS NULL")
    assert errors and all("embedder down" in e[0] for e in errors)
    assert any(f.error.startswith("embed what is new in memory, for ana: gave up")
               for f in failed_jobs())
