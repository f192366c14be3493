"""Through `hilo serve`, with the real `ollama` and `openai` packages, a client keeps
every feature of the model server: tool calls both ways, thinking, structured output,
images, and the reply's own counts and reasons — and tool turns are remembered."""

from __future__ import annotations

import base64
import json

import ollama
import openai
import pytest
from pydantic import BaseModel

from tests.api.support import HiloServer
from tests.api.test_chat import MODEL, ollama_client, openai_client, user
from tests.fake_ollama import Reply

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL_PARIS = Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
# A 1x1 PNG, as clients send images.
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


def stored(server: HiloServer, session: str) -> list[dict]:
    """The session's events as the memory API shows them, tool fields included."""
    events = server.client().get(f"/memory/sessions/{session}/events").json()["events"]
    return [{k: e[k] for k in ("role", "content", "tool_name", "tool_call_id", "tool_calls")}
            for e in events]


def sent(server: HiloServer, path: str) -> dict:
    return server.fake.bodies(path)[-1]


# -- tool round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_tool_round_trip(hilo: HiloServer, stream: bool) -> None:
    hilo.fake.script_chat(CALL_PARIS, "It is sunny in Paris.")
    client = ollama_client(hilo, f"tools-{stream}")
    messages = [user("What is the weather in Paris?")]

    first = client.chat(model=MODEL, messages=messages, tools=[WEATHER_TOOL], stream=stream)
    parts = list(first) if stream else [first]
    calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"})]
    assert sent(hilo, "/api/chat")["tools"] == [WEATHER_TOOL]

    messages += [{"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
                 {"role": "tool", "tool_name": "get_weather", "content": "sunny, 24 °C"}]
    second = client.chat(model=MODEL, messages=messages, tools=[WEATHER_TOOL], stream=stream)
    text = "".join(p.message.content for p in second) if stream else second.message.content

    assert text == "It is sunny in Paris."
    forwarded = sent(hilo, "/api/chat")["messages"]
    assert forwarded[-1] == {"role": "tool", "tool_name": "get_weather", "content": "sunny, 24 °C"}
    assert forwarded[-2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert stored(hilo, f"tools-{stream}") == [
        {"role": "user", "content": "What is the weather in Paris?", "tool_name": None,
         "tool_call_id": None, "tool_calls": None},
        {"role": "assistant", "content": "", "tool_name": None, "tool_call_id": None,
         "tool_calls": [{"id": "call_0", "name": "get_weather", "arguments": {"city": "Paris"}}]},
        {"role": "tool", "content": "sunny, 24 °C", "tool_name": "get_weather",
         "tool_call_id": None, "tool_calls": None},
        {"role": "assistant", "content": "It is sunny in Paris.", "tool_name": None,
         "tool_call_id": None, "tool_calls": None}]


def _streamed_calls(chunks: list) -> list[dict]:
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            call["id"] = delta.id or call["id"]
            call["function"]["name"] += delta.function.name or ""
            call["function"]["arguments"] += delta.function.arguments or ""
    return list(calls.values())


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_round_trip(hilo: HiloServer, stream: bool) -> None:
    hilo.fake.script_chat(CALL_PARIS, "It is sunny in Paris.")
    client = openai_client(hilo, f"tools-{stream}")
    messages: list[dict] = [user("What is the weather in Paris?")]

    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice="auto", stream=stream)
    if stream:
        chunks = list(first)
        calls, finish = _streamed_calls(chunks), [c.choices[0].finish_reason for c in chunks
                                                  if c.choices][-1]
    else:
        calls = [c.model_dump() for c in first.choices[0].message.tool_calls]
        finish = first.choices[0].finish_reason
    assert finish == "tool_calls"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"})]
    assert sent(hilo, "/v1/chat/completions")["tool_choice"] == "auto"

    messages += [{"role": "assistant", "content": None, "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 24 °C"}]
    second = client.chat.completions.create(model=MODEL, messages=messages,
                                            tools=[WEATHER_TOOL], stream=stream)
    text = ("".join(c.choices[0].delta.content or "" for c in second if c.choices) if stream
            else second.choices[0].message.content)

    assert text == "It is sunny in Paris."
    assert sent(hilo, "/v1/chat/completions")["messages"][-2:] == messages[-2:]
    events = stored(hilo, f"tools-{stream}")
    assert [e["role"] for e in events] == ["user", "assistant", "tool", "assistant"]
    assert events[1]["tool_calls"] == [{"id": calls[0]["id"], "name": "get_weather",
                                        "arguments": {"city": "Paris"}}]
    assert (events[2]["tool_call_id"], events[2]["tool_name"]) == (calls[0]["id"], "get_weather")


def test_a_request_ending_in_a_tool_result_is_answered(hilo: HiloServer) -> None:
    """Only the tool result is sent: the stored window brings the call before it."""
    hilo.fake.script_chat(CALL_PARIS, "Sunny.")
    client = ollama_client(hilo, "s1")
    client.chat(model=MODEL, messages=[user("weather in Paris?")], tools=[WEATHER_TOOL])

    reply = client.chat(model=MODEL, tools=[WEATHER_TOOL], messages=[
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"}])

    assert reply.message.content == "Sunny."
    forwarded = sent(hilo, "/api/chat")["messages"]
    assert [m["role"] for m in forwarded] == ["system", "user", "assistant", "tool"]
    assert forwarded[2]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_tool_turns_are_given_to_distillation_as_what_happened() -> None:
    from app.learn.distill import TurnEvent, build_prompt

    prompt = build_prompt([
        TurnEvent(1, "user", "book me a flight"),
        TurnEvent(2, "assistant", "", tool_calls_json=json.dumps(
            [{"id": "c1", "name": "book_flight", "arguments": {"to": "Lisbon"}}])),
        TurnEvent(3, "tool", "booked: TP123", tool_name="book_flight")])

    assert 'ASSISTANT (context only): [called book_flight({"to": "Lisbon"})]' in prompt
    assert "TOOL (book_flight): booked: TP123" in prompt


# -- thinking, reasons, counts -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_comes_back_and_is_not_stored_as_the_reply(hilo: HiloServer, stream: bool) -> None:
    hilo.fake.script_chat(Reply(text="42.", thinking="six times seven"))
    reply = ollama_client(hilo, f"think-{stream}").chat(
        model=MODEL, messages=[user("6 x 7?")], think=True, stream=stream)
    parts = list(reply) if stream else [reply]

    assert "".join(p.message.thinking or "" for p in parts) == "six times seven"
    assert "".join(p.message.content for p in parts) == "42."
    assert sent(hilo, "/api/chat")["think"] is True
    assert [e["content"] for e in stored(hilo, f"think-{stream}")] == ["6 x 7?", "42."]


def test_done_reason_and_counts_are_the_model_servers(hilo: HiloServer) -> None:
    hilo.fake.script_chat(Reply(text="cut", done_reason="length"))
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("long story")],
                                           options={"num_predict": 1}, stream=False)

    assert reply.done_reason == "length"
    # The prompt the model counted is the one Hilo sent: the client's plus the memory.
    forwarded = sent(hilo, "/api/chat")["messages"]
    assert reply.prompt_eval_count == sum((len(m["content"]) + 3) // 4 for m in forwarded)


def test_openai_reasoning_effort_n_and_logprobs_go_through(hilo: HiloServer) -> None:
    openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("hi")], n=2, logprobs=True, top_logprobs=3,
        reasoning_effort="low", seed=7, stop=["\n\n"])

    body = sent(hilo, "/v1/chat/completions")
    assert {k: body[k] for k in ("n", "logprobs", "top_logprobs", "reasoning_effort", "seed",
                                 "stop")} == {"n": 2, "logprobs": True, "top_logprobs": 3,
                                              "reasoning_effort": "low", "seed": 7,
                                              "stop": ["\n\n"]}
    assert "temperature" not in body  # Hilo adds no option the client did not ask for


