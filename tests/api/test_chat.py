"""Whole chat turns through `hilo serve` with the real `ollama` and `openai` clients."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import ollama
import openai
import pytest

from app.serve import server as api_server
from tests.api.support import HiloServer, serve
from tests.fake_ollama import Fault, prompt_tokens, unused_loopback_url

MODEL = "gemma3:4b"


def ollama_client(server: HiloServer, session: str | None = None, **headers: str) -> ollama.Client:
    if session is not None:
        headers["X-Hilo-Session"] = session
    return server.cached(("ollama", tuple(sorted(headers.items()))),
                         lambda: ollama.Client(host=server.url, headers=headers))


def openai_client(server: HiloServer, session: str | None = None, api_key: str = "unused",
                  **headers: str) -> openai.OpenAI:
    if session is not None:
        headers["X-Hilo-Session"] = session
    return server.cached(("openai", api_key, tuple(sorted(headers.items()))),
                         lambda: openai.OpenAI(base_url=f"{server.url}/v1", api_key=api_key,
                                               max_retries=0, default_headers=headers))


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def sent_to_model(server: HiloServer, path: str = "/api/chat") -> list[dict]:
    """The messages Hilo sent the model server in its last chat call."""
    return server.fake.bodies(path)[-1]["messages"]


# -- whole turns ---------------------------------------------------------------------------


def test_ollama_client_streams_a_reply_and_both_messages_are_stored(hilo: HiloServer) -> None:
    hilo.fake.script_chat("Hola Ana, encantado.")
    parts = list(ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("Soy Ana")], stream=True))

    assert "".join(p.message.content for p in parts) == "Hola Ana, encantado."
    assert parts[-1].done and parts[-1].prompt_eval_count > 0
    assert hilo.events("s1") == [("user", "Soy Ana"), ("assistant", "Hola Ana, encantado.")]


def test_ollama_client_gets_a_whole_reply_without_streaming(hilo: HiloServer) -> None:
    hilo.fake.script_chat("Four.")
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("2 + 2?")], stream=False)

    assert reply.message.content == "Four."
    assert reply.done and reply.eval_count > 0
    assert hilo.events("s1") == [("user", "2 + 2?"), ("assistant", "Four.")]


def test_openai_client_gets_a_chat_completion_with_usage(hilo: HiloServer) -> None:
    hilo.fake.script_chat("Four.")
    completion = openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("2 + 2?")])

    assert completion.choices[0].message.content == "Four."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    assert hilo.events("s1") == [("user", "2 + 2?"), ("assistant", "Four.")]


def test_openai_client_streams_chunks_and_the_usage_chunk(hilo: HiloServer) -> None:
    hilo.fake.script_chat("The answer is four.")
    chunks = list(openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("2 + 2?")], stream=True,
        stream_options={"include_usage": True}))

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is four."
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert hilo.events("s1") == [("user", "2 + 2?"), ("assistant", "The answer is four.")]


def test_openai_stream_without_include_usage_has_no_usage_chunk(hilo: HiloServer) -> None:
    chunks = list(openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("hello")], stream=True))

    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_a_stream_without_usage_still_gives_hilo_the_servers_prompt_count(
        hilo: HiloServer) -> None:
    """Hilo asks for the usage the client did not (and keeps it from the client): the
    server's count calibrates Hilo's token estimates, which otherwise stay a guess and
    end a long chat's prompt stretch long before the context is really full."""
    chunks = list(openai_client(hilo, "s1").chat.completions.create(
        model=MODEL, messages=[user("hello")], stream=True))

    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)
    hilo.app.state.service.writer.submit(lambda con: None)  # the turn's record is committed
    (turn,) = hilo.client().get("/memory/turns").json()["turns"]
    (sent,) = hilo.fake.bodies("/v1/chat/completions")
    assert turn["prompt_tokens"] == prompt_tokens(sent["messages"])


def test_the_model_server_gets_memory_and_the_clients_history(hilo: HiloServer) -> None:
    hilo.client().put("/memory/profile/name", json={"value": "Ana"})
    ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("first question")])

    # The client's copy of history says something else: the client's history wins.
    ollama_client(hilo, "s1").chat(model=MODEL, messages=[
        user("first question"), assistant("an answer the client edited"), user("second question")])

    messages = sent_to_model(hilo)
    assert "name: Ana" in messages[0]["content"]
    assert [m["content"] for m in messages[1:]] == [
        "first question", "an answer the client edited", "second question"]


