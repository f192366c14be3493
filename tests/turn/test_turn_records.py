"""Each chat turn leaves a record for the turn inspector: the prompt by layer with token
counts, what was recalled and why, and how much of the prompt the model server's cache
already held — and no text of its own, so a secret or a forgotten fact has no copy there."""

from __future__ import annotations

import json

import pytest

from app.memory import remember_fact
from app.memory.forget import forget_fact
from app.model.errors import ModelUnreachable
from app.turn.chat import ChatService
from app.turn.records import PROMPT_PARTS, list_turn_records
from tests.fake_ollama import CpuSpeed, FakeOllama, unused_loopback_url

SECRET = "sk-proj-" + "Zq3vN8xLw2Rt5Yp7Kd9Fh4Jm6Bc1"  # the shape of an OpenAI key


@pytest.fixture
def cpu_fake():
    """A model server with a prompt cache (instant, but it reports what it reused)."""
    fake = FakeOllama(cpu=CpuSpeed(1e9, 1e9)).start()
    yield fake
    fake.stop()


def records(service: ChatService, user: str = "ana"):
    service.writer.submit(lambda con: None)  # the records queued before it are committed
    return list_turn_records(service.reader(), user)


def test_a_turn_is_recorded_with_its_prompt_by_layer(config, data_dir, cpu_fake):
    cfg = config.replace(llm={"url": cpu_fake.url}, embedder={"kind": "none"})
    with ChatService(cfg) as service:
        service.edit(lambda con: remember_fact(con, "ana", "fact", "editor", "Ana uses helix"))
        outcome = service.start_turn("ana", "s1", "which editor do I use?").run()
        [record] = records(service)
    assert record.event_id == outcome.user_event.id
    assert record.reply_event_id == outcome.reply_event.id
    assert [layer["name"] for layer in record.record["layers"]] == list(PROMPT_PARTS)
    sizes = {layer["name"]: layer["tokens"] for layer in record.record["layers"]}
    assert sizes["facts"] > 0 and sizes["message"] > 0 and sizes["instructions"] > 0
    assert abs(sum(sizes.values()) - record.tokens) <= 8  # the estimate, part by part
    [fact] = [r for r in record.record["recalled"] if r["kind"] == "fact"]
    assert fact["ranks"]["bm25"] == 1 and fact["where"] == "layers"
    assert record.prompt_tokens and record.cached_tokens == 0


def test_the_next_turn_of_a_stretch_finds_its_prompt_in_the_servers_cache(
        config, data_dir, cpu_fake):
    cfg = config.replace(llm={"url": cpu_fake.url}, embedder={"kind": "none"})
    with ChatService(cfg) as service:
        service.start_turn("ana", "s1", "hello, I am planning a trip to Lisbon").run()
        service.start_turn("ana", "s1", "what should I pack for it?").run()
        second, first = records(service)
    assert second.record["stretch"]["turn"] == "continued"
    assert second.cached_tokens > 0.5 * second.prompt_tokens
    assert second.record["expected_cached"] > 0.5 * second.tokens
    assert first.cached_share == 0 and second.cached_share > 0.5


def test_a_record_holds_no_text_of_the_turn(config, data_dir, fake_ollama):
    cfg = config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"})
    with ChatService(cfg) as service:
        service.start_turn("ana", "s1", f"my key is {SECRET}, keep it safe").run()
        service.writer.submit(lambda con: None)
        stored = [row[0] for row in service.reader().execute(
            "SELECT record_json FROM turn_records")]
    assert stored and "keep it safe" not in stored[0] and "sk-proj" not in stored[0]
    json.loads(stored[0])


def test_a_turn_the_model_could_not_answer_is_recorded_with_the_error(config, data_dir):
    down = config.replace(llm={"url": unused_loopback_url()}, embedder={"kind": "none"})
    with ChatService(down) as service:
        with pytest.raises(ModelUnreachable):
            service.start_turn("ana", "s1", "hello")
        [record] = records(service)
    assert record.reply_event_id is None and "not reachable" in record.error


def test_a_fact_forgotten_later_is_not_in_an_earlier_turns_record(config, data_dir, fake_ollama):
    cfg = config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"})
    with ChatService(cfg) as service:
        edited = service.edit(lambda con: remember_fact(con, "ana", "fact", "pet",
                                                        "Ana has a parrot named Kiwi"))
        service.start_turn("ana", "s1", "what is my parrot called?").run()
        service.edit(lambda con: forget_fact(con, "ana", edited.fact.id))
        service.writer.submit(lambda con: None)
        stored = "".join(row[0] for row in service.reader().execute(
            "SELECT record_json FROM turn_records"))
    assert f'"id":{edited.fact.id}' in stored and "Kiwi" not in stored


def test_another_users_turns_are_not_listed(config, data_dir, fake_ollama):
    cfg = config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"})
    with ChatService(cfg) as service:
        service.start_turn("ana", "s1", "hello").run()
        assert records(service, "bo") == [] and len(records(service, "ana")) == 1
