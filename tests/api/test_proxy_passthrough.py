"""Everything Hilo does not own passes through unchanged: every field of a chat request
(a differential test against the model server itself), and every other endpoint of the
model server, status codes, streams and errors included."""

from __future__ import annotations

import copy
import json

import httpx
import ollama
import openai
import pytest

from tests.api.support import HiloServer
from tests.api.test_chat import MODEL, assistant, ollama_client, openai_client, user
from tests.api.test_proxy_tools import PIXEL, WEATHER_TOOL
from tests.fake_ollama import FakeOllama

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
OLLAMA_CALL = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
OPENAI_CALL = {"id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

# Every field of Ollama's /api/chat request, in the shapes clients send them.
OLLAMA_REQUESTS = {
    "plain": {"model": MODEL, "messages": [user("hi")], "stream": False},
    "streamed": {"model": MODEL, "messages": [user("hi")]},
    "system and history": {"model": MODEL, "stream": False, "messages": [
        {"role": "system", "content": "Be terse."}, user("a"), assistant("b"), user("c")]},
    "images": {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "what is it?", "images": [PIXEL]}]},
    "tools and a tool turn": {"model": MODEL, "stream": False, "tools": [WEATHER_TOOL], "messages": [
        user("weather?"), {"role": "assistant", "content": "", "tool_calls": [OLLAMA_CALL]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]},
    "format json": {"model": MODEL, "stream": False, "format": "json", "messages": [user("j")]},
    "format schema": {"model": MODEL, "stream": False, "format": SCHEMA, "messages": [user("j")]},
    "thinking": {"model": MODEL, "stream": False, "think": True, "messages": [
        user("q"), {"role": "assistant", "content": "a", "thinking": "hmm"}, user("q2")]},
    "think level": {"model": MODEL, "stream": False, "think": "high", "messages": [user("q")]},
    "every option": {"model": MODEL, "stream": False, "keep_alive": "10m", "messages": [user("o")],
                     "options": {"num_ctx": 8192, "num_predict": 64, "temperature": 0.2,
                                 "top_k": 20, "top_p": 0.9, "min_p": 0.05, "typical_p": 0.7,
                                 "repeat_last_n": 33, "repeat_penalty": 1.2,
                                 "presence_penalty": 0.1, "frequency_penalty": 0.3, "seed": 42,
                                 "stop": ["\n\n"], "num_keep": 5, "num_batch": 2, "num_gpu": 1,
                                 "main_gpu": 0, "use_mmap": True, "num_thread": 4}},
    "keep alive forever": {"model": MODEL, "stream": False, "keep_alive": -1, "messages": [user("k")]},
    "newer fields": {"model": MODEL, "stream": False, "messages": [user("n")], "truncate": True,
                     "shift": False, "logprobs": True, "top_logprobs": 2},
}

# Every field of OpenAI's chat completion request.
OPENAI_REQUESTS = {
    "plain": {"model": MODEL, "messages": [user("hi")]},
    "streamed with usage": {"model": MODEL, "messages": [user("hi")], "stream": True,
                            "stream_options": {"include_usage": True}},
    "developer and parts": {"model": MODEL, "messages": [
        {"role": "developer", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "name": "ana", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}",
                                                "detail": "low"}}]}]},
    "tools and a tool turn": {"model": MODEL, "tools": [WEATHER_TOOL], "parallel_tool_calls": False,
                              "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                              "messages": [user("weather?"),
                                           {"role": "assistant", "content": None,
                                            "tool_calls": [OPENAI_CALL], "refusal": None},
                                           {"role": "tool", "tool_call_id": "call_1",
                                            "content": "sunny"}]},
    "legacy functions": {"model": MODEL, "functions": [WEATHER_TOOL["function"]],
                         "function_call": "auto", "messages": [
                             user("w"), {"role": "assistant", "content": None, "function_call": {
                                 "name": "get_weather", "arguments": "{}"}},
                             {"role": "function", "name": "get_weather", "content": "sunny"}]},
    "json object": {"model": MODEL, "response_format": {"type": "json_object"},
                    "messages": [user("j")]},
    "json schema": {"model": MODEL, "messages": [user("j")], "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA, "strict": True}}},
    "sampling and the rest": {
        "model": MODEL, "messages": [user("s")], "temperature": 0.3, "top_p": 0.8, "n": 2,
        "stop": "END", "max_tokens": 50, "max_completion_tokens": 60, "presence_penalty": 0.5,
        "frequency_penalty": 0.4, "logit_bias": {"50256": -100}, "logprobs": True,
        "top_logprobs": 4, "seed": 9, "user": "ana", "metadata": {"k": "v"}, "store": False,
        "service_tier": "auto", "reasoning_effort": "minimal", "verbosity": "low",
        "modalities": ["text"], "prediction": {"type": "content", "content": "x"},
        "prompt_cache_key": "p", "safety_identifier": "s", "web_search_options": {},
        "audio": None},
}


