"""`hilo chat` with tools, driven on a pseudo-terminal as a person drives it: the model
(the fake server) asks for terminal commands; an allowed one runs, the rest ask "once /
always / deny", and a command that smuggles a second one past a rule, or carries an
option no rule covers, is asked about, saying why it cannot be allowed always."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from tests.cli.support import PROMPT, leave, rows, say
from tests.fake_ollama import FakeOllama, Reply

pytestmark = pytest.mark.slow  # hilo chat as a process, driven through a terminal

QUESTION = r"\? \[o\]nce"


def run(*commands: str) -> list[Reply]:
    """The model's side of a turn: one terminal call per command, then an answer."""
    return [*(Reply(tool_calls=[{"name": "terminal", "arguments": {"command": command}}])
              for command in commands), "Done."]


@pytest.fixture
def chat(start_chat, monkeypatch, tmp_path) -> Callable[..., pexpect.spawn]:
    """`hilo chat` with the terminal working in tmp_path and `echo *` allowed in config."""
    monkeypatch.setenv("HILO_TOOLS_TERMINAL_WORKDIR", str(tmp_path))
    monkeypatch.setenv("HILO_TOOLS_TERMINAL_ALLOW_RULES", '["echo *"]')

    def start() -> pexpect.spawn:
        child = start_chat()
        child.logfile_read = io.StringIO()
        return child

    return start


def transcript(child: pexpect.spawn) -> str:
    return child.logfile_read.getvalue()


def tool_results(data_dir: Path) -> list[str]:
    return [content for (content,) in rows(data_dir, "SELECT content FROM events WHERE role = "
                                                     "'tool' ORDER BY id")]


def test_an_allowed_command_runs_without_asking(chat, fake_ollama: FakeOllama, data_dir):
    fake_ollama.script_chat(*run("echo hello from the terminal"))
    child = chat()
    say(child, "say hello in the terminal")
    child.expect("⚙ terminal: echo hello from the terminal")
    child.expect("↳ hello from the terminal")
    child.expect("Done.")
    child.expect(PROMPT)
    assert "Run `" not in transcript(child)
    assert tool_results(data_dir) == [
        "$ echo hello from the terminal\nhello from the terminal\n[exit status 0]"]
    leave(child)


def test_allow_once_runs_it_and_asks_again_next_time(chat, fake_ollama, data_dir):
    fake_ollama.script_chat(*run("printf first"), *run("printf second"))
    child = chat()
    for word in ("first", "second"):
        say(child, f"print {word}")
        child.expect(rf"Run `printf {word}`{QUESTION}, \[a\]lways \(exactly this command\), "
                     r"or \[d\]eny:")  # prompt_toolkit draws the trailing space as a cursor move
        say(child, "o")
        child.expect(f"↳ {word}")
        child.expect(PROMPT)
    assert rows(data_dir, "SELECT rule FROM terminal_allow_rules") == []
    leave(child)


def test_allow_always_stores_the_command_and_does_not_ask_again(chat, fake_ollama, data_dir):
    fake_ollama.script_chat(*run("printf first"), *run("printf first"))
    child = chat()
    say(child, "print first")
    child.expect(f"Run `printf first`{QUESTION}")
    say(child, "a")
    child.expect("↳ first")
    child.expect(PROMPT)
    say(child, "print first again")
    child.expect("↳ first")
    child.expect(PROMPT)
    assert "Run `" not in transcript(child).split("print first again", 1)[1]
    assert rows(data_dir, "SELECT user_id, rule FROM terminal_allow_rules") == [
        ("default", "printf first")]
    leave(child)


def test_deny_runs_nothing_and_the_model_is_told(chat, fake_ollama, data_dir, tmp_path):
    fake_ollama.script_chat(*run("touch denied-file"))
    child = chat()
    say(child, "make a file")
    child.expect(f"Run `touch denied-file`{QUESTION}")
    say(child, "d")
    child.expect("↳ error: not run: the user denied `touch denied-file`")
    child.expect("Done.")
    child.expect(PROMPT)
    assert not (tmp_path / "denied-file").exists()
    told = fake_ollama.bodies("/api/chat")[-1]["messages"][-1]
    assert (told["role"], told["content"]) == (
        "tool", "error: not run: the user denied `touch denied-file`")
    leave(child)


def test_a_command_smuggled_past_an_allow_rule_is_asked_about(chat, fake_ollama, data_dir,
                                                              tmp_path):
    fake_ollama.script_chat(*run("echo hi; touch smuggled"))
    child = chat()
    say(child, "say hi")
    child.expect(r"Run `echo hi; touch smuggled`\? \[o\]nce or \[d\]eny \(it has shell "
                 r"characters: it cannot be allowed always\):")
    say(child, "d")
    child.expect(PROMPT)
    assert not (tmp_path / "smuggled").exists()
    assert tool_results(data_dir) == ["error: not run: the user denied `echo hi; touch smuggled`"]
    leave(child)


def test_a_refused_option_is_asked_about_saying_why(chat, fake_ollama, data_dir, tmp_path):
    fake_ollama.script_chat(*run("find . -maxdepth 0 -exec touch x {} +"))
    child = chat()
    say(child, "find it")
    child.expect(r"Run `find \. -maxdepth 0 -exec touch x \{\} \+`\? \[o\]nce or \[d\]eny "
                 r"\(find -exec runs another command: it cannot be allowed always\):")
    say(child, "d")
    child.expect(PROMPT)
    assert not (tmp_path / "x").exists()
    leave(child)


def test_tools_lists_the_tools_and_the_allowed_commands(chat, data_dir):
    child = chat()
    say(child, "/tools")
    child.expect("terminal: Run a command on the user's computer")
    child.expect(r"Commands that run without asking: echo \*")
    child.expect(PROMPT)
    leave(child)