# -- structured output --------------------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int


def test_ollama_format_schema_reaches_the_model_and_the_reply_parses(hilo: HiloServer) -> None:
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("a big city?")],
                                           format=City.model_json_schema())

    assert sent(hilo, "/api/chat")["format"] == City.model_json_schema()
    assert City.model_validate_json(reply.message.content) == City(name="x", population=0)


def test_ollama_format_json(hilo: HiloServer) -> None:
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("json please")],
                                           format="json")

    assert sent(hilo, "/api/chat")["format"] == "json"
    assert json.loads(reply.message.content) == {}


def test_openai_structured_output_parses(hilo: HiloServer) -> None:
    completion = openai_client(hilo, "s1").chat.completions.parse(
        model=MODEL, messages=[user("a big city?")], response_format=City)

    assert completion.choices[0].message.parsed == City(name="x", population=0)
    assert sent(hilo, "/v1/chat/completions")["response_format"]["type"] == "json_schema"


# -- images ---------------------------------------------------------------------------------


def test_ollama_images_reach_the_model(hilo: HiloServer) -> None:
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[
        {"role": "user", "content": "what is this?", "images": [PIXEL]}])

    assert reply.message.content == "ok: what is this? [saw 1 image]"
    assert hilo.fake.images() == [PIXEL]
    assert stored(hilo, "s1")[0]["content"] == "what is this? [1 image attached]"


def test_openai_image_parts_reach_the_model(hilo: HiloServer) -> None:
    url = f"data:image/png;base64,{PIXEL}"
    completion = openai_client(hilo, "s1").chat.completions.create(model=MODEL, messages=[
        {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                     {"type": "image_url", "image_url": {"url": url}}]}])

    assert completion.choices[0].message.content == "ok: what is this? [saw 1 image]"
    assert hilo.fake.images() == [url]


def test_errors_of_the_model_server_keep_their_status(hilo: HiloServer) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client(hilo, "s1").chat(model="llama9:1t", messages=[user("hi")])
    assert caught.value.status_code == 404

    with pytest.raises(openai.NotFoundError):
        openai_client(hilo, "s1").chat.completions.create(model="llama9:1t",
                                                          messages=[user("hi")])
