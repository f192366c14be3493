"""The terminal tool's safety, piece by piece: which commands an allowed prefix covers
(and which smuggle a second command past it), who may approve the rest, what a command
runs with, and what of its output is kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.config import Config
from app.turn.tools import ToolFailed
from app.turn.tools.terminal import (
    allowed_prefixes,
    matching_prefix,
    prefix_to_allow,
    run_command,
    scrubbed_environment,
)
from tests.fake_ollama import FakeOllama, Reply
from tests.cli.test_messages import hilo

USER = "default"


# -- prefixes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, prefixes, expected", [
    ("ls", ["ls"], "ls"),
    ("ls -la /tmp", ["ls"], "ls"),
    ("df -h /", ["df -h"], "df -h"),
    ("df /", ["df -h"], None),  # word by word: "df -h" does not cover plain df
    ("lsblk", ["ls"], None),  # a prefix is whole words, not characters
    ("git status --short", ["git log", "git status"], "git status"),
    ("'ls' -la", ["ls"], "ls"),  # quoting is read as the shell would
])
def test_a_prefix_covers_commands_that_start_with_its_words(command, prefixes, expected):
    assert matching_prefix(command, prefixes) == expected


@pytest.mark.parametrize("command", [
    "ls; rm -rf ~",
    "ls && rm -rf ~",
    "ls || rm -rf ~",
    "ls | sh",
    "ls & rm -rf ~",
    "ls `rm -rf ~`",
    "ls $(rm -rf ~)",
    "ls ${HOME}",
    "ls > /etc/passwd",
    "ls < /dev/zero",
    "ls\nrm -rf ~",
    "ls\r\nrm -rf ~",
    "ls (rm)",
    "ls \\; rm",
    "ls 'unclosed",
])
def test_shell_metacharacters_never_smuggle_a_command_past_a_prefix(command):
    assert matching_prefix(command, ["ls"]) is None


def test_allow_always_stores_the_program_never_a_command_with_metacharacters():
    assert prefix_to_allow("git status --short") == "git"
    assert prefix_to_allow("ls; rm -rf ~") is None
    assert prefix_to_allow("echo $(id)") is None


# -- running -------------------------------------------------------------------------------------


def test_the_environment_loses_credentials_and_keeps_the_rest():
    env = {"PATH": "/usr/bin", "HOME": "/home/ana", "LANG": "C.UTF-8", "TERM": "xterm",
           "OPENAI_API_KEY": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
           "GITHUB_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
           "DB_PASSWORD": "hunter2", "AWS_SECRET_ACCESS_KEY": "x", "SSH_AUTH_SOCK": "/tmp/agent",
           "HILO_SERVER_TOKEN": "t", "HILO_LLM_URL": "http://127.0.0.1:11434",
           "INNOCENT_NAME": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}
    assert scrubbed_environment(env) == {"PATH": "/usr/bin", "HOME": "/home/ana",
                                         "LANG": "C.UTF-8", "TERM": "xterm"}


def test_a_command_runs_without_a_shell(tmp_path):
    run = run_command("echo a; echo b", shell=False, cwd=tmp_path, timeout=10, output_chars=100)
    assert (run.output, run.exit_status) == ("a; echo b\n", 0)  # `;` was just a character


def test_with_the_shell_configured_a_command_line_is_a_shell_line(tmp_path):
    run = run_command("echo a; echo b", shell=True, cwd=tmp_path, timeout=10, output_chars=100)
    assert run.output == "a\nb\n"


def test_a_command_runs_in_the_working_directory_with_stdin_closed(tmp_path):
    run = run_command(f"{sys.executable} -c \"import os, sys; print(os.getcwd()); "
                      "print(repr(sys.stdin.read()))\"",
                      shell=False, cwd=tmp_path, timeout=10, output_chars=1000)
    assert run.output.splitlines() == [str(tmp_path), "''"]


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path):
    run = run_command("sh -c 'sleep 60 & sleep 60'", shell=False, cwd=tmp_path, timeout=0.5,
                      output_chars=100)
    assert run.timed_out and run.exit_status is None
    assert "[killed after 0.5 s: the command did not finish in time]" in run.report(100, 0.5)


def test_huge_output_is_cut_and_says_how_much_there_was(tmp_path):
    run = run_command("seq 1 1000000", shell=False, cwd=tmp_path, timeout=30, output_chars=1000)
    assert len(run.output) == 1000 and run.output.startswith("1\n2\n3\n")
    assert run.total_bytes == 6888896
    report = run.report(1000, 30)
    assert "[… output cut: 6888896 bytes in all, the first 1000 characters shown]" in report
    assert report.endswith("[exit status 0]")


def test_a_missing_program_is_an_error_the_model_reads(tmp_path):
    with pytest.raises(ToolFailed, match="no program 'no-such-program-here' on the PATH"):
        run_command("no-such-program-here", shell=False, cwd=tmp_path, timeout=5,
                    output_chars=100)


# -- who may run what --------------------------------------------------------------------------


class Answers:
    """An approver with its answers scripted, recording what it was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str | None]] = []

    def approve_command(self, command: str, prefix: str | None) -> Any:
        self.asked.append((command, prefix))
        return self.answers.pop(0)

    def confirm_macro(self, description: str) -> bool:
        return False


