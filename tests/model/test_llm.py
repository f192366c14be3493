"""ModelClient against the fake Ollama server: what is sent, what comes back, and
which actionable error each failure becomes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import Config
from app.learn.model_output import parse_json_leniently
from app.model.client import ModelClient
from app.model.errors import (
    MalformedResponse,
    ModelError,
    ModelHTTPError,
    ModelNotFound,
    ModelTimeout,
    ModelUnreachable,
    StreamInterrupted,
)
from app.model.stream import ChatReply, ChatStream
from tests.fake_ollama import (
    MALFORMED_JSON_CONTENT,
    FakeOllama,
    Fault,
    count_tokens,
    unused_loopback_url,
)

HELLO = [{"role": "user", "content": "Hello, I am Ana"}]
PROFILE_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_client(url: str, provider: str = "ollama", **overrides) -> ModelClient:
    settings = dict(
        provider=provider,
        url=url,
        chat_model="gemma3:4b",
        distill_model="qwen2.5:3b",
        embed_model="nomic-embed-text",
        num_ctx=4096,
        keep_alive="5m",
        timeout_seconds=5.0,
        connect_timeout_seconds=2.0,
    )
    return ModelClient(**{**settings, **overrides})


@pytest.fixture
def client(fake_ollama: FakeOllama):
    with make_client(fake_ollama.url) as model_client:
        yield model_client


@pytest.fixture
def openai_client(fake_ollama: FakeOllama):
    with make_client(fake_ollama.url, provider="openai") as model_client:
        yield model_client


# ----------------------------------------------------------------------------- chat


def test_chat_stream_yields_pieces_that_join_to_the_scripted_reply(fake_ollama, client):
    fake_ollama.script_chat("Nice to meet you, Ana.")
    pieces = list(client.chat_stream(HELLO))
    assert len(pieces) > 1
    assert "".join(pieces) == "Nice to meet you, Ana."


def test_chat_stream_exposes_text_and_token_counts_when_finished(fake_ollama, client):
    fake_ollama.script_chat("Nice to meet you, Ana.")
    stream = client.chat_stream(HELLO)
    for _ in stream:
        pass
    assert stream.text == "Nice to meet you, Ana."
    assert stream.prompt_eval_count == count_tokens("Hello, I am Ana")
    assert stream.eval_count == count_tokens("Nice to meet you, Ana.")
    # The server's own counters: the prompt it read anew and how long that took.
    read = stream.reply.prompt_read
    assert read is not None and read[0] == stream.prompt_eval_count and read[1] > 0
    assert stream.reply == ChatReply(
        "Nice to meet you, Ana.", "gemma3:4b", stream.prompt_eval_count, stream.eval_count, "stop",
        engine=stream.reply.engine)
    # The engine's own time, from Ollama's done line (nanoseconds there, ms here).
    assert stream.reply.engine.clock == "engine" and stream.reply.engine.total_ms >= 0


def test_chat_returns_the_whole_reply_with_token_counts(fake_ollama, client):
    fake_ollama.script_chat("Hi Ana!")
    reply = client.chat(HELLO)
    assert (reply.text, reply.model) == ("Hi Ana!", "gemma3:4b")
    assert reply.prompt_eval_count == count_tokens("Hello, I am Ana")
    assert fake_ollama.bodies("/api/chat")[0]["stream"] is False


def test_every_ollama_call_sends_num_ctx_and_keep_alive(fake_ollama, client):
    list(client.chat_stream(HELLO))
    client.chat(HELLO)
    client.generate_json("extract", PROFILE_SCHEMA)
    client.embed(["text"])
    bodies = [r.body for r in fake_ollama.requests]
    assert [(b["options"]["num_ctx"], b["keep_alive"]) for b in bodies] == [(4096, "5m")] * 4


def test_chat_options_are_sent_alongside_num_ctx(fake_ollama, client):
    client.chat(HELLO, options={"temperature": 0.7, "num_ctx": 8192})
    assert fake_ollama.bodies("/api/chat")[0]["options"] == {"num_ctx": 8192, "temperature": 0.7}


def test_a_numeric_keep_alive_is_sent_as_a_number(fake_ollama):
    with make_client(fake_ollama.url, keep_alive="-1") as model_client:
        model_client.chat(HELLO)
    assert fake_ollama.bodies("/api/chat")[0]["keep_alive"] == -1


def test_chat_uses_the_model_asked_for(fake_ollama, client):
    assert client.chat(HELLO, model="qwen2.5:3b").model == "qwen2.5:3b"
    assert fake_ollama.bodies("/api/chat")[0]["model"] == "qwen2.5:3b"


def test_a_stream_closed_early_leaves_the_client_usable(fake_ollama, client):
    fake_ollama.script_chat("one two three four five", "second reply")
    with client.chat_stream(HELLO) as stream:
        assert isinstance(stream, ChatStream)
        assert next(stream) == "one "
    assert client.chat(HELLO).text == "second reply"


# ----------------------------------------------------------------------------- JSON and embeddings


def test_generate_json_sends_the_schema_as_format_with_temperature_and_num_ctx(fake_ollama, client):
    fake_ollama.script_generate({"name": "Ana"})
    text = client.generate_json("Extract the profile", PROFILE_SCHEMA, system="You extract facts.")
    assert json.loads(text) == {"name": "Ana"}
    [body] = fake_ollama.bodies("/api/generate")
    assert body["format"] == PROFILE_SCHEMA
    assert body["options"] == {"num_ctx": 4096, "temperature": 0.1}
    # Streamed: a learning call's deadline can cut only a streamed read.
    assert (body["model"], body["stream"], body["system"]) == ("qwen2.5:3b", True, "You extract facts.")


def test_generate_json_returns_broken_json_as_is_for_the_caller_to_judge(fake_ollama, client):
    fake_ollama.script_generate(Fault.malformed_json())
    assert client.generate_json("extract", PROFILE_SCHEMA) == MALFORMED_JSON_CONTENT


def test_embed_sends_all_texts_in_one_request(fake_ollama, client):
    vectors = client.embed(["green tea", "black coffee", "green tea"])
    [body] = fake_ollama.bodies("/api/embed")
    assert body["input"] == ["green tea", "black coffee", "green tea"]
    assert body["model"] == "nomic-embed-text"
    assert len(vectors) == 3 and vectors[0] == vectors[2] != vectors[1]


def test_embed_of_no_texts_makes_no_request(fake_ollama, client):
    assert client.embed([]) == []
    assert fake_ollama.requests == []


def test_embed_with_a_wrong_vector_count_is_malformed(fake_ollama, client):
    fake_ollama.script_embed([[1.0, 0.0]])
    with pytest.raises(MalformedResponse, match="1 embeddings for 2 texts"):
        client.embed(["a", "b"])


# ----------------------------------------------------------------------------- server and models


def test_list_models_names_the_pulled_models(fake_ollama, client):
    fake_ollama.models = ["gemma3:4b", "all-minilm"]
    assert client.list_models() == ["gemma3:4b", "all-minilm:latest"]


def test_check_passes_when_chat_and_distill_models_are_pulled(client):
    client.check()


def test_check_names_the_model_to_pull(fake_ollama, client):
    fake_ollama.models = ["gemma3:4b"]
    with pytest.raises(ModelNotFound, match="run `ollama pull qwen2.5:3b`"):
        client.check()


def test_ping_is_false_when_nothing_listens():
    with make_client(unused_loopback_url()) as model_client:
        assert model_client.ping() is False


def test_from_config_reads_the_llm_and_embedder_sections():
    cfg = Config().replace(llm={"url": "http://10.0.0.5:11434", "num_ctx": 8192}, embedder={"model": "all-minilm"})
    model_client = ModelClient.from_config(cfg)
    assert (model_client.url, model_client.num_ctx, model_client.embed_model) == (
        "http://10.0.0.5:11434",
        8192,
        "all-minilm",
    )
    assert model_client.chat_model == cfg.llm.chat_model
    model_client.close()


def test_an_unknown_provider_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="ollama, openai"):
        make_client("http://127.0.0.1:11434", provider="llamafile")


# ----------------------------------------------------------------------------- openai provider


def test_openai_chat_stream_joins_pieces_and_reports_usage(fake_ollama, openai_client):
    fake_ollama.script_chat("Streaming from v1")
    stream = openai_client.chat_stream(HELLO)
    assert "".join(stream) == "Streaming from v1"
    assert stream.prompt_eval_count == count_tokens("Hello, I am Ana")
    assert fake_ollama.requests[0].path == "/v1/chat/completions"


def test_openai_chat_maps_options_and_reports_usage(fake_ollama, openai_client):
    fake_ollama.script_chat("Hi")
    reply = openai_client.chat(HELLO, options={"temperature": 0.3, "num_predict": 50, "num_ctx": 8192})
    assert (reply.text, reply.prompt_eval_count, reply.eval_count) == ("Hi", count_tokens("Hello, I am Ana"), 1)
    [body] = fake_ollama.bodies("/v1/chat/completions")
    assert (body["temperature"], body["max_tokens"]) == (0.3, 50)
    assert "num_ctx" not in body and "options" not in body


def test_openai_generate_json_asks_for_a_json_schema_response(fake_ollama, openai_client):
    fake_ollama.script_chat({"name": "Ana"})
    assert json.loads(openai_client.generate_json("extract", PROFILE_SCHEMA, system="Extract.")) == {"name": "Ana"}
    [body] = fake_ollama.bodies("/v1/chat/completions")
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == PROFILE_SCHEMA
    assert (body["model"], body["temperature"]) == ("qwen2.5:3b", 0.1)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_openai_embed_and_list_models(fake_ollama, openai_client):
    assert len(openai_client.embed(["a", "b"])) == 2
    assert "gemma3:4b" in openai_client.list_models()
    assert [r.path for r in fake_ollama.requests] == ["/v1/embeddings", "/v1/models"]


def test_openai_url_may_already_end_in_v1(fake_ollama):
    with make_client(fake_ollama.url + "/v1", provider="openai") as model_client:
        model_client.chat(HELLO)
    assert fake_ollama.requests[0].path == "/v1/chat/completions"


def test_openai_api_key_is_sent_as_a_bearer_token(fake_ollama):
    with make_client(fake_ollama.url, provider="openai", api_key="sk-local") as model_client:
        model_client.list_models()
    assert fake_ollama.requests[0].headers["authorization"] == "Bearer sk-local"


def test_openai_missing_model_names_the_setting_to_change(fake_ollama, openai_client):
    fake_ollama.models = ["gemma3:4b"]
    with pytest.raises(ModelNotFound, match=r"qwen2.5:3b is not available at .* change \[llm\] distill_model"):
        openai_client.generate_json("extract", PROFILE_SCHEMA)


# ----------------------------------------------------------------------------- failures


def test_connection_refused_is_unreachable_and_says_start_ollama():
    url = unused_loopback_url()
    with make_client(url) as model_client, pytest.raises(ModelUnreachable) as raised:
        model_client.chat(HELLO)
    assert f"Ollama is not reachable at {url}" in str(raised.value)
    assert "`ollama serve`" in str(raised.value)
    assert raised.value.retryable


def test_connection_refused_on_openai_provider_names_the_url_and_says_start_the_server():
    url = unused_loopback_url()
    with make_client(url, provider="openai") as model_client, pytest.raises(ModelUnreachable) as raised:
        list(model_client.chat_stream(HELLO))
    assert url in str(raised.value) and "start the server" in str(raised.value)


def test_unknown_model_is_not_found_and_says_ollama_pull(client):
    with pytest.raises(ModelNotFound) as raised:
        client.chat(HELLO, model="llama9:70b")
    assert str(raised.value) == "model llama9:70b is not pulled — run `ollama pull llama9:70b`"
    assert not raised.value.retryable


def test_unknown_model_fails_a_stream_before_any_piece(client):
    with pytest.raises(ModelNotFound, match="ollama pull llama9:70b"):
        client.chat_stream(HELLO, model="llama9:70b")


def test_a_reply_slower_than_the_timeout_is_a_timeout_naming_the_setting(fake_ollama):
    fake_ollama.script_chat(Fault.delay(30))
    with make_client(fake_ollama.url, timeout_seconds=0.2) as model_client, pytest.raises(ModelTimeout) as raised:
        model_client.chat(HELLO)
    message = str(raised.value)
    assert fake_ollama.url in message and "0.2 s" in message
    assert "[llm] timeout_seconds" in message and "HILO_LLM_TIMEOUT_SECONDS" in message
    assert raised.value.retryable


def test_server_error_is_an_http_error_with_the_servers_text(fake_ollama, client):
    fake_ollama.script_generate(Fault.http_500("llama runner process has terminated"))
    with pytest.raises(ModelHTTPError) as raised:
        client.generate_json("extract", PROFILE_SCHEMA)
    assert raised.value.status == 500
    assert "HTTP 500: llama runner process has terminated" in str(raised.value)
    assert raised.value.retryable


def test_a_bad_request_is_an_http_error_not_worth_retrying(fake_ollama, client):
    fake_ollama.script_chat(Fault.http_error(400, "invalid options"))
    with pytest.raises(ModelHTTPError, match="HTTP 400: invalid options") as raised:
        client.chat(HELLO)
    assert not raised.value.retryable


def test_a_missing_endpoint_is_an_http_error_not_a_missing_model(fake_ollama):
    with make_client(fake_ollama.url + "/wrong", provider="openai") as model_client:
        with pytest.raises(ModelHTTPError, match="check \\[llm\\] provider and \\[llm\\] url"):
            model_client.chat(HELLO)


def test_a_cut_stream_is_interrupted_with_the_text_received_so_far(fake_ollama, client):
    fake_ollama.script_chat(Fault.cut_stream(after_chunks=2))
    fake_ollama.responder = lambda body: "one two three four"
    stream = client.chat_stream(HELLO)
    with pytest.raises(StreamInterrupted) as raised:
        for _ in stream:
            pass
    assert raised.value.partial_text == "one two "
    assert "stopped after 8 characters" in str(raised.value)
    assert raised.value.retryable and not stream.done


def test_a_stream_without_its_done_line_is_interrupted(fake_ollama, client):
    fake_ollama.script_chat(Fault.cut_stream(after_chunks=100))
    fake_ollama.responder = lambda body: "all of it"
    with pytest.raises(StreamInterrupted) as raised:
        list(client.chat_stream(HELLO))
    assert raised.value.partial_text == "all of it"


def test_a_cut_openai_stream_is_interrupted_with_partial_text(fake_ollama, openai_client):
    fake_ollama.script_chat(Fault.cut_stream(after_chunks=1))
    fake_ollama.responder = lambda body: "one two three"
    with pytest.raises(StreamInterrupted) as raised:
        list(openai_client.chat_stream(HELLO))
    assert raised.value.partial_text == "one "


def test_a_body_that_is_not_json_is_malformed(fake_ollama, client):
    fake_ollama.script_chat(Fault.malformed_json())
    with pytest.raises(MalformedResponse, match="not the Ollama API's JSON") as raised:
        client.chat(HELLO)
    assert raised.value.retryable


def test_a_stream_line_that_is_not_json_is_malformed(fake_ollama, client):
    fake_ollama.script_chat(Fault.malformed_json())
    with pytest.raises(MalformedResponse, match="stream line is not JSON"):
        list(client.chat_stream(HELLO))


def test_a_failed_call_then_a_good_one_on_the_same_client(fake_ollama, client):
    fake_ollama.script_chat(Fault.http_500("busy"), "fine now")
    with pytest.raises(ModelHTTPError):
        client.chat(HELLO)
    assert client.chat(HELLO).text == "fine now"


@pytest.mark.parametrize(
    "error, retryable",
    [
        (ModelUnreachable("http://h", "ollama"), True),
        (ModelTimeout("http://h", 1.0), True),
        (StreamInterrupted("http://h", "", "cut"), True),
        (MalformedResponse("http://h", "POST /api/chat", "x", "ollama"), True),
        (ModelHTTPError(503, "overloaded", "http://h", "POST /api/chat"), True),
        (ModelHTTPError(429, "slow down", "http://h", "POST /api/chat"), True),
        (ModelHTTPError(401, "bad key", "http://h", "POST /api/chat"), False),
        (ModelNotFound("m", "http://h", "ollama"), False),
    ],
)
def test_retryable_tells_workers_whether_trying_again_can_help(error: ModelError, retryable: bool):
    assert error.retryable is retryable


def test_a_connect_timeout_names_the_connect_setting():
    message = str(ModelTimeout("http://h:1", 3.0, phase="connect"))
    assert "could not connect to http://h:1 within 3 s" in message
    assert "HILO_LLM_CONNECT_TIMEOUT_SECONDS" in message


# ----------------------------------------------------------------------------- parse_json_leniently


def test_lenient_parse_reads_plain_json():
    assert parse_json_leniently('{"name": "Ana"}') == {"name": "Ana"}


def test_lenient_parse_unwraps_a_code_fence():
    assert parse_json_leniently('```json\n{"name": "Ana"}\n```') == {"name": "Ana"}


def test_lenient_parse_finds_json_inside_prose():
    text = 'Sure! Here is the profile: {"name": "Ana", "likes": ["tea"]} Let me know {if} you need more.'
    assert parse_json_leniently(text) == {"name": "Ana", "likes": ["tea"]}


def test_lenient_parse_reads_a_top_level_array():
    assert parse_json_leniently('Facts:\n[{"key": "city", "value": "Lima"}]') == [{"key": "city", "value": "Lima"}]


def test_lenient_parse_prefers_the_outermost_value_over_a_small_earlier_one():
    assert parse_json_leniently('See note [1]. Result: {"a": {"b": [1, 2]}}') == {"a": {"b": [1, 2]}}


def test_lenient_parse_tolerates_trailing_commas():
    assert parse_json_leniently('{"likes": ["tea", "jazz",],}') == {"likes": ["tea", "jazz"]}


@pytest.mark.parametrize("garbage", ["", "no json here", '{"profile": [', "42", '"just a string"', "{not: json}"])
def test_lenient_parse_returns_none_when_nothing_parses(garbage: str):
    assert parse_json_leniently(garbage) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)


@given(
    value=st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=4),
    prose=st.text(alphabet=st.characters(blacklist_characters="{}[]"), max_size=30),
)
def test_lenient_parse_recovers_any_object_wrapped_in_prose(value, prose):
    assert parse_json_leniently(f"{prose}\n```json\n{json.dumps(value)}\n```\n{prose}") == value