def _through_hilo_differs_only_in_hilos_system_layers(direct: dict, relayed: dict) -> None:
    assert {k: v for k, v in relayed.items() if k != "messages"} == {
        k: v for k, v in direct.items() if k != "messages"}
    sent, got = direct["messages"], relayed["messages"]
    if sent and sent[0]["role"] in ("system", "developer"):
        opening, added = sent[0], got[0]
        assert {k: v for k, v in added.items() if k != "content"} == {
            k: v for k, v in opening.items() if k != "content"}
        if isinstance(opening["content"], str):
            assert added["content"].startswith(opening["content"])
        else:
            assert added["content"][:len(opening["content"])] == opening["content"]
        assert got[1:] == sent[1:]
    else:
        assert got[0]["role"] == "system" and got[1:] == sent


@pytest.mark.parametrize("path, name, body", [
    *[("/api/chat", name, body) for name, body in OLLAMA_REQUESTS.items()],
    *[("/v1/chat/completions", name, body) for name, body in OPENAI_REQUESTS.items()]],
    ids=[*(f"ollama-{n}" for n in OLLAMA_REQUESTS), *(f"openai-{n}" for n in OPENAI_REQUESTS)])
def test_a_request_through_hilo_differs_only_in_the_memory_it_adds(
        hilo: HiloServer, path: str, name: str, body: dict) -> None:
    fake = hilo.fake
    direct = httpx.post(f"{fake.url}{path}", json=copy.deepcopy(body), timeout=10)
    through = hilo.client().post(path, json=copy.deepcopy(body),
                                 headers={"X-Hilo-Session": f"diff-{name}"})

    assert through.status_code == direct.status_code == 200
    received_direct, received_through = fake.bodies(path)
    assert received_direct == body
    _through_hilo_differs_only_in_hilos_system_layers(received_direct, received_through)


def test_hilo_passes_the_reply_back_as_the_model_server_wrote_it(hilo: HiloServer) -> None:
    hilo.fake.script_chat("One two three.", "One two three.")
    body = {"model": MODEL, "messages": [user("count")], "stream": False}
    direct = httpx.post(f"{hilo.fake.url}/api/chat", json=body).json()
    through = hilo.client().post("/api/chat", json=body).json()

    timing = ("created_at", "total_duration", "prompt_eval_duration", "eval_duration",
              "prompt_eval_count")
    assert {k: v for k, v in through.items() if k not in timing} == {
        k: v for k, v in direct.items() if k not in timing}


# -- leniency ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
def test_a_json_body_without_content_type_is_read(hilo: HiloServer, path: str) -> None:
    body = json.dumps({"model": MODEL, "messages": [user("hi")], "stream": False}).encode()
    response = httpx.post(f"{hilo.url}{path}", content=body,
                          headers={"X-Hilo-Session": "s1"})  # no Content-Type, as LiteLLM sends

    assert response.status_code == 200
    assert hilo.events("s1") == [("user", "hi"), ("assistant", "ok: hi")]


@pytest.mark.parametrize("keep_alive, reason", [(None, "load"), (0, "unload")])
def test_preload_and_unload_are_relayed_and_store_nothing(hilo: HiloServer, keep_alive,
                                                          reason: str) -> None:
    body = {"model": MODEL, "messages": []}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    response = hilo.client().post("/api/chat", json=body)

    assert response.status_code == 200 and response.json()["done_reason"] == reason
    assert hilo.fake.bodies("/api/chat") == [body]
    assert hilo.client().get("/memory/sessions").json()["sessions"] == []


def test_a_request_with_only_a_system_message_is_relayed_and_stores_nothing(hilo: HiloServer) -> None:
    body = {"model": MODEL, "stream": False, "messages": [{"role": "system", "content": "x"}]}
    hilo.client().post("/api/chat", json=body)

    assert hilo.fake.bodies("/api/chat") == [body]
    assert hilo.client().get("/memory/sessions").json()["sessions"] == []


def test_a_request_without_model_gets_the_configured_one(hilo: HiloServer) -> None:
    hilo.client().post("/api/chat", json={"messages": [user("hi")], "stream": False})

    assert hilo.fake.bodies("/api/chat")[-1]["model"] == hilo.config.llm.chat_model


