"""How fast the model server reads a prompt, from its own counters (app/model/prompt_speed.py)."""

from __future__ import annotations

import pytest

from app.model.prompt_speed import PromptSpeed
from app.model.usage import engine_time


def prompt_read(frame: dict) -> tuple[int, float] | None:
    engine = engine_time(frame)
    return engine.prompt_read if engine is not None else None


def test_ollamas_and_llama_cpps_counters_are_both_read():
    assert prompt_read({"prompt_eval_count": 500, "prompt_eval_duration": 250_000_000}) == (
        500, 250.0)
    assert prompt_read({"timings": {"prompt_n": 120, "prompt_ms": 60.5}}) == (120, 60.5)
    # A cached prompt read nothing anew; a server that says nothing tells no speed.
    assert prompt_read({"prompt_eval_count": 0, "prompt_eval_duration": 0}) is None
    assert prompt_read({"prompt_eval_count": 500}) is None
    assert prompt_read({"timings": {"prompt_n": 5, "prompt_ms": "fast"}}) is None


def test_the_speed_is_that_of_recent_reads_and_short_reads_do_not_count():
    speed = PromptSpeed()
    assert speed.tokens_per_second("m") is None
    speed.observe("m", (10, 1000.0))  # ten tokens: the engine's fixed cost, not its speed
    assert speed.tokens_per_second("m") is None
    speed.observe("m", (600, 1000.0))
    speed.observe("m", (400, 1000.0))
    assert speed.tokens_per_second("m") == pytest.approx(500.0)
    for _ in range(20):  # the engine moved to a GPU: old reads age out
        speed.observe("m", (3000, 1000.0))
    assert speed.tokens_per_second("m") == pytest.approx(3000.0)
    assert speed.tokens_per_second("other") is None


def test_a_turn_learns_the_engines_speed_from_its_reply(fake_ollama, config, data_dir):
    from app.turn.chat import ChatService

    cfg = config.replace(llm={"url": fake_ollama.url})
    with ChatService(cfg) as service:
        assert service.prompt_speed.tokens_per_second(cfg.llm.chat_model) is None
        service.start_turn("ana", "s", "tell me about the garden " * 30).run()
        assert service.prompt_speed.tokens_per_second(cfg.llm.chat_model) > 0
