"""Retries with backoff, then degradation that is written, ends the job, and is listed."""

from __future__ import annotations

import random

from tests.fake_ollama import Fault
from tests.workers.support import (
    add_turn,
    drain,
    handoff,
    query,
    scalar,
    scripted_model,
)
from workers import jobs
from workers.handoff import queue_handoff
from workers.queue import failed_jobs, huey
from workers.retry import MAX_DELAY_SECONDS, backoff_delay, total_backoff


def test_model_down_for_the_first_calls_then_up_the_facts_appear(cfg, writer, fake_ollama):
    fake_ollama.script_generate(Fault.http_500("loading"), Fault.http_500("loading"))
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "Remember code alpha7"))
    drain()
    assert query(cfg, "SELECT key, value FROM facts") == [("item7", "alpha7")]
    assert len(fake_ollama.bodies("/api/generate")) == 3
    assert failed_jobs() == []


def test_an_unreachable_model_is_retried_like_a_failing_one(cfg, writer, fake_ollama, bound_queue):
    from tests.fake_ollama import unused_loopback_url

    down = cfg.replace(llm={"url": unused_loopback_url(), "connect_timeout_seconds": 0.5})
    bound_queue(down)
    handoff.after_reply("ana", "s1", add_turn(writer, down, "ana", "s1", "Remember code alpha1"))
    drain()
    # The embed job cannot reach the model either; this test is about distill's failure.
    [failure] = [f for f in failed_jobs() if f.error.startswith("learn facts from")]
    assert "not reachable" in failure.error and "after 3 attempt(s)" in failure.error


def test_garbage_forever_writes_the_fallback_ends_the_job_and_lists_the_failure(cfg, writer, fake_ollama):
    fake_ollama.responder = lambda body: "I'd rather chat about the weather."
    ids = add_turn(writer, cfg, "ana", "s1",
                   "Me llamo Ana y uso neovim. Recuerda que el backup es a las 2.")
    handoff.after_reply("ana", "s1", ids)
    drain()
    assert len(fake_ollama.bodies("/api/generate")) == 2  # asked, asked again once, no more
    assert query(cfg, "SELECT key, value, source FROM profile") == [("name", "Ana", "agent")]
    assert sorted(query(cfg, "SELECT category, value FROM facts")) == [
        ("fact", "el backup es a las 2"), ("preference", "uses neovim")]
    assert set(r[0] for r in query(cfg, "SELECT worker FROM memory_log")) == {"distill-rules"}
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 0
    assert huey.pending_count() == 0 and huey.scheduled_count() == 0
    [failure] = failed_jobs()
    # A sentence saying which job, not Python's repr ("JobDegraded('…')").
    assert "JobDegraded" not in failure.error
    assert failure.error.startswith("learn facts from the new messages of session s1, for ana")
    assert "fallback" in failure.error and "not usable" in failure.error


def test_a_diary_the_model_cannot_write_is_asked_twice_then_quoted(cfg, writer, fake_ollama):
    fake_ollama.responder = lambda body: (
        "Dear diary, {entry" if "entry" in body["format"]["properties"] else scripted_model(body))
    add_turn(writer, cfg, "ana", "s1", "Remember code alpha1")
    drain()
    handoff.session_ended("ana", "s1")
    drain()
    diaries = [b for b in fake_ollama.bodies("/api/generate")
               if "entry" in b["format"]["properties"]]
    assert len(diaries) == 2  # not max_attempts: a second unusable answer ends the asking
    assert query(cfg, "SELECT is_extractive FROM diary") == [(1,)]


def test_a_model_that_is_not_pulled_degrades_without_retrying(cfg, writer, fake_ollama):
    fake_ollama.models = []
    handoff.after_reply("ana", "s1", add_turn(writer, cfg, "ana", "s1", "my name is Ana"))
    drain()
    assert len(fake_ollama.bodies("/api/generate")) == 1
    assert query(cfg, "SELECT value FROM profile") == [("Ana",)]
    [failure] = [f for f in failed_jobs() if f.error.startswith("learn facts from")]
    assert "ollama pull" in failure.error


def test_compaction_degrades_to_an_extractive_card(cfg, writer, fake_ollama):
    def responder(body):
        if "summary" in body["format"]["properties"]:
            return "{not json"
        return scripted_model(body)

    fake_ollama.responder = responder
    for n in range(cfg.memory.compaction_threshold // 2):
        handoff.after_reply("ana", "s1", add_turn(
            writer, cfg, "ana", "s1", f"Deploying release {n} of the billing service"))
        drain()  # each turn distilled as it comes: the chunk then needs only its card
    cards = query(cfg, "SELECT summary, keywords, is_extractive, event_count FROM context_cards")
    assert len(cards) == 1 and cards[0][2] == 1 and cards[0][3] == cfg.memory.chunk_size
    assert "Deploying release 0 of the billing service" in cards[0][0]
    assert "billing" in cards[0][1]
    assert any("compact" in f.error for f in failed_jobs())


def test_a_retry_is_scheduled_with_backoff_and_the_next_attempt_number(cfg, writer, fake_ollama,
                                                                        bound_queue):
    slow = cfg.replace(queue={"backoff_base_seconds": 0.2})
    bound_queue(slow)
    fake_ollama.script_generate(Fault.http_500())
    ids = add_turn(writer, slow, "ana", "s1", "Remember code alpha3")
    handoff.after_reply("ana", "s1", ids)
    huey.execute(huey.dequeue())
    [retry] = huey.pending()  # a worker moves it to the schedule until its eta
    assert retry.kwargs == {"attempt": 2} and retry.args == ("ana", "s1", ids)
    assert retry.eta is not None
    drain()
    assert query(cfg, "SELECT value FROM facts") == [("alpha3",)]


def test_backoff_is_exponential_with_jitter_and_capped():
    rng = random.Random(4)
    for attempt in range(1, 8):
        full = min(MAX_DELAY_SECONDS, 2.0 * 2 ** (attempt - 1))
        delays = [backoff_delay(2.0, attempt, rng) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays)
        assert len(set(delays)) > 1
    assert backoff_delay(2.0, 30, rng) <= MAX_DELAY_SECONDS


def test_total_backoff_of_the_defaults(config):
    assert total_backoff(config) == 2 + 4 + 8 + 16


def test_handoff_never_raises_when_the_queue_is_unreachable(config, tmp_path):
    missing = config.replace(data={"dir": str(tmp_path / "no" / "such" / "dir")})
    assert queue_handoff(missing).after_reply("ana", "s1", [1, 2]) is False
    assert queue_handoff(missing).session_ended("ana", "s1") is False
    redis_down = config.replace(queue={"backend": "redis", "redis_url": "redis://127.0.0.1:1/0"})
    assert queue_handoff(redis_down).after_reply("ana", "s1", [1]) is False


def test_session_ended_enqueues_the_diary(cfg, writer):
    add_turn(writer, cfg, "ana", "s1", "Let us plan the migration.")
    assert handoff.session_ended("ana", "s1") is True
    assert [t.name for t in huey.pending()] == [jobs.diary.task_class.__name__]
    drain()
    assert query(cfg, "SELECT entry, is_extractive FROM diary") == [
        ("The user worked through a list of codes with the assistant.", 0)]
    assert query(cfg, "SELECT ended_at IS NOT NULL FROM sessions") == [(1,)]