@pytest.fixture
def cfg(config: Config, data_dir: Path, fake_ollama: FakeOllama, tmp_path: Path) -> Config:
    return config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"},
                          tools={"terminal_workdir": str(tmp_path),
                                 "terminal_allowed_prefixes": ("echo",)})


@pytest.fixture
def service(cfg: Config) -> Iterator[ChatService]:
    with ChatService(cfg) as service:
        yield service


def terminal(fake: FakeOllama, *commands: str) -> None:
    """Script the model: run each command in turn, then answer."""
    fake.script_chat(*(Reply(tool_calls=[{"name": "terminal", "arguments": {"command": c}}])
                       for c in commands), "Done.")


def at_once(fake: FakeOllama, *commands: str) -> None:
    """Script the model: ask for every command in one reply (before it has read any
    output: tests/turn/test_outside_content.py has what follows once it has), then answer."""
    fake.script_chat(Reply(tool_calls=[{"name": "terminal", "arguments": {"command": c}}
                                       for c in commands]), "Done.")


def results(agent: Agent, **kwargs: Any) -> list[str]:
    outcome = agent.start_turn(USER, "s1", "go", **kwargs).run()
    return [e.content for e in outcome.tool_events]


def test_an_allowed_command_runs_without_asking(service, fake_ollama):
    approver = Answers()
    terminal(fake_ollama, "echo hello")
    assert results(Agent(service, surface="chat", approver=approver)) == [
        "$ echo hello\nhello\n[exit status 0]"]
    assert approver.asked == []


def test_once_always_and_deny(service, fake_ollama, cfg):
    approver = Answers("once", "deny", "always")
    agent = Agent(service, surface="chat", approver=approver)
    terminal(fake_ollama, "printf once", "printf denied", "printf always", "printf again")
    assert results(agent) == ["$ printf once\nonce\n[exit status 0]",
                              "error: not run: the user denied `printf denied`",
                              "$ printf always\nalways\n[exit status 0]",
                              "$ printf again\nagain\n[exit status 0]"]
    assert approver.asked == [("printf once", "printf"), ("printf denied", "printf"),
                              ("printf always", "printf")]
    assert allowed_prefixes(service.reader(), cfg, USER) == ["echo", "printf"]


def test_a_smuggled_command_is_asked_about_not_run_under_the_prefix(service, fake_ollama):
    approver = Answers("deny")
    terminal(fake_ollama, "echo hi; touch smuggled")
    assert results(Agent(service, surface="chat", approver=approver)) == [
        "error: not run: the user denied `echo hi; touch smuggled`"]
    assert approver.asked == [("echo hi; touch smuggled", None)]  # never "always"


def test_an_untrusted_task_runs_only_allowed_prefixes_and_asks_nobody(service, fake_ollama):
    at_once(fake_ollama, "echo allowed", "printf refused")
    assert results(Agent(service, surface="task")) == [
        "$ echo allowed\nallowed\n[exit status 0]",
        "error: not run: `printf refused` starts with no allowed prefix and this task is not "
        "trusted; the user can allow a prefix ([tools] terminal_allowed_prefixes) or mark the "
        "task trusted (hilo tasks add --trusted)"]


def test_a_trusted_task_runs_any_command_without_a_shell(service, fake_ollama, tmp_path):
    at_once(fake_ollama, "printf trusted", "echo hi; touch smuggled")
    assert results(Agent(service, surface="task"), trusted=True) == [
        "$ printf trusted\ntrusted\n[exit status 0]",
        "$ echo hi; touch smuggled\nhi; touch smuggled\n[exit status 0]"]
    assert not (tmp_path / "smuggled").exists()


def test_output_is_sanitised_before_it_is_stored(service, fake_ollama):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    terminal(fake_ollama, f"echo token={token}")
    [stored] = results(Agent(service, surface="task"))
    assert token not in stored and "[REDACTED:" in stored
    for body in fake_ollama.bodies("/api/chat")[1:]:  # nor does the model read it back
        assert token not in json.dumps(body["messages"][-1])


def test_hilo_terminal_allows_lists_and_revokes_prefixes(data_dir):
    where = ("--data-dir", str(data_dir))
    assert hilo("terminal", "allow", "df -h", *where).stdout == "Allowed: df -h …\n"
    refused = hilo("terminal", "allow", "ls; rm", *where)
    assert refused.returncode == 1 and "cannot be allowed: a prefix is plain words" in refused.stderr
    listed = json.loads(hilo("terminal", "allowed", "--json", *where).stdout)
    assert [(p["prefix"], p["source"]) for p in listed] == [("df -h", "stored")]
    assert hilo("terminal", "revoke", "df -h", *where).returncode == 0
    assert hilo("terminal", "allowed", *where).stdout == "(none: every command asks first)\n"
