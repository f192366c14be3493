"""With an OpenAI-compatible model server ([llm] provider "openai": llama.cpp, vLLM, LM
Studio), OpenAI clients are relayed as they are, and Ollama clients are translated
faithfully both ways: tools and tool calls, images, format, options, thinking."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.api.support import HiloServer, serve
from tests.api.test_chat import MODEL, ollama_client, openai_client, user
from tests.api.test_proxy_tools import CALL_PARIS, PIXEL, WEATHER_TOOL, stored
from tests.fake_ollama import FakeOllama, Reply


@pytest.fixture
def hilo(config, data_dir, fake_ollama: FakeOllama):
    """Hilo in front of the fake's OpenAI-compatible /v1, as if it were llama.cpp."""
    yield from serve(config.replace(llm={"provider": "openai", "url": f"{fake_ollama.url}/v1"}),
                     fake_ollama)


def upstream(server: HiloServer) -> dict:
    return server.fake.bodies("/v1/chat/completions")[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_an_ollama_client_chats_through_an_openai_server(hilo: HiloServer, stream: bool) -> None:
    hilo.fake.script_chat("Hello from llama.cpp.")
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("hi")], stream=stream)
    parts = list(reply) if stream else [reply]

    assert "".join(p.message.content for p in parts) == "Hello from llama.cpp."
    assert parts[-1].done and parts[-1].done_reason == "stop" and parts[-1].eval_count > 0
    assert upstream(hilo)["stream"] is stream
    assert hilo.events("s1") == [("user", "hi"), ("assistant", "Hello from llama.cpp.")]


@pytest.mark.parametrize("stream", [False, True])
def test_an_ollama_tool_round_trip_through_an_openai_server(hilo: HiloServer, stream: bool) -> None:
    hilo.fake.script_chat(CALL_PARIS, "Sunny in Paris.")
    client = ollama_client(hilo, f"s-{stream}")
    messages = [user("weather in Paris?")]
    first = client.chat(model=MODEL, messages=messages, tools=[WEATHER_TOOL], stream=stream)
    calls = [c for p in (list(first) if stream else [first]) for c in p.message.tool_calls or []]

    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"})]
    assert upstream(hilo)["tools"] == [WEATHER_TOOL]

    messages += [{"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
                 {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]
    second = client.chat(model=MODEL, messages=messages, tools=[WEATHER_TOOL], stream=stream)
    text = "".join(p.message.content for p in second) if stream else second.message.content

    assert text == "Sunny in Paris."
    call, result = upstream(hilo)["messages"][-2:]
    assert call["tool_calls"][0]["function"] == {"name": "get_weather",
                                                 "arguments": json.dumps({"city": "Paris"})}
    assert result == {"role": "tool", "content": "sunny", "tool_call_id": call["tool_calls"][0]["id"]}
    assert [e["role"] for e in stored(hilo, f"s-{stream}")] == ["user", "assistant", "tool",
                                                                 "assistant"]


def test_ollama_format_images_and_options_are_translated(hilo: HiloServer) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    reply = ollama_client(hilo, "s1").chat(
        model=MODEL, format=schema, think="low",
        options={"temperature": 0.1, "num_predict": 20, "seed": 3, "num_ctx": 8192, "top_k": 5},
        messages=[{"role": "user", "content": "name it", "images": [PIXEL]}])

    body = upstream(hilo)
    assert json.loads(reply.message.content) == {"name": "x"}
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "response", "schema": schema}}
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "name it"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}]
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.1, 20, 3)
    assert body["reasoning_effort"] == "low"
    assert "top_k" not in body and "num_ctx" not in body  # no OpenAI equivalent


def test_thinking_is_translated(hilo: HiloServer) -> None:
    hilo.fake.script_chat(Reply(text="42.", thinking="six sevens"))
    parts = list(ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("6x7")], stream=True))

    assert "".join(p.message.thinking or "" for p in parts) == "six sevens"
    assert "".join(p.message.content for p in parts) == "42."


def test_an_openai_client_is_relayed_as_it_is(hilo: HiloServer) -> None:
    completion = openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("hi")], logprobs=True, n=1)

    assert completion.choices[0].message.content == "ok: hi"
    assert upstream(hilo)["logprobs"] is True
    assert [m.id for m in openai_client(hilo).models.list().data][0] == MODEL


def test_ollamas_own_endpoints_answer_from_what_the_server_offers(hilo: HiloServer) -> None:
    assert httpx.get(hilo.url).text == "Ollama is running"
    assert MODEL in [m.model for m in ollama_client(hilo).list().models]
    response = httpx.post(f"{hilo.url}/api/pull", json={"model": MODEL})
    assert response.status_code == 501
    assert "speaks the OpenAI API" in response.json()["error"]
