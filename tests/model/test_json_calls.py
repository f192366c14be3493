"""A learning call asks only for what learning needs, in a JSON format the server takes:
the client's reply limits never reach it, and each server's refusal of a format moves
that server and model down the ladder once, for good."""

from __future__ import annotations

import json
import threading
import time

import pytest

from app.model.client import ModelClient
from app.model.errors import ModelCallYielded, ModelHTTPError, OverBudget
from app.model.json_modes import JsonModes
from app.model.replies import SentChat
from app.model.usage import JsonCall
from tests.fake_ollama import CpuSpeed, FakeOllama, Fault, Reply

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
HISTORY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "I am Ana"}]
TOOLS = [{"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]


def client_for(fake: FakeOllama, provider: str, json_modes: JsonModes | None = None,
               url: str | None = None) -> ModelClient:
    return ModelClient(provider=provider, url=url or fake.url, chat_model="gemma3:4b",
                       distill_model="gemma3:4b", embed_model="nomic-embed-text",
                       num_ctx=4096, keep_alive="5m", timeout_seconds=5.0,
                       connect_timeout_seconds=2.0, json_modes=json_modes)


def capped_chat(provider: str) -> SentChat:
    """A chat as a capped client sent it: every field that shapes the reply set."""
    if provider == "ollama":
        body = {"model": "gemma3:4b", "messages": HISTORY, "tools": TOOLS, "stream": True,
                "keep_alive": "10m", "think": True, "format": "json",
                "options": {"num_ctx": 8192, "num_predict": 24, "stop": ["\n"],
                            "temperature": 0.9, "top_p": 0.5, "top_k": 3, "seed": 7,
                            "repeat_penalty": 1.3, "min_p": 0.2}}
        return SentChat("/api/chat", body, "Hello Ana.")
    body = {"model": "gemma3:4b", "messages": HISTORY, "tools": TOOLS, "stream": True,
            "max_tokens": 24, "max_completion_tokens": 24, "stop": ["\n"], "temperature": 0.9,
            "top_p": 0.5, "seed": 7, "presence_penalty": 1.0, "frequency_penalty": 1.0,
            "logit_bias": {"50256": -100}, "n": 2, "logprobs": True,
            "response_format": {"type": "text"}, "id_slot": 0}
    return SentChat("/v1/chat/completions", body, "Hello Ana.")


def test_a_learning_call_after_a_capped_ollama_chat_sends_none_of_its_reply_limits(fake_ollama):
    fake_ollama.script_chat({"name": "Ana"})
    with client_for(fake_ollama, "ollama") as client:
        text = client.continue_json(capped_chat("ollama"), "Who is the user?", SCHEMA)

    assert json.loads(text) == {"name": "Ana"}
    (sent,) = fake_ollama.bodies("/api/chat")
    assert sent["options"] == {"num_ctx": 8192, "temperature": 0.1}
    assert sent["messages"][:2] == HISTORY  # the cached prefix, unchanged
    assert sent["messages"][2:] == [{"role": "assistant", "content": "Hello Ana."},
                                    {"role": "user", "content": "Who is the user?"}]
    assert sent["tools"] == TOOLS and sent["keep_alive"] == "10m"
    assert sent["format"] == SCHEMA and sent["stream"] is True and "think" not in sent


def test_a_learning_call_after_a_capped_openai_chat_sends_none_of_its_reply_limits(fake_ollama):
    fake_ollama.script_chat({"name": "Ana"})
    with client_for(fake_ollama, "openai") as client:
        client.continue_json(capped_chat("openai"), "Who is the user?", SCHEMA)

    (sent,) = fake_ollama.bodies("/v1/chat/completions")
    assert set(sent) == {"model", "messages", "tools", "id_slot", "stream", "stream_options",
                         "temperature", "response_format"}
    assert sent["stream_options"] == {"include_usage": True}  # the call's tokens, counted
    assert sent["temperature"] == 0.1 and sent["response_format"]["type"] == "json_schema"
    assert sent["messages"][:2] == HISTORY


# Each server's first rung it does not refuse, asked through each API (fake_ollama.ENGINES).
LADDER_CASES = [
    ("ollama", "ollama", "schema"),
    ("ollama-0.4", "ollama", "object"),
    ("ollama", "openai", "schema"),
    ("llama.cpp", "openai", "schema"),
    ("llama.cpp-old", "openai", "object"),
    ("llama-cpp-python", "openai", "object"),
    ("fastapi-422", "openai", "object"),
    ("vllm", "openai", "schema"),
    ("lmstudio", "openai", "schema"),
    ("text-only", "openai", "instruction"),
    ("text-only", "ollama", "instruction"),
]


def format_of(body: dict) -> str:
    """The rung a request asked on."""
    fmt = body.get("format", (body.get("response_format") or {}).get("type"))
    if fmt is None:
        return "instruction"
    return "object" if fmt in ("json", "json_object") else "schema"


@pytest.mark.parametrize("engine,provider,rung", LADDER_CASES)
def test_each_server_gets_json_in_the_first_format_it_takes_and_only_once_refused(
        fake_ollama, engine, provider, rung):
    fake_ollama.engine = engine
    fake_ollama.responder = lambda body: 'Sure! {"name": "Ana"}'
    path = "/api/chat" if provider == "ollama" else "/v1/chat/completions"
    after = SentChat(path, {"model": "gemma3:4b", "messages": HISTORY}, "Hello Ana.")
    with client_for(fake_ollama, provider) as client:
        first = client.continue_json(after, "Who is the user?", SCHEMA)
        second = client.generate_json("Who is the user?", SCHEMA)

    assert '{"name": "Ana"}' in first and '{"name": "Ana"}' in second
    asked = [format_of(r.body) for r in fake_ollama.requests if r.method == "POST"]
    ladder = ["schema", "object", "instruction"]
    refused = ladder[:ladder.index(rung)]
    assert asked == [*refused, rung, rung]  # the second call starts where the first ended
    last = fake_ollama.requests[-1].body
    question = last.get("prompt") or last["messages"][-1]["content"]
    assert ('"required":["name"]' in question) == (rung != "schema")  # the schema, in words


def test_a_refusal_that_is_not_about_the_format_is_an_error_not_a_step_down(fake_ollama):
    from tests.fake_ollama import Fault

    fake_ollama.script_chat(Fault.http_error(400, "the prompt is longer than the context"))
    with client_for(fake_ollama, "openai") as client:
        with pytest.raises(ModelHTTPError):
            client.generate_json("Who is the user?", SCHEMA)
        assert client.json_modes.mode(fake_ollama.url, "gemma3:4b") == "schema"


def test_a_learned_format_is_remembered_by_the_next_worker(fake_ollama, writer):
    fake_ollama.engine = "llama-cpp-python"
    with client_for(fake_ollama, "openai", JsonModes(writer)) as client:
        client.generate_json("Who is the user?", SCHEMA)
    fake_ollama.requests.clear()

    with client_for(fake_ollama, "openai", JsonModes(writer)) as restarted:
        restarted.generate_json("Who is the user?", SCHEMA)

    assert [format_of(r.body) for r in fake_ollama.requests] == ["object"]


def test_a_servers_password_in_its_url_is_not_kept_with_its_format(fake_ollama, writer):
    fake_ollama.engine = "lmstudio"
    url = fake_ollama.url.replace("http://", "http://ana:hunter2@")
    with client_for(fake_ollama, "openai", JsonModes(writer), url) as client:
        client.generate_json("Anything?", "json")  # json_object, which LM Studio refuses
    assert JsonModes(writer).mode(url, "gemma3:4b") == "instruction"
    rows = list(writer.submit(lambda con: list(con.execute("SELECT * FROM model_json_modes"))))
    assert rows and "hunter2" not in repr(rows)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_learning_call_that_gives_way_stops_the_model_at_its_next_token(provider):
    """A background call cut for a person is streamed, so the server sees its client go
    at the next token and the person's chat is not left waiting behind the rest of the
    reply (llama.cpp looks for a gone client of a whole reply only once a second)."""
    reply = {"name": "x" * 2000}  # ~500 tokens: 25 s at this pace, were it not cut
    fake = FakeOllama(cpu=CpuSpeed(prompt_tokens_per_second=5000,
                                   generate_tokens_per_second=20)).start()
    fake.script_chat(reply)
    person_came = threading.Event()

    def watch_for_the_first_token() -> None:
        wait_for(lambda: fake.evaluations and fake.evaluations[0].first_token is not None)
        person_came.set()

    try:
        threading.Thread(target=watch_for_the_first_token, daemon=True).start()
        with client_for(fake, provider) as client:
            with pytest.raises(ModelCallYielded):
                client.continue_json(capped_chat(provider), "Who is the user?", SCHEMA,
                                     yield_to=person_came.is_set)
        wait_for(lambda: fake.evaluations[0].ended is not None)
        (served,) = fake.evaluations
        assert served.dropped and served.generated_chars < len(json.dumps(reply)) // 4
        (sent,) = [r.body for r in fake.requests if r.path.endswith(("/api/chat", "/completions"))]
        assert sent["stream"] is True
    finally:
        fake.stop()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- a learning call's own budget ------------------------------------------------------------


def calls_of(client: ModelClient) -> list[JsonCall]:
    """What the client tells its on_json_call, gathered."""
    told: list[JsonCall] = []
    client.on_json_call = told.append
    return told


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_learning_call_tells_the_engine_its_own_output_limit(fake_ollama, provider):
    fake_ollama.script_chat({"name": "Ana"})
    with client_for(fake_ollama, provider) as client:
        client.continue_json(capped_chat(provider), "Who is the user?", SCHEMA, max_tokens=40)
    (sent,) = [r.body for r in fake_ollama.requests if r.method == "POST"]
    if provider == "ollama":  # the limit is Hilo's, never the client's 24
        assert sent["options"] == {"num_ctx": 8192, "temperature": 0.1, "num_predict": 40}
    else:
        assert sent["max_tokens"] == 40 and "max_completion_tokens" not in sent


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_learning_call_that_streams_forever_is_cut_at_its_output_limit(fake_ollama, provider):
    # A model looping in its JSON, on a server that honours no limit.
    fake_ollama.script_chat(Fault.endless())
    with client_for(fake_ollama, provider) as client:
        told = calls_of(client)
        with pytest.raises(OverBudget) as cut:
            client.continue_json(capped_chat(provider), "Who is the user?", SCHEMA,
                                 max_tokens=40, job="learn")
    assert cut.value.limit == "tokens" and not cut.value.retryable
    assert "output limit of 40 tokens" in str(cut.value)
    (call,) = told
    assert (call.job, call.outcome, call.budget.max_tokens) == ("learn", "too_long", 40)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_learning_call_that_ends_at_the_engines_limit_is_too_long(fake_ollama, provider):
    fake_ollama.script_chat(Reply('{"name": "Ana Ana Ana', done_reason="length"))
    with client_for(fake_ollama, provider) as client:
        told = calls_of(client)
        with pytest.raises(OverBudget):
            client.generate_json("Who is the user?", SCHEMA, max_tokens=8) if provider == "openai" \
                else client.continue_json(capped_chat(provider), "Who?", SCHEMA, max_tokens=8)
    assert told[0].outcome == "too_long"


@pytest.mark.parametrize("fault", [Fault.hang(), Fault.endless()], ids=["silent", "endless"])
def test_a_learning_call_is_cut_at_its_deadline_however_fast_tokens_come(fake_ollama, fault):
    fake_ollama.script_chat(fault)
    with client_for(fake_ollama, "ollama") as client:
        client.learning_deadline_seconds = 0.5  # [llm] timeout_seconds is 5 here
        told = calls_of(client)
        with pytest.raises(OverBudget) as cut:
            client.continue_json(capped_chat("ollama"), "Who is the user?", SCHEMA)
    assert cut.value.limit == "deadline" and "deadline of 0.5 s" in str(cut.value)
    assert told[0].outcome == "past_deadline"
    # The connection was closed: the server's handler saw its client go and stopped.
    with client_for(fake_ollama, "ollama") as client:
        assert client.generate_json("Still there?", SCHEMA)  # the server serves others


@pytest.mark.parametrize("engine,clock", [("ollama", "engine"), ("llama.cpp", "engine"),
                                          ("vllm", "wall")])
def test_each_learning_call_reports_the_engines_own_time_or_else_the_wall_time(
        fake_ollama, engine, clock):
    fake_ollama.engine = engine
    fake_ollama.script_chat({"name": "Ana"})
    provider = "ollama" if engine == "ollama" else "openai"
    with client_for(fake_ollama, provider) as client:
        told = calls_of(client)
        client.continue_json(capped_chat(provider), "Who is the user?", SCHEMA, job="diary")
    (call,) = told
    assert (call.job, call.outcome) == ("diary", "answered")
    assert call.prompt_tokens and call.reply_tokens  # the server's own counts
    assert (call.engine.clock if call.engine else "wall") == clock
    assert call.engine_ms >= 0
