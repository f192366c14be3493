"""The fake Ollama server speaks the real API: the official clients work against it,
and its scripts and faults behave as the rest of the suite relies on."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.fake_ollama import (
    MALFORMED_JSON_CONTENT,
    CpuSpeed,
    FakeOllama,
    Fault,
    Reply,
    count_tokens,
    hashed_bag_of_words,
    smallest_instance,
    unused_loopback_url,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
USER_SAYS_HI = [{"role": "user", "content": "hi there"}]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture
def ollama_client(fake_ollama: FakeOllama) -> Iterator[ollama.Client]:
    client = ollama.Client(host=fake_ollama.url)
    yield client
    client.close()


@pytest.fixture
def openai_client(fake_ollama: FakeOllama) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=fake_ollama.url + "/v1", api_key="x", max_retries=0)
    yield client
    client.close()


# ----------------------------------------------------------------------------- the ollama package


def test_ollama_package_streams_a_scripted_chat_reply(fake_ollama, ollama_client):
    fake_ollama.script_chat("The quick brown fox")
    parts = list(ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI, stream=True))
    assert "".join(p.message.content for p in parts) == "The quick brown fox"
    assert len(parts) > 2  # several content chunks, then the done line
    assert parts[-1].done and parts[-1].done_reason == "stop"
    assert parts[-1].prompt_eval_count == count_tokens("hi there")


def test_ollama_package_gets_a_whole_chat_reply_with_token_counts(fake_ollama, ollama_client):
    fake_ollama.script_chat("Hello, Ana.")
    reply = ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI)
    assert reply.message.content == "Hello, Ana."
    assert reply.prompt_eval_count == count_tokens("hi there")
    assert reply.eval_count == count_tokens("Hello, Ana.")


def test_ollama_package_generate_with_a_schema_returns_the_scripted_json(fake_ollama, ollama_client):
    fake_ollama.script_generate({"profile": {"name": "Ana"}})
    reply = ollama_client.generate(model="gemma3:4b", prompt="extract", format={"type": "object"})
    assert json.loads(reply.response) == {"profile": {"name": "Ana"}}


def test_ollama_package_streams_generate(fake_ollama, ollama_client):
    fake_ollama.script_generate("one two three")
    parts = list(ollama_client.generate(model="gemma3:4b", prompt="count", stream=True))
    assert "".join(p.response for p in parts) == "one two three"
    assert parts[-1].done


def test_ollama_package_embeds_a_batch(fake_ollama, ollama_client):
    reply = ollama_client.embed(model="nomic-embed-text", input=["first text", "second text"])
    assert len(reply.embeddings) == 2
    assert all(len(vector) == fake_ollama.embedding_dim for vector in reply.embeddings)


def test_ollama_package_lists_the_configured_models(fake_ollama, ollama_client):
    fake_ollama.models = ["llama3.2:1b", "all-minilm"]
    assert [m.model for m in ollama_client.list().models] == ["llama3.2:1b", "all-minilm:latest"]


def test_ollama_package_shows_model_details(ollama_client):
    shown = ollama_client.show("gemma3:4b")
    assert shown.details.family == "gemma3"
    assert "completion" in shown.capabilities


def test_ollama_package_sees_a_missing_model_as_404(ollama_client):
    with pytest.raises(ollama.ResponseError) as raised:
        ollama_client.chat(model="missing:7b", messages=USER_SAYS_HI)
    assert raised.value.status_code == 404


# ----------------------------------------------------------------------------- the openai package


def test_openai_package_gets_a_completion_with_usage(fake_ollama, openai_client):
    fake_ollama.script_chat("Hi from the fake")
    completion = openai_client.chat.completions.create(model="gemma3:4b", messages=USER_SAYS_HI)
    assert completion.choices[0].message.content == "Hi from the fake"
    assert completion.usage.prompt_tokens == count_tokens("hi there")


def test_openai_package_streams_a_completion(fake_ollama, openai_client):
    fake_ollama.script_chat("streamed over SSE")
    chunks = list(openai_client.chat.completions.create(model="gemma3:4b", messages=USER_SAYS_HI, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed over SSE"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_openai_package_streams_usage_when_asked(fake_ollama, openai_client):
    chunks = list(
        openai_client.chat.completions.create(
            model="gemma3:4b", messages=USER_SAYS_HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.prompt_tokens == count_tokens("hi there")


def test_openai_package_lists_models(fake_ollama, openai_client):
    assert [m.id for m in openai_client.models.list()] == ["gemma3:4b", "nomic-embed-text:latest", "qwen2.5:3b"]


def test_openai_package_gets_embeddings(fake_ollama, openai_client):
    result = openai_client.embeddings.create(model="nomic-embed-text", input=["a cat", "a dog"])
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == pytest.approx(hashed_bag_of_words("a cat"))


def test_openai_package_sees_a_missing_model_as_not_found(openai_client):
    with pytest.raises(openai.NotFoundError) as raised:
        openai_client.chat.completions.create(model="missing:7b", messages=USER_SAYS_HI)
    assert "not found" in str(raised.value)


# ----------------------------------------------------------------------------- wire details


def test_unknown_model_gets_ollamas_exact_404_body(fake_ollama):
    response = httpx.post(f"{fake_ollama.url}/api/chat", json={"model": "qwen9:1b", "messages": USER_SAYS_HI})
    assert response.status_code == 404
    assert response.json() == {"error": 'model "qwen9:1b" not found, try pulling it first'}


def test_chat_streams_ndjson_by_default_with_a_final_done_line(fake_ollama):
    fake_ollama.script_chat("a b")
    response = httpx.post(f"{fake_ollama.url}/api/chat", json={"model": "gemma3:4b", "messages": USER_SAYS_HI})
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert response.headers["content-type"] == "application/x-ndjson"
    assert [line["done"] for line in lines] == [False, False, True]
    assert lines[-1]["message"] == {"role": "assistant", "content": ""}
    assert {"total_duration", "prompt_eval_count", "eval_count"} <= lines[-1].keys()


def test_model_name_without_tag_means_latest(fake_ollama):
    response = httpx.post(f"{fake_ollama.url}/api/embed", json={"model": "nomic-embed-text", "input": "x"})
    assert response.status_code == 200


def test_unknown_path_is_a_plain_404(fake_ollama):
    assert httpx.get(f"{fake_ollama.url}/api/nothing").status_code == 404


# ----------------------------------------------------------------------------- scripting


def test_scripted_replies_are_used_in_order_then_the_default_echo(fake_ollama, ollama_client):
    fake_ollama.script_chat("first", "second")
    replies = [ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI).message.content for _ in range(3)]
    assert replies == ["first", "second", "ok: hi there"]


def test_a_dict_reply_is_sent_as_its_json_text(fake_ollama, ollama_client):
    fake_ollama.script_chat({"name": "Ana", "likes": ["tea"]})
    reply = ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI)
    assert json.loads(reply.message.content) == {"name": "Ana", "likes": ["tea"]}


def test_an_unscripted_json_request_gets_an_empty_object(ollama_client):
    reply = ollama_client.generate(model="gemma3:4b", prompt="extract", format="json")
    assert reply.response == "{}"


def test_the_responder_answers_when_the_script_is_empty(fake_ollama, ollama_client):
    fake_ollama.responder = lambda body: body["messages"][-1]["content"].upper()
    reply = ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI)
    assert reply.message.content == "HI THERE"


def test_every_request_is_recorded_with_its_json_body(fake_ollama, ollama_client):
    ollama_client.generate(model="gemma3:4b", prompt="p", options={"num_ctx": 2048, "temperature": 0.1})
    [body] = fake_ollama.bodies("/api/generate")
    assert body["options"] == {"num_ctx": 2048, "temperature": 0.1}
    assert fake_ollama.requests[-1].method == "POST"


def test_reset_forgets_scripts_requests_and_responder(fake_ollama, ollama_client):
    fake_ollama.script_chat("scripted")
    fake_ollama.responder = lambda body: "dynamic"
    ollama_client.list()
    fake_ollama.reset()
    assert fake_ollama.requests == []
    assert ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI).message.content == "ok: hi there"


def test_token_count_is_a_quarter_of_the_characters_rounded_up():
    assert [count_tokens(t) for t in ["", "abc", "abcd", "abcde"]] == [0, 1, 1, 2]


# ----------------------------------------------------------------------------- embeddings


def test_default_embeddings_are_unit_length_and_deterministic():
    vector = hashed_bag_of_words("the user likes green tea")
    assert math.isclose(sum(x * x for x in vector), 1.0)
    assert vector == hashed_bag_of_words("the user likes green tea")


def test_default_embeddings_rank_texts_sharing_words_as_closer():
    query = hashed_bag_of_words("green tea in the morning")
    assert cosine(query, hashed_bag_of_words("she drinks green tea every morning")) > cosine(
        query, hashed_bag_of_words("the deploy failed on friday")
    )


@pytest.mark.parametrize("path", ["/api/embed", "/v1/embeddings"])
@pytest.mark.parametrize("value", [5, True, {"text": "x"}, ["a", 1]])
def test_an_input_that_is_not_text_is_refused_as_ollama_does(fake_ollama, path, value):
    response = httpx.post(f"{fake_ollama.url}{path}", json={"model": "nomic-embed-text",
                                                             "input": value})
    assert response.status_code == 400
    assert "invalid input type" in response.text


def test_embed_fn_replaces_the_default_embedding(fake_ollama, ollama_client):
    fake_ollama.embed_fn = lambda text: [float(len(text)), 0.0]
    assert ollama_client.embed(model="nomic-embed-text", input=["abc"]).embeddings == [[3.0, 0.0]]


# ----------------------------------------------------------------------------- faults


def test_scripted_faults_fail_the_next_calls_then_replies_resume(fake_ollama, ollama_client):
    fake_ollama.script_chat(Fault.http_500("busy"), Fault.http_500("busy"), "recovered")
    statuses = []
    for _ in range(2):
        with pytest.raises(ollama.ResponseError) as raised:
            ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI)
        statuses.append((raised.value.status_code, raised.value.error))
    assert statuses == [(500, "busy"), (500, "busy")]
    assert ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI).message.content == "recovered"


def test_delay_fault_then_answers_normally(fake_ollama, ollama_client):
    fake_ollama.script_chat(Fault.delay(0.01, then="late but fine"))
    assert ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI).message.content == "late but fine"


def test_cut_stream_sends_n_chunks_then_drops_without_a_done_line(fake_ollama):
    fake_ollama.script_chat(Fault.cut_stream(after_chunks=2))
    fake_ollama.responder = lambda body: "one two three four"
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", f"{fake_ollama.url}/api/chat", json={"model": "gemma3:4b", "messages": USER_SAYS_HI}) as r:
            for line in r.iter_lines():
                received.append(json.loads(line))
    assert [frame["message"]["content"] for frame in received] == ["one ", "two "]
    assert not any(frame["done"] for frame in received)


def test_malformed_json_on_a_plain_request_is_a_body_that_is_not_json(fake_ollama):
    fake_ollama.script_chat(Fault.malformed_json())
    response = httpx.post(
        f"{fake_ollama.url}/api/chat", json={"model": "gemma3:4b", "messages": USER_SAYS_HI, "stream": False}
    )
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_malformed_json_on_a_format_request_is_broken_json_content(fake_ollama, ollama_client):
    fake_ollama.script_generate(Fault.malformed_json())
    reply = ollama_client.generate(model="gemma3:4b", prompt="extract", format={"type": "object"})
    assert reply.response == MALFORMED_JSON_CONTENT


def test_embed_faults_are_scripted_separately(fake_ollama, ollama_client):
    fake_ollama.script_embed(Fault.http_500("embedder crashed"))
    with pytest.raises(ollama.ResponseError):
        ollama_client.embed(model="nomic-embed-text", input="x")
    assert len(ollama_client.embed(model="nomic-embed-text", input="x").embeddings) == 1


def test_unused_loopback_url_refuses_connections():
    with pytest.raises(httpx.ConnectError):
        httpx.get(unused_loopback_url())


def test_stopped_server_refuses_connections():
    fake = FakeOllama().start()
    url = fake.url
    fake.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)


# ----------------------------------------------------------------------------- tools, thinking, schemas, images

PARIS = Reply(thinking="hmm", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_package_gets_scripted_tool_calls_and_thinking(fake_ollama, ollama_client, stream):
    fake_ollama.script_chat(PARIS)
    reply = ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI, stream=stream)
    parts = list(reply) if stream else [reply]
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert "".join(p.message.thinking or "" for p in parts) == "hmm"


@pytest.mark.parametrize("stream", [False, True])
def test_openai_package_gets_scripted_tool_calls(fake_ollama, openai_client, stream):
    fake_ollama.script_chat(PARIS)
    reply = openai_client.chat.completions.create(model="gemma3:4b", messages=USER_SAYS_HI, stream=stream)
    if stream:
        chunks = list(reply)
        arguments = "".join(d.function.arguments or "" for c in chunks if c.choices
                            for d in c.choices[0].delta.tool_calls or [])
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        arguments = reply.choices[0].message.tool_calls[0].function.arguments
        finish = reply.choices[0].finish_reason
    assert json.loads(arguments) == {"city": "Paris"} and finish == "tool_calls"


def test_a_json_schema_gets_the_smallest_value_that_satisfies_it(fake_ollama, ollama_client):
    schema = {"type": "object", "required": ["name", "tags", "home"], "properties": {
        "name": {"type": "string"}, "tags": {"type": "array"}, "home": {"$ref": "#/$defs/Place"}},
        "$defs": {"Place": {"type": "object", "properties": {"city": {"enum": ["Lisbon"]}}}}}
    reply = ollama_client.chat(model="gemma3:4b", messages=USER_SAYS_HI, format=schema)
    assert json.loads(reply.message.content) == smallest_instance(schema) == {
        "name": "x", "tags": [], "home": {"city": "Lisbon"}}


def test_images_are_recorded_and_acknowledged(fake_ollama, ollama_client):
    reply = ollama_client.chat(model="gemma3:4b", messages=[
        {"role": "user", "content": "what?", "images": ["aGVsbG8="]}])
    assert reply.message.content == "ok: what? [saw 1 image]"
    assert fake_ollama.images() == ["aGVsbG8="]


@pytest.mark.parametrize("keep_alive, reason", [(None, "load"), (0, "unload")])
def test_empty_messages_load_or_unload_the_model(fake_ollama, keep_alive, reason):
    body = {"model": "gemma3:4b", "messages": []} | ({} if keep_alive is None else {"keep_alive": keep_alive})
    assert httpx.post(f"{fake_ollama.url}/api/chat", json=body).json()["done_reason"] == reason


def test_model_management_endpoints(fake_ollama, ollama_client):
    assert [p.status for p in ollama_client.pull("tiny:1b", stream=True)][-1] == "success"
    assert ollama_client.copy("tiny:1b", "tiny2:1b").status == "success"
    assert ollama_client.delete("tiny2:1b").status == "success"
    assert [m.model for m in ollama_client.ps().models] == ["gemma3:4b"]
    with pytest.raises(ollama.ResponseError):
        ollama_client.delete("tiny2:1b")


def test_a_body_without_content_type_is_read_as_json(fake_ollama):
    response = httpx.post(f"{fake_ollama.url}/api/chat", content=json.dumps(
        {"model": "gemma3:4b", "messages": USER_SAYS_HI, "stream": False}).encode())
    assert response.json()["message"]["content"] == "ok: hi there"
    assert fake_ollama.bodies("/api/chat")[0]["stream"] is False


# ----------------------------------------------------------------------------- a CPU model


@pytest.fixture
def cpu_model() -> Iterator[FakeOllama]:
    """A fake serving models as a fast CPU would: one slot per model, a KV cache."""
    fake = FakeOllama(cpu=CpuSpeed(prompt_tokens_per_second=4000, generate_tokens_per_second=4000))
    fake.start()
    yield fake
    fake.stop()


def _chat(fake: FakeOllama, messages: list[dict], model: str = "gemma3:4b") -> dict:
    return httpx.post(f"{fake.url}/api/chat", json={"model": model, "messages": messages,
                                                    "stream": False}, timeout=30).json()


def test_a_cpu_model_reads_anew_only_what_follows_the_cached_prefix(cpu_model):
    history = [{"role": "system", "content": "Be brief. " * 40}, {"role": "user", "content": "hello"}]
    first = _chat(cpu_model, history)
    history += [first["message"], {"role": "user", "content": "and then?"}]
    second = _chat(cpu_model, history)
    assert first["prompt_eval_cached_count"] == 0
    # The whole first prompt and its reply are cached: only the new turn is read.
    assert second["prompt_eval_cached_count"] > 0.9 * second["prompt_eval_count"]
    one, two = cpu_model.evaluations
    assert one.cached_chars == 0 and one.new_chars == one.prompt_chars
    assert two.new_chars == len("<|end|>\n<|user|>\nand then?<|end|>\n<|assistant|>\n")


def test_another_prompt_to_the_same_model_evicts_the_cache(cpu_model):
    history = [{"role": "system", "content": "Be brief. " * 40}, {"role": "user", "content": "hello"}]
    first = _chat(cpu_model, history)
    httpx.post(f"{cpu_model.url}/api/generate", json={"model": "gemma3:4b", "prompt": "extract facts",
                                                      "stream": False}, timeout=30)
    _chat(cpu_model, [*history, first["message"], {"role": "user", "content": "and then?"}])
    last = cpu_model.evaluations[-1]
    assert last.new_chars > 0.95 * last.prompt_chars  # read again from (almost) the start


def test_each_model_has_its_own_slot(cpu_model):
    history = [{"role": "user", "content": "hello " * 50}]
    _chat(cpu_model, history)
    _chat(cpu_model, [{"role": "user", "content": "something else"}], model="qwen2.5:3b")
    _chat(cpu_model, history)
    assert cpu_model.evaluations[-1].cached_chars == cpu_model.evaluations[-1].prompt_chars


def test_a_cpu_model_serves_one_request_at_a_time(cpu_model):
    cpu_model.cpu = CpuSpeed(prompt_tokens_per_second=2000, generate_tokens_per_second=2000)
    with httpx.Client(timeout=30) as client:
        threads = [threading.Thread(target=client.post, args=(f"{cpu_model.url}/api/chat",), kwargs={
            "json": {"model": "gemma3:4b", "messages": [{"role": "user", "content": f"question {i} " * 100}],
                     "stream": False}}) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    served = sorted(cpu_model.evaluations, key=lambda e: e.started)
    assert len(served) == 3
    for earlier, later in zip(served, served[1:], strict=False):
        assert earlier.ended <= later.started
    assert any(e.waited_behind for e in served)


def test_a_client_that_hangs_up_is_dropped_and_frees_the_model(cpu_model):
    cpu_model.cpu = CpuSpeed(prompt_tokens_per_second=50, generate_tokens_per_second=50)
    body = {"model": "gemma3:4b", "prompt": "long " * 2000, "stream": False}  # 50 s to read
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{cpu_model.url}/api/generate", json=body, timeout=0.3)
    cpu_model.cpu = CpuSpeed(prompt_tokens_per_second=4000, generate_tokens_per_second=4000)
    assert _chat(cpu_model, USER_SAYS_HI)["message"]["content"] == "ok: hi there"
    dropped, served = cpu_model.evaluations
    assert dropped.dropped and not served.dropped
    assert dropped.ended <= served.started


# ----------------------------------------------------------------------------- command line


def test_command_line_server_prints_its_url_serves_a_script_and_stops_on_sigterm(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"chat": ["from the script file", {"fault": "http_500", "message": "scripted"}]}))
    command = [sys.executable, "-m", "tests.fake_ollama", "--port", "0", "--script-file", str(script)]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            url = process.stdout.readline().strip()
            with ollama.Client(host=url) as client:
                assert client.chat(model="gemma3:4b", messages=USER_SAYS_HI).message.content == "from the script file"
                with pytest.raises(ollama.ResponseError):
                    client.chat(model="gemma3:4b", messages=USER_SAYS_HI)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_command_line_server_runs_without_pytest_installed():
    """`make run`'s venv has no pytest: the standalone server must not need it."""
    without_pytest = ("import runpy, sys; sys.modules['pytest'] = None; "
                      "runpy.run_module('tests.fake_ollama', run_name='__main__', alter_sys=True)")
    command = [sys.executable, "-c", without_pytest, "--port", "0"]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        try:
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), process.stderr.read()
            assert "gemma3:4b" in httpx.get(f"{url}/api/tags", timeout=10).text
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
