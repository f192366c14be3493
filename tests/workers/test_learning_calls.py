"""Learning survives a capped client and a server that refuses a JSON format: through a
real `hilo serve`, the worker's learning calls continue the chat without the client's
reply limits, in a format the server takes, and what the person said is learned."""

from __future__ import annotations

import httpx

from app.learn.distill import distill_schema
from app.learn.model_output import output_limit
from tests.api.support import HiloServer
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.workers.support import (
    drain,
    query,
    scripted_queue,
)

IDLE = 0.3  # [queue] chat_idle_seconds in these tests
CAPS = {"num_predict": 24, "stop": ["\nUser:"]}


def converse(server: HiloServer, fake: FakeOllama, api: str, **caps) -> None:
    history: list[dict] = []
    with httpx.Client(timeout=30) as client:
        for text in ("Remember code alpha1, please", "And code alpha2 as well"):
            history.append({"role": "user", "content": text})
            if api == "ollama":
                reply = client.post(f"{server.url}/api/chat", json={
                    "model": "gemma3:4b", "messages": history, "stream": False,
                    "options": {"num_ctx": 8192, **caps}}).json()["message"]
            else:
                reply = client.post(f"{server.url}/v1/chat/completions", json={
                    "model": "gemma3:4b", "messages": history, **caps,
                }).json()["choices"][0]["message"]
            history.append({"role": "assistant", "content": reply["content"]})
        drain()  # the conversation is quiet: its turns are learned


def learning_requests(fake: FakeOllama) -> list[dict]:
    return [r.body for r in fake.requests if r.method == "POST" and isinstance(r.body, dict)
            and (r.body.get("format") or r.body.get("response_format"))]


def test_a_capped_clients_turns_are_learned_and_no_learning_call_carries_its_caps(
        config, data_dir, bound_queue):
    with FakeOllama(cpu=CpuSpeed(20_000, 20_000)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": IDLE}), fake, bound_queue)
        fake.honour_limits = True  # as every real server does: 24 tokens cut the JSON off
        server = HiloServer(cfg, fake).start()
        try:
            converse(server, fake, "ollama", **CAPS)
        finally:
            server.stop()
        [asked] = learning_requests(fake)
    # Hilo's own output limit for two messages' facts, never the client's 24.
    limit = output_limit(distill_schema(2))
    assert asked["options"] == {"num_ctx": 8192, "temperature": 0.1, "num_predict": limit}
    assert sorted(query(cfg, "SELECT value FROM facts")) == [("alpha1",), ("alpha2",)]


def test_a_server_that_refuses_json_schema_is_asked_for_a_json_object_from_then_on(
        config, data_dir, bound_queue):
    with FakeOllama(cpu=CpuSpeed(20_000, 20_000)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": IDLE}), fake, bound_queue)
        cfg = cfg.replace(llm={"provider": "openai"})
        bound_queue(cfg)
        fake.engine = "llama-cpp-python"
        fake.honour_limits = True
        server = HiloServer(cfg, fake).start()
        try:
            converse(server, fake, "openai", max_tokens=24)
        finally:
            server.stop()
        asked = learning_requests(fake)
    assert [b["response_format"]["type"] for b in asked] == ["json_schema", "json_object"]
    assert all(b["max_tokens"] == output_limit(distill_schema(2)) for b in asked)  # not 24
    assert query(cfg, "SELECT mode FROM model_json_modes") == [("object",)]
