"""A scheduled task's prompt is not the user speaking (issue 15): memory learns from what
its runs found, never from their instructions — no fact, profile key or card saying
"the user said: check in briefly"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.events import session_events
from app.learn.compact import compact_session
from app.learn.distill import capture_turn, distill_turn
from app.model.client import ModelClient
from app.tasks.store import add_task
from app.turn.agent import Agent
from app.turn.chat import ChatService
from tests.workers.support import query, read_only, scripted_model, worker_config
from workers.scheduler import run_due_tasks

UTC = UTC
USER = "default"
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def as_task(service: ChatService) -> Agent:
    """The worker's runner of scheduled tasks over `service`."""
    return Agent(service, surface="task")


@pytest.fixture
def setup(config, data_dir, writer, fake_ollama):
    cfg = worker_config(config, fake_ollama)
    fake_ollama.responder = scripted_model
    with ModelClient.from_config(cfg) as model:
        yield cfg, writer, model, fake_ollama


def run_task(setup, prompt: str, replies: list[str]) -> tuple[str, list[int]]:
    """Add a task running every 15 minutes and run it once per reply, as the worker does;
    its session and the ids of the events its runs stored."""
    cfg, writer, _, fake = setup
    task = add_task(writer, cfg, "every 15 minutes", prompt, now=NOW, source="cli",
                    from_outside=False).task  # the owner's, at the machine
    fake.script_chat(*replies)
    with ChatService(cfg, writer=writer) as service:
        for n in range(len(replies)):
            [result] = run_due_tasks(cfg, writer, as_task(service), NOW + timedelta(minutes=15 * (n + 1)))
            assert result.status == "done"
    con = read_only(cfg)
    try:
        ids = [e.id for e in session_events(con, USER, task.session_id)]
    finally:
        con.close()
    return task.session_id, ids


def test_the_tasks_instructions_are_no_fact_and_what_it_found_is_one(setup):
    cfg, writer, model, fake = setup
    session, ids = run_task(setup, "Check in briefly", ["All quiet: the NAS backup finished at 02:00."])
    # A model that takes the instructions for the user's words, and also the finding:
    fake.script_generate({"profile": {}, "facts": [
        {"category": "conversation", "key": "check-in", "value": "check in briefly"},
        {"category": "fact", "key": "nas backup", "value": "the NAS backup finished at 02:00"}]})
    result = distill_turn(writer, model, cfg, USER, session, ids)
    facts = query(cfg, "SELECT key, value, source_event_id FROM facts WHERE deleted_at IS NULL")
    assert facts == [("nas backup", "the NAS backup finished at 02:00", ids[-1])]
    assert result.dropped == 1
    prompt = fake.bodies("/api/generate")[0]["prompt"]
    assert "TASK (instructions, context only): Check in briefly" in prompt
    assert "RESULT: All quiet" in prompt and "USER:" not in prompt


def test_the_rule_based_fallback_captures_nothing_from_the_instructions(setup):
    cfg, writer, _, _ = setup
    session, ids = run_task(setup, "Remember that my name is Nilo and greet me",
                            ["Good morning, Nilo!"])
    capture_turn(writer, cfg, USER, session, ids)
    assert query(cfg, "SELECT key, value FROM profile") == []
    assert query(cfg, "SELECT key, value FROM facts") == []


def test_a_tasks_card_is_told_the_instructions_are_not_the_user(setup):
    cfg, writer, model, fake = setup
    runs = cfg.memory.compaction_threshold // 2  # a prompt and a reply each: one chunk due
    session, _ = run_task(setup, "Check in briefly", [f"All quiet, check {n}." for n in range(runs)])
    assert compact_session(writer, model, cfg, USER, session)
    card_prompts = [b["prompt"] for b in fake.bodies("/api/generate")
                    if "summary" in b["format"]["properties"]]
    assert "INSTRUCTIONS (not the user speaking): Check in briefly" in card_prompts[0]
    assert "USER: Check in briefly" not in card_prompts[0]


def test_a_quoted_card_of_a_task_quotes_what_it_found(setup):
    cfg, writer, _, _ = setup
    runs = cfg.memory.compaction_threshold // 2  # a prompt and a reply each: one chunk due
    session, _ = run_task(setup, "Check in briefly", [f"All quiet, check {n}." for n in range(runs)])
    assert compact_session(writer, None, cfg, USER, session, extractive=True)
    [(summary, keywords)] = query(cfg, "SELECT summary, keywords FROM context_cards")
    assert "Check in briefly" not in summary and "briefly" not in keywords
    assert summary.startswith("assistant: All quiet, check 0.")
