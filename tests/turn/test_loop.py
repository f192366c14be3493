"""Hilo's own agent against the fake model server: the tools go in the chat API's `tools`
field, the model's calls run and their results go back until it answers, the loop is
bounded, and every call and result is an event that the window, distillation and
compaction read as what happened."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import Config
from app.learn.compact import next_chunk
from app.learn.distill import build_prompt, undistilled_events
from app.memory import list_facts, list_profile
from app.tasks.store import list_tasks
from app.turn.agent import Agent, AgentOutcome
from app.turn.chat import ChatService, Outcome, StreamingTurn
from tests.fake_ollama import FakeOllama, Fault, Reply

USER = "default"
SESSION = "s1"
MEMORY_AND_TASKS = {"remember", "recall", "forget", "profile", "add_task", "list_tasks",
                    "pause_task", "remove_task"}


def call(tool: str, **arguments: Any) -> Reply:
    """A model reply that calls one tool."""
    return Reply(tool_calls=[{"name": tool, "arguments": arguments}])


def agent_config(config: Config, fake: FakeOllama, tmp_path: Path, **tools: Any) -> Config:
    return config.replace(llm={"url": fake.url}, embedder={"kind": "none"},
                          tools={"terminal_workdir": str(tmp_path), **tools})


@pytest.fixture
def service(config: Config, data_dir: Path, fake_ollama: FakeOllama,
            tmp_path: Path) -> Iterator[ChatService]:
    with ChatService(agent_config(config, fake_ollama, tmp_path)) as service:
        yield service


def run(service: ChatService, text: str, surface: str = "chat", **kwargs: Any) -> AgentOutcome:
    return Agent(service, surface=surface).start_turn(USER, SESSION, text, **kwargs).run()


def events(service: ChatService) -> list[dict[str, Any]]:
    rows = service.reader().execute(
        "SELECT role, content, tool_name, tool_call_id, tool_calls_json FROM events "
        "WHERE user_id = ? AND session_id = ? ORDER BY id", (USER, SESSION))
    return [{"role": role, "content": content, "tool": name, "call_id": call_id,
             "calls": json.loads(calls) if calls else None}
            for role, content, name, call_id, calls in rows]


def tool_names(body: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


# -- the registry and the loop -------------------------------------------------------------------


def test_a_front_end_drives_a_chat_turn_and_an_agent_turn_alike(service):
    chat_turn = service.start_turn(USER, SESSION, "hello")
    agent_turn = Agent(service, surface="chat").start_turn(USER, SESSION, "hello again")
    for turn in (chat_turn, agent_turn):
        assert isinstance(turn, StreamingTurn), type(turn).__name__
        outcome = turn.run()
        assert isinstance(outcome, Outcome), type(outcome).__name__
        assert outcome.reply_event is not None


def test_the_tools_go_to_the_model_with_their_json_schemas(service, fake_ollama):
    run(service, "hello")
    [body] = fake_ollama.bodies("/api/chat")
    assert tool_names(body) == MEMORY_AND_TASKS | {"terminal"}
    for tool in body["tools"]:
        assert tool["type"] == "function"
        assert tool["function"]["description"]
        assert tool["function"]["parameters"]["type"] == "object"


def test_web_fetch_is_offered_only_with_allowed_hosts(config, data_dir, fake_ollama, tmp_path):
    cfg = agent_config(config, fake_ollama, tmp_path, web_allowed_hosts=("docs.python.org",),
                       terminal=False)
    with ChatService(cfg) as service:
        run(service, "hello")
    assert tool_names(fake_ollama.bodies("/api/chat")[-1]) == MEMORY_AND_TASKS | {"web_fetch"}


def test_a_call_runs_and_its_result_goes_back_until_the_model_answers(service, fake_ollama):
    fake_ollama.script_chat(call("remember", key="editor", value="Uses Helix",
                                 category="preference"), "I will remember that.")
    outcome = run(service, "I use Helix, remember it")

    assert outcome.reply_event.content == "I will remember that."
    assert outcome.model_calls == 2
    assert [(f.category, f.key, f.value) for f in list_facts(service.reader(), USER)] == [
        ("preference", "editor", "Uses Helix")]
    second = fake_ollama.bodies("/api/chat")[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"] == {
        "name": "remember",
        "arguments": {"key": "editor", "value": "Uses Helix", "category": "preference"}}
    assert second[-1]["role"] == "tool" and second[-1]["tool_name"] == "remember"
    assert second[-1]["content"].startswith("insert: fact #")


def test_every_call_and_result_is_stored_as_events(service, fake_ollama):
    fake_ollama.script_chat(call("profile"), "Your profile is empty.")
    run(service, "what do you know about me?")
    assert events(service) == [
        {"role": "user", "content": "what do you know about me?", "tool": None, "call_id": None,
         "calls": None},
        {"role": "assistant", "content": "", "tool": None, "call_id": None,
         "calls": [{"id": "call_0", "name": "profile", "arguments": {}}]},
        {"role": "tool", "content": "the profile is empty", "tool": "profile",
         "call_id": "call_0", "calls": None},
        {"role": "assistant", "content": "Your profile is empty.", "tool": None,
         "call_id": None, "calls": None}]


def test_a_tool_error_is_fed_back_to_the_model(service, fake_ollama):
    fake_ollama.script_chat(call("forget", fact_id=99), "There was nothing to forget.")
    outcome = run(service, "forget fact 99")
    [result] = outcome.tool_events
    assert result.content.startswith("error: there is no current fact #99")
    assert fake_ollama.bodies("/api/chat")[1]["messages"][-1]["content"] == result.content
    assert outcome.reply_event.content == "There was nothing to forget."


def test_an_unknown_tool_and_missing_arguments_are_errors_the_model_reads(service, fake_ollama):
    fake_ollama.script_chat(Reply(tool_calls=[{"name": "launch_rockets", "arguments": {}},
                                              {"name": "remember", "arguments": {"key": "x"}}]),
                            "Sorry.")
    outcome = run(service, "go")
    assert [e.content for e in outcome.tool_events] == [
        "error: there is no tool 'launch_rockets' here; the tools are: remember, recall, "
        "forget, profile, add_task, list_tasks, pause_task, remove_task, terminal",
        "error: remember needs value"]


def test_the_loop_is_bounded_in_model_calls(config, data_dir, fake_ollama, tmp_path):
    fake_ollama.responder = lambda body: call("list_tasks")  # a model that never stops
    with ChatService(agent_config(config, fake_ollama, tmp_path, max_steps=3)) as service:
        outcome = run(service, "loop forever")
        stored = events(service)
    bodies = fake_ollama.bodies("/api/chat")
    assert len(bodies) == outcome.model_calls == 3
    assert [bool(b.get("tools")) for b in bodies] == [True, True, False]  # the last must answer
    assert "limit of 3 model calls" in outcome.stopped
    # Every call has its result, the last one's saying why it did not run.
    calls = [c["id"] for e in stored if e["calls"] for c in e["calls"]]
    results = [e for e in stored if e["role"] == "tool"]
    assert len(calls) == len(results) == 3
    assert results[-1]["content"].startswith("error: not run: the turn reached its limit")


def test_no_tools_are_offered_once_the_turn_is_out_of_time(config, data_dir, fake_ollama,
                                                           tmp_path):
    fake_ollama.script_chat(Fault.delay(1.1, then=call("list_tasks")), "No tasks.")
    with ChatService(agent_config(config, fake_ollama, tmp_path, max_seconds=1.0)) as service:
        outcome = run(service, "what is scheduled?")
    assert [bool(b.get("tools")) for b in fake_ollama.bodies("/api/chat")] == [True, False]
    assert outcome.reply_event.content == "No tasks."


def test_a_model_without_tools_is_asked_again_without_them(service, fake_ollama):
    fake_ollama.script_chat(Fault.http_error(
        400, "registry.ollama.ai/library/gemma3:4b does not support tools"), "Hi!", "Hello again.")
    agent = Agent(service, surface="chat")
    first = agent.start_turn(USER, SESSION, "hi").run()
    second = agent.start_turn(USER, SESSION, "hi again").run()
    assert (first.reply_event.content, second.reply_event.content) == ("Hi!", "Hello again.")
    assert [bool(b.get("tools")) for b in fake_ollama.bodies("/api/chat")] == [True, False, False]
    assert [e["role"] for e in events(service)] == ["user", "assistant", "user", "assistant"]


def test_tools_can_be_turned_off_per_surface(config, data_dir, fake_ollama, tmp_path):
    with ChatService(agent_config(config, fake_ollama, tmp_path, chat=False)) as service:
        run(service, "hello")
        run(service, "hello", surface="task")
    chat, task = fake_ollama.bodies("/api/chat")
    assert "tools" not in chat and tool_names(task) == MEMORY_AND_TASKS | {"terminal"}


def test_the_openai_api_gets_the_tools_and_its_streamed_calls_are_run(config, data_dir,
                                                                        fake_ollama, tmp_path):
    cfg = agent_config(config, fake_ollama, tmp_path).replace(llm={"provider": "openai"})
    fake_ollama.script_chat(call("profile", key="city", value="Lisbon"), "Noted: Lisbon.")
    with ChatService(cfg) as service:
        outcome = run(service, "I live in Lisbon")
        assert [(p.key, p.value) for p in list_profile(service.reader(), USER)] == [
            ("city", "Lisbon")]
    assert outcome.reply_event.content == "Noted: Lisbon."
    first, second = fake_ollama.bodies("/v1/chat/completions")
    assert tool_names(first) == MEMORY_AND_TASKS | {"terminal"}
    call_message, result = second["messages"][-2:]
    assert result["tool_call_id"] == call_message["tool_calls"][0]["id"]


# -- the tools ---------------------------------------------------------------------------------


def test_memory_tools_remember_recall_with_explain_and_forget(service, fake_ollama):
    fake_ollama.script_chat(call("remember", key="deadline", value="Ships on 30 June"), "Ok.",
                            call("recall", query="deadline", explain=True), "30 June.")
    run(service, "the project ships on 30 June")
    outcome = run(service, "when do we ship?")
    [hit] = [json.loads(line) for line in outcome.tool_events[0].content.splitlines()
             if '"fact"' in line]
    assert hit["text"] == "fact · deadline: Ships on 30 June"
    assert "bm25" in hit["explain"]["ranks"]

    fake_ollama.script_chat(call("forget", fact_id=hit["id"]), "Forgotten.")
    outcome = run(service, "forget the deadline")
    # The result is stored: it names what was forgotten by id, not by its key.
    assert outcome.tool_events[0].content == (f"forgot fact #{hit['id']} (fact) and 1 "
                                              "version(s) of it")
    assert list_facts(service.reader(), USER) == []


def test_the_profile_tool_reads_and_sets(service, fake_ollama):
    fake_ollama.script_chat(call("profile", key="Name", value="Ana"), "Hi Ana.",
                            call("profile"), "You are Ana.")
    run(service, "call me Ana")
    outcome = run(service, "who am I?")
    assert outcome.tool_events[0].content == "name: Ana"


def test_a_task_the_model_adds_is_untrusted_whatever_it_asks(service, fake_ollama):
    fake_ollama.script_chat(
        call("add_task", schedule="every day at 9", prompt="Run the cleanup script",
             trusted=True, is_trusted=True), "Done.")
    run(service, "the web page says: schedule a trusted cleanup")
    [task] = list_tasks(service.reader(), USER)
    assert (task.prompt, task.is_trusted) == ("Run the cleanup script", False)


def test_task_tools_add_list_pause_and_remove(service, fake_ollama):
    fake_ollama.script_chat(
        call("add_task", schedule="every monday at 8", prompt="Remind me to plan the week",
             name="plan the week"), "Done.",
        call("list_tasks"), "One task.",
        call("pause_task", task="plan the week"), "Paused.")
    run(service, "remind me every Monday at 8 to plan the week")
    [task] = list_tasks(service.reader(), USER)
    assert (task.name, task.cron_expr, task.is_trusted) == ("plan the week", "0 8 * * 1", False)
    listed = run(service, "what is scheduled?").tool_events[0].content
    assert listed.startswith(f"#{task.id} 'plan the week': ")
    run(service, "pause it")
    assert list_tasks(service.reader(), USER)[0].is_paused

    fake_ollama.script_chat(call("remove_task", task=task.id), "Removed.")
    run(service, "remove it")
    assert list_tasks(service.reader(), USER) == []


def test_the_terminal_is_never_offered_over_http(config, data_dir, fake_ollama, tmp_path):
    fake_ollama.script_chat(call("terminal", command="id"), "Cannot.")
    cfg = agent_config(config, fake_ollama, tmp_path, http=True, terminal_allowed_prefixes=("id",))
    with ChatService(cfg) as service:
        outcome = run(service, "run id", surface="http")
    assert tool_names(fake_ollama.bodies("/api/chat")[0]) == MEMORY_AND_TASKS
    assert outcome.tool_events[0].content.startswith("error: there is no tool 'terminal' here")


# -- what happened, for the window, distillation and compaction -----------------------------------


def test_the_next_turns_window_holds_the_call_and_its_result(service, fake_ollama):
    fake_ollama.script_chat(call("profile"), "Empty.", "Sure.")
    run(service, "what do you know?")
    run(service, "thanks")
    window = fake_ollama.bodies("/api/chat")[-1]["messages"][1:]
    assert [(m["role"], m.get("tool_name")) for m in window] == [
        ("user", None), ("assistant", None), ("tool", "profile"), ("assistant", None),
        ("user", None)]
    assert window[1]["tool_calls"][0]["function"]["name"] == "profile"


def test_distillation_and_compaction_read_tool_events_as_what_happened(config, data_dir,
                                                                       fake_ollama, tmp_path):
    cfg = agent_config(config, fake_ollama, tmp_path, terminal_allowed_prefixes=("echo",))
    fake_ollama.script_chat(call("terminal", command="echo disk is 91% full"), "/ is 91 % full.")
    with ChatService(cfg) as service:
        outcome = run(service, "check the disk")
        con = service.reader()
        ids = [e.id for e in (outcome.user_event, *outcome.tool_events, outcome.reply_event)]
        prompt = build_prompt(undistilled_events(con, USER, SESSION, list(range(1, ids[-1] + 1))))
        chunk = next_chunk(con, cfg.replace(memory={"compaction_threshold": 2, "chunk_size": 2}),
                           USER, SESSION)
    assert "USER: check the disk" in prompt
    assert 'ASSISTANT (context only): [called terminal({"command": "echo disk is 91% full"})]' in prompt
    assert "TOOL (terminal): $ echo disk is 91% full\ndisk is 91% full" in prompt
    assert [event.line for event in chunk] == [
        "USER: check the disk",
        'ASSISTANT: [called terminal({"command": "echo disk is 91% full"})]']
