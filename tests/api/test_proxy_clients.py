"""The recipes of docs/clients.md, driven against `hilo serve`: LangChain (ChatOllama, ChatOpenAI),
LiteLLM (ollama_chat/ and openai/) and `llm` with llm-ollama, each keeping tools and
structured output and gaining memory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.api.support import HiloServer
from tests.api.test_chat import MODEL
from tests.api.test_proxy_tools import CALL_PARIS, stored
from tests.fake_ollama import Reply

# LiteLLM fetches its model price list from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytestmark = pytest.mark.slow  # each client package drives a real hilo serve


class City(BaseModel):
    name: str
    population: int


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def chat_ollama(server: HiloServer, session: str) -> ChatOllama:
    return ChatOllama(model=MODEL, base_url=server.url,
                      client_kwargs={"headers": {"X-Hilo-Session": session}})


def chat_openai(server: HiloServer, session: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=f"{server.url}/v1", api_key="unused",
                      default_headers={"X-Hilo-Session": session}, max_retries=0)


@pytest.mark.parametrize("make", [chat_ollama, chat_openai], ids=["ChatOllama", "ChatOpenAI"])
def test_langchain_bind_tools_round_trip(hilo: HiloServer, make) -> None:
    hilo.fake.script_chat(CALL_PARIS, "Sunny in Paris.")
    model = make(hilo, "lc").bind_tools([get_weather])
    messages = [HumanMessage("What is the weather in Paris?")]

    called = model.invoke(messages)
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("get_weather", {"city": "Paris"})]
    messages += [called, ToolMessage(get_weather.invoke(called.tool_calls[0]["args"]),
                                     tool_call_id=called.tool_calls[0]["id"])]
    answer = model.invoke(messages)

    assert answer.content == "Sunny in Paris."
    assert [e["role"] for e in stored(hilo, "lc")] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("make", [chat_ollama, chat_openai], ids=["ChatOllama", "ChatOpenAI"])
def test_langchain_with_structured_output(hilo: HiloServer, make) -> None:
    city = make(hilo, "lc").with_structured_output(City).invoke("The biggest city in Spain?")

    assert city == City(name="x", population=0)


@pytest.mark.parametrize("stream", [False, True])
def test_langchain_streams_and_remembers(hilo: HiloServer, stream: bool) -> None:
    model = chat_ollama(hilo, "lc")
    text = ("".join(c.content for c in model.stream("hello")) if stream
            else model.invoke("hello").content)

    assert text == "ok: hello"
    assert hilo.events("lc") == [("user", "hello"), ("assistant", "ok: hello")]


@pytest.mark.parametrize("prefix, base", [("ollama_chat", ""), ("openai", "/v1")])
def test_litellm_tool_round_trip(hilo: HiloServer, prefix: str, base: str) -> None:
    import litellm

    hilo.fake.script_chat(CALL_PARIS, "Sunny in Paris.")
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    call = dict(model=f"{prefix}/{MODEL}", api_base=f"{hilo.url}{base}", api_key="unused",
                tools=tools, extra_headers={"X-Hilo-Session": prefix})
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]

    first = litellm.completion(messages=messages, **call)
    tool_call = first.choices[0].message.tool_calls[0]
    assert tool_call.function.name == "get_weather"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tool_call.id, "name": "get_weather",
                  "content": "sunny"}]
    second = litellm.completion(messages=messages, **call)

    assert second.choices[0].message.content == "Sunny in Paris."
    assert [e["role"] for e in stored(hilo, prefix)] == ["user", "assistant", "tool", "assistant"]


def test_llm_with_llm_ollama_chats_and_continues(hilo: HiloServer, tmp_path) -> None:
    pytest.importorskip("llm_ollama")
    hilo.fake.script_chat("Hi Ana.", Reply(text="You are Ana."))
    env = {**os.environ, "OLLAMA_HOST": hilo.url, "LLM_USER_PATH": str(tmp_path)}

    def llm(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "llm", *args], env=env, text=True,
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert llm("-m", f"ollama/{MODEL}", "I am Ana") == "Hi Ana."
    assert llm("-c", "who am I?") == "You are Ana."

    (session,) = hilo.client().get("/memory/sessions").json()["sessions"]
    assert [c for _, c in hilo.events(session["id"])] == [
        "I am Ana", "Hi Ana.", "who am I?", "You are Ana."]