# -- every other endpoint ----------------------------------------------------------------------


def test_root_answers_like_ollama(hilo: HiloServer) -> None:
    assert httpx.get(hilo.url).text == "Ollama is running"
    assert httpx.head(hilo.url).status_code == 200


def test_generate_is_relayed_without_memory(hilo: HiloServer) -> None:
    hilo.client().put("/memory/profile/name", json={"value": "Ana"})
    client = ollama_client(hilo)
    whole = client.generate(model=MODEL, prompt="def add(a, b):", suffix="\n", system="code",
                            options={"temperature": 0}, raw=False, stream=False)
    pieces = list(client.generate(model=MODEL, prompt="once upon", stream=True))

    assert whole.response == "ok: def add(a, b):"
    assert "".join(p.response for p in pieces) == "ok: once upon" and pieces[-1].done
    assert hilo.fake.bodies("/api/generate")[0] == {
        "model": MODEL, "prompt": "def add(a, b):", "suffix": "\n", "system": "code",
        "raw": False, "stream": False, "options": {"temperature": 0}}
    assert hilo.client().get("/memory/sessions").json()["sessions"] == []


def test_embeddings_are_relayed(hilo: HiloServer) -> None:
    client = ollama_client(hilo)
    embedded = client.embed(model="nomic-embed-text", input=["a cat", "a dog"])
    legacy = client.embeddings(model="nomic-embed-text", prompt="a cat")
    vectors = openai_client(hilo).embeddings.create(model="nomic-embed-text", input=["a cat"])

    assert len(embedded.embeddings) == 2 and embedded.embeddings[0] == list(legacy.embedding)
    assert vectors.data[0].embedding == pytest.approx(embedded.embeddings[0])


def test_model_management_is_relayed_with_its_progress_and_statuses(hilo: HiloServer) -> None:
    client = ollama_client(hilo)

    progress = [p.status for p in client.pull("tinyllama:1b", stream=True)]
    assert progress[0] == "pulling manifest" and progress[-1] == "success"
    assert client.push("tinyllama:1b").status == "success"
    assert client.copy("tinyllama:1b", "tiny-copy:1b").status == "success"
    assert client.create("tiny-made:1b", from_="tinyllama:1b").status == "success"
    assert {"tinyllama:1b", "tiny-copy:1b", "tiny-made:1b"} <= {m.model for m in client.list().models}
    assert client.delete("tiny-copy:1b").status == "success"
    assert [m.model for m in client.ps().models] == ["gemma3:4b"]

    for call in (lambda: client.delete("missing:1b"), lambda: client.pull("missing:1b")):
        with pytest.raises(ollama.ResponseError) as caught:
            call()
        assert caught.value.status_code in (404, 500)
    assert hilo.fake.bodies("/api/delete")[-1] == {"model": "missing:1b"}


def test_blobs_are_relayed(hilo: HiloServer) -> None:
    digest = "sha256:" + "0" * 64
    assert httpx.head(f"{hilo.url}/api/blobs/{digest}").status_code == 404
    assert httpx.post(f"{hilo.url}/api/blobs/{digest}", content=b"GGUF...").status_code == 201
    assert httpx.head(f"{hilo.url}/api/blobs/{digest}").status_code == 200


def test_version_tags_and_show_are_relayed(hilo: HiloServer) -> None:
    assert httpx.get(f"{hilo.url}/api/version").json() == {"version": "0.0.0-fake"}
    show = ollama_client(hilo).show(MODEL)
    assert show.modelinfo["gemma3.context_length"] == 8192


def test_openai_models_completions_and_errors_are_relayed(hilo: HiloServer) -> None:
    client = openai_client(hilo)

    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("missing:1b")
    assert client.completions.create(model=MODEL, prompt="2 + 2 =").choices[0].text == "ok: 2 + 2 ="
    streamed = list(client.completions.create(model=MODEL, prompt="hi", stream=True))
    assert "".join(c.choices[0].text for c in streamed) == "ok: hi"


def test_the_model_server_down_is_a_clear_503_on_every_relay(hilo: HiloServer,
                                                             fake_ollama: FakeOllama) -> None:
    fake_ollama.stop()
    for method, path in (("GET", "/"), ("POST", "/api/generate"), ("GET", "/v1/models")):
        response = hilo.client().request(method, path, json={"model": MODEL})
        assert response.status_code == 503
        assert "not reachable" in response.text