# -- resent histories ------------------------------------------------------------------------


def test_each_turn_stores_only_the_new_message(hilo: HiloServer) -> None:
    client = openai_client(hilo, "s1")
    history = [user("one")]
    for text in ("two", "three"):
        reply = client.chat.completions.create(model=MODEL, messages=history)
        history += [assistant(reply.choices[0].message.content), user(text)]
    client.chat.completions.create(model=MODEL, messages=history)

    assert hilo.events("s1") == [
        ("user", "one"), ("assistant", "ok: one"),
        ("user", "two"), ("assistant", "ok: two"),
        ("user", "three"), ("assistant", "ok: three")]


def test_a_retry_after_a_model_error_stores_the_message_once(hilo: HiloServer) -> None:
    history = [user("hello"), assistant("ok: hello"), user("tell me more")]
    ollama_client(hilo, "s1").chat(model=MODEL, messages=[user("hello")])
    hilo.fake.script_chat(Fault.http_500("out of memory"), "Recovered.")

    with pytest.raises(ollama.ResponseError):
        ollama_client(hilo, "s1").chat(model=MODEL, messages=history)
    reply = ollama_client(hilo, "s1").chat(model=MODEL, messages=history)

    assert reply.message.content == "Recovered."
    assert hilo.events("s1") == [
        ("user", "hello"), ("assistant", "ok: hello"),
        ("user", "tell me more"), ("assistant", "Recovered.")]


def test_a_regenerate_answers_again_without_storing_the_message_twice(hilo: HiloServer) -> None:
    hilo.fake.script_chat("ok: hello", "First try.", "Second try.")
    client = ollama_client(hilo, "s1")
    client.chat(model=MODEL, messages=[user("hello")])
    history = [user("hello"), assistant("ok: hello"), user("write a haiku")]
    client.chat(model=MODEL, messages=history)

    again = client.chat(model=MODEL, messages=history)

    assert again.message.content == "Second try."
    assert hilo.events("s1") == [
        ("user", "hello"), ("assistant", "ok: hello"),
        ("user", "write a haiku"), ("assistant", "First try."), ("assistant", "Second try.")]
    # The model is asked the question again, without the reply being replaced.
    assert [m["content"] for m in sent_to_model(hilo)[1:]] == ["hello", "ok: hello", "write a haiku"]


def test_the_same_words_after_the_reply_are_a_new_message(hilo: HiloServer) -> None:
    client = openai_client(hilo, "s1")
    client.chat.completions.create(model=MODEL, messages=[user("continue")])
    client.chat.completions.create(model=MODEL, messages=[
        user("continue"), assistant("ok: continue"), user("continue")])

    assert hilo.events("s1") == [("user", "continue"), ("assistant", "ok: continue")] * 2


def test_a_double_submit_stores_the_message_once(hilo: HiloServer) -> None:
    body = {"model": MODEL, "stream": False, "messages": [user("book the table for two")]}
    start = threading.Barrier(2)

    def submit() -> int:
        client = hilo.client(user="diner")
        start.wait()
        return client.post("/api/chat", json=body, headers={"X-Hilo-Session": "s1"}).status_code

    with ThreadPoolExecutor(2) as pool:
        statuses = list(pool.map(lambda _: submit(), range(2)))

    assert statuses == [200, 200]
    stored = hilo.events("s1", user="diner")
    assert [content for role, content in stored if role == "user"] == ["book the table for two"]


def test_another_conversation_ending_with_the_same_words_is_new(hilo: HiloServer) -> None:
    client = ollama_client(hilo, "shared")
    client.chat(model=MODEL, messages=[user("a")])
    client.chat(model=MODEL, messages=[user("a"), assistant("ok: a"), user("thanks")])
    client.chat(model=MODEL, messages=[user("x"), assistant("y"), user("thanks")])

    assert [content for role, content in hilo.events("shared") if role == "user"] == [
        "a", "thanks", "thanks"]


# -- the client's system prompt and the session -----------------------------------------------


