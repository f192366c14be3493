"""`hilo serve`'s chat with Hilo's tools ([tools] http = true), through the real `ollama`
and `openai` packages: a client that sends no tools of its own gets Hilo's memory and
task tools (never the terminal), sees only the answer, and the calls are on record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.config import Config
from app.memory import list_facts
from tests.api.support import HiloServer, serve
from tests.api.test_chat import MODEL, assistant, ollama_client, openai_client, user
from tests.api.test_proxy_tools import WEATHER_TOOL, stored
from tests.fake_ollama import FakeOllama, Reply
from tests.turn.test_loop import MEMORY_AND_TASKS, tool_names
from tests.workers.support import read_only

REMEMBER = Reply(tool_calls=[{"name": "remember", "arguments": {
    "key": "editor", "value": "Uses Helix", "category": "preference"}}])


@pytest.fixture
def server(config: Config, data_dir, fake_ollama: FakeOllama) -> Iterator[HiloServer]:
    yield from serve(config.replace(tools={"http": True}, embedder={"kind": "none"}),
                     fake_ollama)


@pytest.mark.parametrize("stream", [False, True])
def test_an_ollama_client_without_tools_gets_hilos_and_sees_only_the_answer(server, stream):
    server.fake.script_chat(REMEMBER, "I will remember that you use Helix.")
    reply = ollama_client(server, f"o-{stream}").chat(
        model=MODEL, messages=[user("I use Helix")], stream=stream)
    parts = list(reply) if stream else [reply]

    assert "".join(p.message.content for p in parts) == "I will remember that you use Helix."
    assert not any(p.message.tool_calls for p in parts)
    first, second = server.fake.bodies("/api/chat")
    assert tool_names(first) == MEMORY_AND_TASKS  # never the terminal
    assert second["messages"][-1]["role"] == "tool"
    assert [(f.key, f.value) for f in list_facts(read_only(server.config), "default")] == [
        ("editor", "Uses Helix")]
    assert [e["role"] for e in stored(server, f"o-{stream}")] == [
        "user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_client_without_tools_gets_hilos_and_sees_only_the_answer(server, stream):
    server.fake.script_chat(REMEMBER, "Noted.")
    client = openai_client(server, f"v-{stream}")
    created = client.chat.completions.create(model=MODEL, messages=[user("I use Helix")],
                                             stream=stream)
    if stream:
        chunks = list(created)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    else:
        text = created.choices[0].message.content
        assert not created.choices[0].message.tool_calls
    assert text == "Noted."
    assert tool_names(server.fake.bodies("/v1/chat/completions")[0]) == MEMORY_AND_TASKS


def test_the_clients_next_request_continues_the_session_storing_only_what_is_new(server):
    server.fake.script_chat(REMEMBER, "Noted.", "Helix it is.")
    client = openai_client(server)
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[user("I use Helix")])
    session = first.headers["X-Hilo-Session"]
    second = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[user("I use Helix"), assistant("Noted."), user("which editor?")])
    assert second.headers["X-Hilo-Session"] == session
    assert [(e["role"], e["content"]) for e in stored(server, session)][-3:] == [
        ("assistant", "Noted."), ("user", "which editor?"), ("assistant", "Helix it is.")]


def test_a_client_with_its_own_tools_gets_them_alone(server):
    server.fake.script_chat(Reply(tool_calls=[{"name": "get_weather",
                                               "arguments": {"city": "Paris"}}]))
    reply = ollama_client(server, "own").chat(model=MODEL, messages=[user("Weather?")],
                                              tools=[WEATHER_TOOL], stream=False)
    assert reply.message.tool_calls[0].function.name == "get_weather"
    [body] = server.fake.bodies("/api/chat")
    assert body["tools"] == [WEATHER_TOOL]


def test_tools_are_off_over_http_unless_enabled(config, data_dir, fake_ollama):
    for hilo in serve(config, fake_ollama):
        ollama_client(hilo, "off").chat(model=MODEL, messages=[user("hi")], stream=False)
    assert not fake_ollama.bodies("/api/chat")[0].get("tools")  # the ollama package sends []
