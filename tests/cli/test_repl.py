"""`hilo chat` (python -m app.cli chat), driven as a user drives it: a real pseudo-terminal
(pexpect) talking to the REPL process, which talks to the fake Ollama server over HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import pexpect
import pytest

import tests.fake_ollama as fake_module
from app.events import append_events
from app.memory import set_profile, upsert_fact
from app.timeutil import utc_now
from tests.cli.support import PROMPT, REPO_ROOT, USER, WAIT, chat_env, events, leave, rows, say
from tests.fake_ollama import FakeOllama, Fault, unused_loopback_url


class StalledStream:
    """Make the fake's next streamed reply stop after a few pieces, as a slow model does,
    until the server stops."""

    def __init__(self, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch, after_pieces: int) -> None:
        self.fake, self.after_pieces = fake, after_pieces
        self.used = False
        self._send_stream = fake_module._send_stream
        monkeypatch.setattr(fake_module, "_send_stream", self.send)

    def send(self, http, content_type, frames, ending, fault) -> None:
        if self.used:
            return self._send_stream(http, content_type, frames, ending, fault)
        self.used = True
        http.start_stream(content_type)
        for frame in frames[: self.after_pieces]:
            http.write_chunk(frame)
        self.fake.pause(600)  # ends when the fake stops
        try:
            for frame in frames[self.after_pieces:] + ending:
                http.write_chunk(frame)
            http.end_stream()
        except OSError:
            pass  # the client hung up, as it should have


# -- a turn ---------------------------------------------------------------------------------


def test_a_turn_streams_the_scripted_reply_and_stores_both_events(start_chat, fake_ollama, data_dir):
    fake_ollama.script_chat("The capital of France is Paris.")
    child = start_chat()
    say(child, "What is the capital of France?")
    child.expect("The capital of France is Paris.")
    child.expect(PROMPT)

    stored = events(data_dir)
    assert [(role, content) for _, role, content in stored] == [
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is Paris."),
    ]
    (request,) = fake_ollama.bodies("/api/chat")
    assert request["stream"] is True
    assert request["messages"][-1] == {"role": "user", "content": "What is the capital of France?"}
    leave(child)


def test_piped_input_gets_plain_text_and_closes_the_session(data_dir, fake_ollama):
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "chat", "--data-dir", str(data_dir)],
        input="hello there\n/facts\n/nonsense\n", capture_output=True, text=True,
        cwd=str(REPO_ROOT), env=chat_env(fake_ollama.url), timeout=60)

    assert result.returncode == 0, result.stderr
    assert "ok: hello there" in result.stdout
    assert "No facts yet" in result.stdout
    assert "Unknown command /nonsense" in result.stdout
    assert "\x1b[" not in result.stdout
    assert rows(data_dir, "SELECT count(*) FROM sessions WHERE ended_at IS NOT NULL") == [(1,)]


def test_a_missing_data_directory_says_to_run_init(tmp_path, fake_ollama):
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "chat", "--data-dir", str(tmp_path / "nowhere")],
        input="", capture_output=True, text=True, cwd=str(REPO_ROOT),
        env=chat_env(fake_ollama.url), timeout=60)

    assert result.returncode == 1
    assert "run `hilo init` first" in result.stderr


# -- slash commands -------------------------------------------------------------------------


def test_memory_commands_show_profile_facts_cards_diary_tasks_and_search(
        start_chat, writer, data_dir):
    writer.submit(lambda con: set_profile(con, USER, "name", "Ana", source="user", worker="user"))
    fact = writer.submit(lambda con: upsert_fact(
        con, USER, "preference", "editor", "vim [modal]", source="user", worker="user"))
    now = utc_now()
    writer.submit(lambda con: con.execute(
        "INSERT INTO diary (user_id, session_id, entry, created_at) VALUES (?, ?, ?, ?)",
        (USER, "earlier", "We planned the trip to Lisbon.", now)))
    for user, name in ((USER, "morning news"), ("bob", "bob's reminder")):
        writer.submit(lambda con, user=user, name=name: con.execute(
            "INSERT INTO scheduled_tasks (user_id, name, cron_expr, original_schedule, prompt, "
            "source, next_run_at, created_at, updated_at) "
            "VALUES (?, ?, '0 9 * * 1-5', 'every weekday at 9', 'news', 'tool', ?, ?, ?)",
            (user, name, "2030-01-01T09:00:00Z", now, now)))

    child = start_chat()
    assert "Last time: We planned the trip to Lisbon." in child.before  # the greeting
    say(child, "/profile")
    child.expect_exact("name: Ana")
    say(child, "/facts")
    child.expect_exact(f"#{fact.fact_id}")
    child.expect_exact("preference · editor: vim [modal]")
    say(child, "/cards")
    child.expect_exact("No context cards yet")
    say(child, "/diary")
    child.expect_exact("earlier: We planned the trip to Lisbon.")
    say(child, "/tasks")
    child.expect_exact("morning news: every weekday at 9\r\n")
    child.expect_exact("next: 2030-01-01 09:00 (Tuesday)")  # once, in local time
    child.expect(PROMPT)
    assert "bob's reminder" not in child.before
    say(child, "/search editor")
    child.expect_exact(f"fact #{fact.fact_id}")
    child.expect_exact("editor: vim")
    say(child, "/search zeppelin")
    child.expect_exact("Nothing in memory matches 'zeppelin'")
    say(child, "/frobnicate")
    child.expect_exact("Unknown command /frobnicate: type /help")
    say(child, "/help")
    child.expect_exact("/forget <fact id>")
    child.expect(PROMPT)
    leave(child)


def test_forget_tombstones_the_fact_and_says_what_was_forgotten(start_chat, writer, data_dir):
    fact = writer.submit(lambda con: upsert_fact(
        con, USER, "fact", "home city", "Madrid", source="user", worker="user"))
    child = start_chat()

    say(child, f"/forget {fact.fact_id}")
    child.expect_exact(f"Forgot fact #{fact.fact_id}: fact · home city: Madrid")
    say(child, f"/forget {fact.fact_id}")
    child.expect_exact(f"No fact #{fact.fact_id} to forget")
    say(child, "/forget 999")
    child.expect_exact("No fact #999 to forget")
    say(child, "/forget madrid")
    child.expect_exact("Usage: /forget <fact id>")
    say(child, "/facts")
    child.expect_exact("No facts yet")

    (deleted_at,) = rows(data_dir, "SELECT deleted_at FROM facts WHERE id = ?", fact.fact_id)[0]
    assert deleted_at is not None
    leave(child)


def test_explain_shows_layers_budget_and_fact_ranks(start_chat, writer, fake_ollama):
    fact = writer.submit(lambda con: upsert_fact(
        con, USER, "preference", "editor", "vim", source="user", worker="user"))
    child = start_chat()
    say(child, "/explain")
    child.expect_exact("Nothing to explain yet")

    say(child, "Which editor do I use?")
    child.expect_exact("ok: Which editor do I use?")
    child.expect(PROMPT)
    say(child, "/explain")
    child.expect(r"Context of the last turn: \d+ of 3072 tokens")
    child.expect(r"profile\s+empty\s+0/0")
    child.expect(r"facts\s+included\s+1/1")
    child.expect(rf"fact #{fact.fact_id}: relevant \([^)]*bm25 rank 1[^)]*score")
    child.expect(PROMPT)
    assert "editor: vim" in fake_ollama.bodies("/api/chat")[0]["messages"][0]["content"]
    leave(child)


def test_explain_shows_what_each_recalled_message_and_fact_said(start_chat, writer, config,
                                                               fake_ollama):
    fact = writer.submit(lambda con: upsert_fact(
        con, USER, "fact", "sister", "Lucia lives in Porto", source="user", worker="user"))
    earlier = append_events(writer, config, USER, "earlier", [
        ("user", "My sister Lucia moved to Porto last spring", {}),
        ("assistant", "", {"tool_calls": [{"name": "remember", "arguments": {
            "key": "sister", "value": "Lucia lives in Porto"}}]})])
    child = start_chat()
    say(child, "Where does my sister Lucia live?")
    child.expect_exact("ok: Where does my sister Lucia live?")
    child.expect(PROMPT)

    say(child, "/explain")
    child.expect("Context of the last turn")
    child.expect(PROMPT)
    explained = " ".join(child.before.split())
    assert re.search(rf"fact #{fact.fact_id}: relevant \([^)]*\) — fact · sister: Lucia lives "
                     "in Porto", explained), explained
    assert re.search(rf"past message #{earlier[0].id} \(score [^)]*\) — user: My sister Lucia "
                     "moved to Porto last spring", explained), explained
    leave(child)


def test_a_fact_forgotten_mid_session_leaves_the_next_prompt_and_explain(start_chat, writer,
                                                                        fake_ollama):
    fact = writer.submit(lambda con: upsert_fact(
        con, USER, "preference", "editor", "vim", source="user", worker="user"))
    child = start_chat()
    say(child, "Which editor do I use?")
    child.expect_exact("ok: Which editor do I use?")
    child.expect(PROMPT)
    assert "editor: vim" in str(fake_ollama.bodies("/api/chat")[-1]["messages"])

    say(child, f"/forget {fact.fact_id}")
    child.expect_exact(f"Forgot fact #{fact.fact_id}")
    child.expect(PROMPT)
    say(child, "/explain")
    child.expect("Context of the last turn")
    child.expect_exact("1 fact(s) forgotten since")
    assert f"fact #{fact.fact_id}:" not in child.before
    child.expect(PROMPT)
    say(child, "And my shell?")
    child.expect_exact("ok: And my shell?")
    child.expect(PROMPT)
    assert "vim" not in str(fake_ollama.bodies("/api/chat")[-1]["messages"])
    say(child, "/explain")
    child.expect("Context of the last turn")
    child.expect_exact("window: events")  # the last line but the diary's
    assert f"fact #{fact.fact_id}" not in child.before and "forgotten" not in child.before
    child.expect(PROMPT)
    leave(child)


# -- sessions -------------------------------------------------------------------------------


def test_resumed_session_sends_the_earlier_turn_and_keeps_input_history(
        start_chat, fake_ollama, data_dir):
    child = start_chat("--session", "trip")
    assert "No session trip yet" in child.before
    say(child, "My cat is called Miso")
    child.expect_exact("ok: My cat is called Miso")
    child.expect(PROMPT)
    leave(child)

    child = start_chat("--session", "trip")
    assert "Resuming session trip (2 events)" in child.before
    child.send("\x1b[A")  # Up, Up: the lines typed in the previous run, newest first
    child.expect_exact("/exit")
    child.send("\x1b[A")
    child.expect_exact("My cat is called Miso")
    child.sendintr()  # discard it
    child.expect(PROMPT)
    say(child, "What is my cat called?")
    child.expect_exact("ok: What is my cat called?")
    child.expect(PROMPT)

    messages = fake_ollama.bodies("/api/chat")[-1]["messages"]
    assert messages[1:] == [
        {"role": "user", "content": "My cat is called Miso"},
        {"role": "assistant", "content": "ok: My cat is called Miso"},
        {"role": "user", "content": "What is my cat called?"},
    ]
    assert {session for session, _, _ in events(data_dir)} == {"trip"}
    leave(child)


@pytest.mark.parametrize("how", ["/exit", "ctrl-d", "ctrl-c twice"])
def test_leaving_ends_the_session(start_chat, data_dir, how):
    child = start_chat()
    say(child, "hello")
    child.expect_exact("ok: hello")
    child.expect(PROMPT)
    if how == "/exit":
        say(child, "/exit")
    elif how == "ctrl-d":
        child.sendeof()
    else:
        child.sendintr()
        child.expect_exact("Ctrl-C again or Ctrl-D to leave")
        child.expect(PROMPT)
        child.sendintr()
    child.expect(r"Session \S+ closed")
    child.expect(pexpect.EOF)
    child.close()

    assert child.exitstatus == 0
    ((ended_at,),) = rows(data_dir, "SELECT ended_at FROM sessions")
    assert ended_at is not None


# -- failures and interruptions -------------------------------------------------------------


def test_model_down_keeps_the_message_prints_the_problem_and_stays_usable(start_chat, data_dir):
    url = unused_loopback_url()
    child = start_chat(url=url)
    say(child, "hello, anyone there?")
    child.expect_exact(f"Ollama is not reachable at {url}")
    child.expect_exact("your message is saved")
    child.expect(PROMPT)
    say(child, "/facts")
    child.expect_exact("No facts yet")
    child.expect(PROMPT)

    say(child, "/explain")
    child.expect_exact("your last message did not reach the model")
    assert [(role, content) for _, role, content in events(data_dir)] == [
        ("user", "hello, anyone there?")]
    leave(child)


def test_a_reply_cut_mid_stream_keeps_what_arrived_and_says_what_went_wrong(
        start_chat, fake_ollama, data_dir):
    fake_ollama.script_chat(Fault.cut_stream(after_chunks=2))
    child = start_chat()
    say(child, "tell me everything you know")
    child.expect_exact("the reply from")
    child.expect_exact("stopped after")
    child.expect(PROMPT)
    say(child, "try again")
    child.expect_exact("ok: try again")
    child.expect(PROMPT)

    replies = [content for _, role, content in events(data_dir) if role == "assistant"]
    assert replies == ["ok: tell  [interrupted]", "ok: try again"]  # two chunks arrived
    leave(child)


def test_ctrl_c_stops_a_slow_reply_keeps_it_marked_and_the_repl_continues(
        start_chat, fake_ollama, data_dir, monkeypatch):
    StalledStream(fake_ollama, monkeypatch, after_pieces=3)
    fake_ollama.script_chat("Once upon a time there was a story that went on and on")
    child = start_chat()
    say(child, "Tell me a story")
    child.expect_exact("Once upon a")
    child.sendintr()
    child.expect_exact("[interrupted]")
    child.expect(PROMPT)
    say(child, "still there?")
    child.expect_exact("ok: still there?")
    child.expect(PROMPT)

    replies = [content for _, role, content in events(data_dir) if role == "assistant"]
    assert replies[0].startswith("Once upon a ") and replies[0].endswith("[interrupted]")
    assert "story that went on" not in replies[0]
    assert replies[1] == "ok: still there?"
    leave(child)


def test_ctrl_c_while_waiting_for_the_first_piece_keeps_the_message(
        start_chat, fake_ollama, data_dir, monkeypatch):
    waiting = threading.Event()
    pause = fake_ollama.pause

    def observed_pause(seconds: float) -> None:
        if seconds > 0:
            waiting.set()
        pause(seconds)

    monkeypatch.setattr(fake_ollama, "pause", observed_pause)
    fake_ollama.script_chat(Fault.delay(600, then="too late"))
    child = start_chat()
    say(child, "are you awake?")
    assert waiting.wait(WAIT), "the REPL never asked the model"
    child.sendintr()
    child.expect_exact("[interrupted before the reply began]")
    child.expect(PROMPT)
    say(child, "now?")
    child.expect_exact("ok: now?")
    child.expect(PROMPT)

    assert [(role, content) for _, role, content in events(data_dir)] == [
        ("user", "are you awake?"), ("user", "now?"), ("assistant", "ok: now?")]
    leave(child)