def test_the_clients_system_prompt_is_kept_and_memory_added(hilo: HiloServer) -> None:
    hilo.client().put("/memory/profile/city", json={"value": "Madrid"})
    openai_client(hilo, "s1").chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "You are a pirate. Answer in one line."}, user("weather?")])

    system = sent_to_model(hilo, "/v1/chat/completions")[0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a pirate. Answer in one line.")
    assert "city: Madrid" in system["content"]


def test_session_comes_from_the_header_and_the_user_field_names_the_user(hilo: HiloServer) -> None:
    openai_client(hilo, "from-header").chat.completions.create(
        model=MODEL, messages=[user("hi")], user="ana")

    assert hilo.events("from-header", user="ana") == [("user", "hi"), ("assistant", "ok: hi")]
    assert hilo.client().get("/memory/sessions").json()["sessions"] == []  # not the default user's


def test_without_a_session_each_conversation_gets_a_stable_one(hilo: HiloServer) -> None:
    client = ollama_client(hilo)
    first = hilo.client().post("/api/chat", json={"model": MODEL, "stream": False,
                                                  "messages": [user("plan my trip")]})
    client.chat(model=MODEL, messages=[user("plan my trip"), assistant("ok: plan my trip"),
                                       user("to Lisbon")])
    client.chat(model=MODEL, messages=[user("fix my bike")])

    session = first.headers["X-Hilo-Session"]
    assert session.startswith("auto-")
    sessions = hilo.client().get("/memory/sessions").json()["sessions"]
    assert sorted(s["events"] for s in sessions) == [2, 4]
    assert [content for _, content in hilo.events(session)] == [
        "plan my trip", "ok: plan my trip", "to Lisbon", "ok: to Lisbon"]


# -- failures ------------------------------------------------------------------------------


@pytest.fixture
def hilo_without_model(config, data_dir):
    yield from serve(config.replace(llm={"url": unused_loopback_url()}))


def test_model_server_down_ollama_client_gets_503_and_the_message_is_kept(
        hilo_without_model: HiloServer) -> None:
    for stream in (False, True):
        with pytest.raises(ollama.ResponseError) as caught:
            result = ollama_client(hilo_without_model, "s1").chat(
                model=MODEL, messages=[user("are you there?")], stream=stream)
            list(result) if stream else None
        assert caught.value.status_code == 503
        assert "Ollama is not reachable" in caught.value.error
        assert "kept your message" in caught.value.error

    assert hilo_without_model.events("s1") == [("user", "are you there?")]


def test_model_server_down_openai_client_gets_its_error_shape(hilo_without_model: HiloServer) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client(hilo_without_model, "s1").chat.completions.create(
            model=MODEL, messages=[user("are you there?")], stream=True)

    assert caught.value.status_code == 503
    assert caught.value.body["type"] == "api_error"
    assert "not reachable" in caught.value.body["message"]
    assert hilo_without_model.events("s1") == [("user", "are you there?")]


def test_a_reply_cut_mid_stream_ends_with_an_error_chunk_ollama(hilo: HiloServer) -> None:
    hilo.fake.script_chat(Fault.cut_stream(after_chunks=2))
    received = []
    with pytest.raises(ollama.ResponseError) as caught:
        for part in ollama_client(hilo, "s1").chat(
                model=MODEL, messages=[user("tell me a long story")], stream=True):
            received.append(part.message.content)

    assert "".join(received) == "ok: tell "
    assert "stopped after" in caught.value.error
    (_, question), (_, partial) = hilo.events("s1")
    assert question == "tell me a long story"
    assert partial.startswith("ok: tell") and partial.endswith("[interrupted]")


def test_a_reply_cut_mid_stream_ends_with_an_error_chunk_openai(hilo: HiloServer) -> None:
    hilo.fake.script_chat(Fault.cut_stream(after_chunks=1))
    with pytest.raises(openai.APIError) as caught:
        list(openai_client(hilo, "s1").chat.completions.create(
            model=MODEL, messages=[user("tell me a long story")], stream=True))

    assert "stopped after" in caught.value.message
    assert hilo.events("s1")[0] == ("user", "tell me a long story")


def test_an_unknown_model_is_the_servers_404_and_a_hint_naming_the_fix(hilo: HiloServer) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client(hilo, "s1").chat.completions.create(model="llama9:1t", messages=[user("hi")])

    assert caught.value.body["message"] == 'model "llama9:1t" not found, try pulling it first'
    assert "ollama pull llama9:1t" in caught.value.response.headers["X-Hilo-Hint"]


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
@pytest.mark.parametrize("body, message", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    # Numbers JSON does not have: a NaN temperature once reached the model server (a 500).
    (b'{"model": "m", "messages": [], "temperature": NaN}', "NaN is not a number JSON has"),
    (b'{"model": "m", "messages": [], "options": {"temperature": NaN}}', "NaN is not a number"),
    (b'{"model": "m", "messages": [], "top_p": -Infinity}', "-Infinity is not a number"),
    (b'{"model": "m", "messages": [], "temperature": 1e999}', "the number 1e999 is too large"),
])
def test_bad_input_is_a_400_in_the_apis_own_shape(hilo: HiloServer, path: str, body: bytes,
                                                    message: str) -> None:
    response = hilo.client().post(path, content=body, headers={"Content-Type": "application/json"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert message in (error["message"] if path.startswith("/v1/") else error)
    assert hilo.client().get("/memory/sessions").json()["sessions"] == []


@pytest.mark.parametrize("method, path, body", [
    ("post", "/memory/facts", b'{"key": "k", "value": "v", "importance": NaN}'),
    ("put", "/memory/profile/city", b'{"value": "Lisbon", "n": Infinity}'),
    ("post", "/memory/tasks", b'{"schedule": "every day at 9", "prompt": "x", "n": NaN}'),
    ("post", "/memory/context", b'{"session_id": "s", "text": "x", "budget": 1e400}'),
])
def test_non_finite_numbers_are_a_400_on_every_json_route(hilo: HiloServer, method: str,
                                                          path: str, body: bytes) -> None:
    response = getattr(hilo.client(), method)(path, content=body,
                                              headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert "not valid JSON" in response.json()["error"]
    assert "send a finite number" in response.json()["error"]


def test_wrongly_typed_fields_are_a_422_naming_the_field(hilo: HiloServer) -> None:
    response = hilo.client().post("/api/chat", json={"model": MODEL, "messages": "hello"})

    assert response.status_code == 422
    assert "messages" in response.json()["error"]


def test_an_oversized_body_is_refused(config, data_dir, fake_ollama, monkeypatch) -> None:
    monkeypatch.setattr(api_server, "MAX_BODY_BYTES", 10_000)
    for server in serve(config, fake_ollama):
        body = {"model": MODEL, "messages": [user("x" * 20_000)]}
        response = server.client().post("/api/chat", json=body)
        chunked = server.client().post("/v1/chat/completions", content=iter(
            [json.dumps(body).encode()]), headers={"Content-Type": "application/json"})

        assert response.status_code == 413
        assert "at most 10000 bytes" in response.json()["error"]
        assert chunked.status_code == 413
        assert "at most 10000 bytes" in chunked.json()["error"]["message"]


def test_a_long_message_is_stored_truncated_with_a_marker(config, data_dir, fake_ollama) -> None:
    for server in serve(config.replace(memory={"max_message_chars": 1000}), fake_ollama):
        ollama_client(server, "s1").chat(model=MODEL, messages=[user("y" * 5000)])

        stored = server.events("s1")[0][1]
        assert len(stored) == 1000 and stored.endswith("5000 characters in all]")


# -- pass-through ---------------------------------------------------------------------------


def test_ollama_tags_and_show_are_passed_through(hilo: HiloServer) -> None:
    client = ollama_client(hilo)

    assert [m.model for m in client.list().models] == [
        "gemma3:4b", "nomic-embed-text:latest", "qwen2.5:3b"]
    assert client.show(MODEL).modelinfo["gemma3.context_length"] == 8192
    with pytest.raises(ollama.ResponseError) as caught:
        client.show("missing:1b")
    assert caught.value.status_code == 404


def test_openai_models_lists_the_model_servers_models(hilo: HiloServer) -> None:
    models = openai_client(hilo).models.list()

    assert [m.id for m in models.data] == ["gemma3:4b", "nomic-embed-text:latest", "qwen2.5:3b"]


def test_tags_with_the_model_server_down_is_a_clear_503(hilo_without_model: HiloServer) -> None:
    response = hilo_without_model.client().get("/api/tags")

    assert response.status_code == 503
    assert "Ollama is not reachable" in response.json()["error"]


def test_the_openapi_document_lists_every_route_with_a_summary(hilo: HiloServer) -> None:
    document = hilo.client().get("/openapi.json").json()

    operations = {(method.upper(), path): op for path, item in document["paths"].items()
                  for method, op in item.items()}
    assert {("POST", "/api/chat"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
            ("GET", "/api/tags"), ("POST", "/api/show"), ("GET", "/memory/search"),
            ("POST", "/memory/context"), ("GET", "/health")} <= operations.keys()
    assert all(op.get("summary") for op in operations.values())
