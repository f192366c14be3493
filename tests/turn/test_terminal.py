"""The terminal tool's safety, piece by piece: what an allow rule covers (and which
commands smuggle more past it), the options no rule covers, who may approve the rest,
what a command runs with, and what of its output is kept. The sandbox itself:
test_terminal_sandbox.py."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import db
from app.config import Config
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.turn.tools import ToolFailed
from app.turn.tools.terminal import allow_rules, run_command
from app.turn.tools.terminal_rules import (
    AllowRule,
    InvalidRule,
    matching_rule,
    refusal,
    rule_to_store,
)
from app.turn.tools.terminal_sandbox import Sandbox, sandbox_for
from tests.cli.test_messages import hilo
from tests.fake_ollama import FakeOllama, Reply
from tests.system_tools import interpreter

USER = "default"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("notes\n")
    (folder / "escape").symlink_to("/etc/passwd")
    return folder


def covered(command: str, *rules: str, workdir: Path) -> str | None:
    rule = matching_rule(command, [AllowRule.parse(r) for r in rules], workdir)
    return rule.text if rule else None


# -- allow rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command, expected", [
    ("git status", "git status"),
    ("git status --short", None),  # exact: no further argument
    ("git", None),
    ("'git' status", "git status"),  # quoting is read as the shell would
])
def test_an_exact_rule_covers_that_command_and_nothing_more(command, expected, workdir):
    assert covered(command, "git status", workdir=workdir) == expected


@pytest.mark.parametrize("command, expected", [
    ("ls", "ls *"),
    ("ls -la", "ls *"),
    ("ls -la sub", "ls *"),
    ("lsblk", None),  # a rule is whole words, not characters
    ("df -h /", "df -h *"),
    ("df /", None),  # word by word: "df -h *" does not cover plain df
])
def test_a_trailing_star_covers_any_further_arguments(command, expected, workdir):
    assert covered(command, "ls *", "df -h *", workdir=workdir) == expected


@pytest.mark.parametrize("command, expected", [
    ("cat notes.txt", "cat <path>"),
    ("cat sub/new.txt", "cat <path>"),
    (f"cat {Path('/') / 'tmp'}", None),
    ("cat /etc/passwd", None),
    ("cat ../notes.txt", None),
    ("cat escape", None),  # a symbolic link out of the folder
    ("cat -n notes.txt", None),  # an option is not a path
    ("cat notes.txt notes.txt", None),  # one path, no more
])
def test_a_path_placeholder_covers_one_path_inside_the_working_folder(command, expected,
                                                                      workdir):
    assert covered(command, "cat <path>", workdir=workdir) == expected


def test_an_absolute_path_inside_the_working_folder_is_a_path_in_it(workdir):
    assert covered(f"cat {workdir / 'notes.txt'}", "cat <path>", workdir=workdir) == "cat <path>"


@pytest.mark.parametrize("rule, why", [
    ("* ls", "a rule starts with its program"),
    ("<path>", "a rule starts with its program"),
    ("ls * -la", "`*` stands only as the last word"),
    ("ls; rm", "without shell characters"),
    ("echo $(id)", "without shell characters"),
    ("ls 'unclosed", "check its quotes"),
    ("", "a rule starts with its program"),
])
def test_a_rule_that_does_not_read_as_one_is_refused(rule, why):
    with pytest.raises(InvalidRule, match=why):
        AllowRule.parse(rule)


def test_a_prefix_from_before_rules_covers_what_it_named_word_by_word(workdir):
    rules = [AllowRule.from_prefix("df -h"), AllowRule.from_prefix("git")]
    assert [r.text for r in rules] == ["df -h *", "git *"]
    assert matching_rule("df -h /", rules, workdir) is rules[0]
    assert matching_rule("df /", rules, workdir) is None
    assert matching_rule("git log -n 3", rules, workdir) is rules[1]


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
def test_shell_metacharacters_never_smuggle_a_command_past_a_rule(command, workdir):
    assert covered(command, "ls *", workdir=workdir) is None


# -- what no rule covers ---------------------------------------------------------------------


@pytest.mark.parametrize("rule, command, why", [
    # The examples that ran under a prefix before rules.
    ("find . *", "find . -maxdepth 0 -exec touch pwned {} +", "find -exec runs another command"),
    ("git log *", "git log --output=FILE", "git --output"),
    ("cat notes.txt *", "cat notes.txt /etc/shadow", "/etc/shadow is outside the working folder"),
    ("env *", "env sh -c id", "env runs another command"),
    ("git *", "git -c alias.x=!touch x", "git -c changes git's configuration"),
    ("git log *", "git log -c", None),  # after the subcommand, -c is the subcommand's own
    # find
    ("find . *", "find . -execdir touch x ;", "find -execdir runs another command"),
    ("find . *", "find . -ok rm {} ;", "find -ok runs another command"),
    ("find . *", "find . -delete", "find -delete deletes files"),
    ("find . *", "find . -fprint out", "find -fprint writes a file"),
    ("find *", "find / -name id_rsa", "/ is outside the working folder"),
    # git
    ("git *", "git --exec-path=/tmp log", "git --exec-path"),
    ("git *", "git -C /etc status", "git -C"),
    ("git *", "git --git-dir=/srv/repo log", "git --git-dir"),
    ("git *", "git config alias.x !id", "git config"),
    ("git *", "git log alias.x", "git aliases"),
    ("git *", "git ls-remote --upload-pack=touch .", "git --upload-pack"),
    ("git *", "git clone -u touch . x", "git clone -u"),
    ("git *", "git rebase -x id HEAD~1", "git rebase -x"),
    ("git *", "git grep -O id x", "git grep -O"),
    ("git *", "git format-patch -o /tmp HEAD~1", "git format-patch -o"),
    ("git *", "git submodule foreach id", "git submodule"),
    ("git *", "git clone --template=t . x", "git --template"),
    # shells, interpreters and command runners
    ("sh *", "sh -c id", "sh runs whatever it is given"),
    ("bash *", "bash -c id", "bash runs whatever"),
    ("zsh *", "zsh -c id", "zsh runs whatever"),
    ("python3 *", "python3 -c 'import os'", "python -c runs the code"),
    ("python3.11 *", "python3.11 -Ic 'import os'", "python -c runs the code"),
    ("python3 *", "python3 -X dev -c 'import os'", "python -c runs the code"),
    ("perl *", "perl -e 'system(1)'", "perl -e runs the code"),
    ("perl *", "perl -ne 'print' notes.txt", "perl -e runs the code"),
    ("node *", "node --eval=1", "node --eval"),
    ("xargs *", "xargs rm", "xargs runs another command"),
    ("nohup *", "nohup id", "nohup runs another command"),
    ("sudo *", "sudo id", "sudo runs another command"),
    ("vim *", "vim notes.txt", "vim can run any command"),
    # awk, sed
    ("awk *", "awk 'BEGIN { system(\"id\") }'", "system, getline"),
    ("awk *", "awk '{ print | \"sh\" }' notes.txt", "system, getline"),
    ("sed *", "sed s/a/b/e notes.txt", "sed's e, w and r commands"),
    ("sed *", "sed -n 'w /tmp/out' notes.txt", "sed's e, w and r commands"),
    ("sed *", "sed -e 1e notes.txt", "sed's e, w and r commands"),
    ("sed *", "sed -ne 1e notes.txt", "sed's e, w and r commands"),
    ("sed *", "sed -nf x.sd notes.txt", "sed -f runs a script"),
    # file readers: paths outside the working folder
    ("head *", "head -n 5 /etc/passwd", "/etc/passwd is outside"),
    ("tail *", "tail ~/.ssh/id_rsa", "~/.ssh/id_rsa is outside"),
    ("cat *", "cat ../secret", "../secret is outside"),
    ("cat *", "cat escape", "escape is outside"),
    ("grep *", "grep -f/etc/shadow x", "-f/etc/shadow is outside"),
    ("grep *", "grep --file=/etc/shadow x", "--file=/etc/shadow is outside"),
    ("dd *", "dd if=/etc/shadow of=copy", "if=/etc/shadow is outside"),
    ("cp *", "cp /etc/shadow copy", "/etc/shadow is outside"),
    ("curl *", "curl file:///etc/shadow", "curl file: URLs"),
    ("tar *", "tar --to-command=sh -xf x.tar", "tar --to-command"),
    ("less *", "less +!id notes.txt", "less +!id runs commands"),
    ("git *", "git diff --no-index /etc/shadow notes.txt", "/etc/shadow is outside"),
    # programs that run another one through an option
    ("sort *", "sort --compress-program=sh notes.txt", "sort --compress-program runs"),
    ("ssh *", "ssh -oProxyCommand=id host", "ssh -o can run a local command"),
    ("scp *", "scp -S ./x a host:b", "scp -S can run a local command"),
    ("make *", "make --eval=x", "make --eval runs the code"),
    ("wget *", "wget --use-askpass=id x", "wget --use-askpass"),
    # writers, for when the owner runs commands unsandboxed
    ("rm *", "rm -rf /home/ana", "/home/ana is outside"),
    ("tee *", "tee /etc/motd", "/etc/motd is outside"),
    # long options abbreviated, as getopt_long and git's parser take them
    ("tar *", "tar '--checkpoint-act=exec=touch X' --checkpoint=1 -cf u.tar notes.txt",
     "tar --checkpoint-act (for --checkpoint-action) runs another command"),
    ("git ls-remote *", "git ls-remote '--upload-pa=touch X' .",
     "git --upload-pa (for --upload-pack) can write files or run commands"),
    ("git *", "git --git-d=/srv/repo log", "git --git-dir"),
    ("sort *", "sort --compress=sh notes.txt", "sort --compress (for --compress-program)"),
    ("wget *", "wget --exec=x http://example.org", "wget --exec (for --execute)"),
    ("node *", "node --ev=1", "node --ev (for --eval) runs the code"),
    ("sed *", "sed --expr='1e touch x' notes.txt", "sed's e, w and r commands"),
    ("sed *", "sed --fi=x.sed notes.txt", "sed -f runs a script"),
    ("sed *", "sed --s notes.txt", "sed --s names no sed option, or more than one"),
    ("sed *", "sed -l 5 '1e touch x' notes.txt", "sed's e, w and r commands"),
    # one-letter options in clusters, and tar's first word without its dash
    ("tar *", "tar -cI gzip -f x.tar notes.txt", "tar -I runs another command"),
    ("tar *", "tar cIf gzip x.tar notes.txt", "tar -I runs another command"),
    ("ssh *", "ssh -vo ProxyCommand=id host", "ssh -o can run a local command"),
    ("rsync *", "rsync -avze ssh a b", "rsync -e runs another command"),
    ("less *", "less -SO log notes.txt", "less -O runs commands or writes files"),
    ("git *", "git clone -qu touch . x", "git clone -u can write files"),
    ("grep *", "grep -rf/etc/shadow x", "-rf/etc/shadow is outside"),
    ("tar *", "tar -xf~/.ssh/keys.tar", "-xf~/.ssh/keys.tar is outside"),
])
def test_dangerous_options_are_refused_whatever_the_rule_says(rule, command, why, workdir):
    words = shlex.split(command)
    if why is None:
        assert refusal(words, workdir) is None and covered(command, rule, workdir=workdir)
        return
    assert why in refusal(words, workdir)
    assert covered(command, rule, workdir=workdir) is None
    try:
        exact = AllowRule.parse(command).text
    except InvalidRule:
        return  # with shell characters it cannot even be written as a rule
    assert covered(command, exact, workdir=workdir) is None  # naming it exactly: still not


@pytest.mark.parametrize("command", [
    "ls -la", "cat notes.txt", "head -n 5 sub/x", "git status --short", "git log -n 3",
    "find . -name '*.py'", "sed -n 1,5p notes.txt", "sed s/error/warning/ notes.txt",
    "awk '{print}' notes.txt", "python3 build.py -c x", "python3 -X dev build.py",
    "grep -rn TODO .", "df -h /", "sed -n -e 1,5p notes.txt", "sed -i.bak s/a/b/ notes.txt",
    "tar --checkpoint=100 -cf u.tar notes.txt", "tar czf u.tgz notes.txt", "tar -tvf u.tar",
    "tar -cf u.tar -- -I", "sed --quiet --regexp-extended s/a/b/ notes.txt",
    "sed --expression=s/a/b/ notes.txt", "git diff --no-ext-diff", "git log --oneline -p",
    "curl -s -e http://example.org/ http://example.org", "rsync -avz src/ dst/",
    "ssh -p 2222 host",
])
def test_ordinary_commands_are_not_refused(command, workdir):
    assert refusal(shlex.split(command), workdir) is None


def test_allow_always_stores_the_whole_command_never_its_first_word(workdir):
    assert rule_to_store("git status --short", workdir) == "git status --short"
    assert rule_to_store("'ls' -la", workdir) == "ls -la"
    assert rule_to_store("grep 'a b' notes.txt", workdir) == "grep 'a b' notes.txt"
    assert rule_to_store("ls; rm -rf ~", workdir) is None
    assert rule_to_store("echo $(id)", workdir) is None
    assert rule_to_store("find . -delete", workdir) is None  # refused: once at most
    assert rule_to_store("ls '*'", workdir) is None  # it would read back as "any arguments"


# -- running -------------------------------------------------------------------------------------


@pytest.fixture(params=["unsandboxed", "bubblewrap"])
def sandbox(request, config: Config) -> Sandbox | None:
    """Each way a command runs: as it is ("none"), and under bubblewrap."""
    return None if request.param == "unsandboxed" else sandbox_for(config)


def test_a_command_runs_without_a_shell(tmp_path, sandbox):
    run = run_command("echo a; echo b", shell=False, cwd=tmp_path, timeout=10, output_chars=100,
                      sandbox=sandbox)
    assert (run.output, run.exit_status) == ("a; echo b\n", 0)  # `;` was just a character


def test_with_the_shell_configured_a_command_line_is_a_shell_line(tmp_path, sandbox):
    run = run_command("echo a; echo b", shell=True, cwd=tmp_path, timeout=10, output_chars=100,
                      sandbox=sandbox)
    assert run.output == "a\nb\n"


def test_a_command_runs_in_the_working_directory_with_stdin_closed(tmp_path, sandbox):
    run = run_command(f"{interpreter()} -c \"import os, sys; print(os.getcwd()); "
                      "print(repr(sys.stdin.read()))\"",
                      shell=False, cwd=tmp_path, timeout=10, output_chars=1000, sandbox=sandbox)
    assert run.output.splitlines() == [str(tmp_path), "''"]


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path, sandbox):
    run = run_command("sh -c 'sleep 60 & sleep 60'", shell=False, cwd=tmp_path, timeout=0.5,
                      output_chars=100, sandbox=sandbox)
    assert run.timed_out and run.exit_status is None
    assert "[killed after 0.5 s: the command did not finish in time]" in run.report(100, 0.5)


def test_huge_output_is_cut_and_says_how_much_there_was(tmp_path, sandbox):
    run = run_command("seq 1 1000000", shell=False, cwd=tmp_path, timeout=30, output_chars=1000,
                      sandbox=sandbox)
    assert len(run.output) == 1000 and run.output.startswith("1\n2\n3\n")
    assert run.total_bytes == 6888896
    report = run.report(1000, 30)
    assert "[… output cut: 6888896 bytes in all, the first 1000 characters shown]" in report
    assert report.endswith("[exit status 0]")


def test_a_missing_program_is_an_error_the_model_reads(tmp_path, sandbox):
    with pytest.raises(ToolFailed, match="no program 'no-such-program-here' on the PATH"):
        run_command("no-such-program-here", shell=False, cwd=tmp_path, timeout=5,
                    output_chars=100, sandbox=sandbox)


# -- who may run what --------------------------------------------------------------------------


class Answers:
    """An approver with its answers scripted, recording what it was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str | None]] = []

    def approve_command(self, command: str, rule: str | None, why_not_always: str = "") -> Any:
        self.asked.append((command, rule))
        return self.answers.pop(0)

    def confirm_macro(self, description: str) -> bool:
        return False


@pytest.fixture
def cfg(config: Config, data_dir: Path, fake_ollama: FakeOllama, tmp_path: Path) -> Config:
    return config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"},
                          tools={"terminal_workdir": str(tmp_path),
                                 "terminal_allow_rules": ("echo *",)})


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
    approver = Answers("once", "deny", "always", "deny")
    agent = Agent(service, surface="chat", approver=approver)
    terminal(fake_ollama, "printf once", "printf denied", "printf always", "printf always",
             "printf again")
    assert results(agent) == ["$ printf once\nonce\n[exit status 0]",
                              "error: not run: the user denied `printf denied`",
                              "$ printf always\nalways\n[exit status 0]",
                              "$ printf always\nalways\n[exit status 0]",  # not asked again
                              "error: not run: the user denied `printf again`"]
    assert approver.asked == [("printf once", "printf once"), ("printf denied", "printf denied"),
                              ("printf always", "printf always"), ("printf again", "printf again")]
    assert [r.text for r in allow_rules(service.reader(), cfg, USER)] == ["echo *",
                                                                           "printf always"]


def test_allow_always_on_git_status_does_not_allow_git_with_other_options(service, fake_ollama,
                                                                            tmp_path):
    approver = Answers("always", "deny")
    terminal(fake_ollama, "git status", "git -c alias.x=!touch status")
    assert results(Agent(service, surface="chat", approver=approver))[1] == (
        "error: not run: the user denied `git -c alias.x=!touch status`")
    # Asked again, and "always" was not offered for git -c.
    assert approver.asked == [("git status", "git status"), ("git -c alias.x=!touch status", None)]
    terminal(fake_ollama, "git -c alias.x=!touch status")
    assert results(Agent(service, surface="task")) == [
        "error: not run: `git -c alias.x=!touch status`: git -c changes git's configuration or "
        "repository; no allow rule or trusted task runs that, only a person approving this very "
        "call in hilo chat"]


def test_a_smuggled_command_is_asked_about_not_run_under_the_rule(service, fake_ollama):
    approver = Answers("deny")
    terminal(fake_ollama, "echo hi; touch smuggled")
    assert results(Agent(service, surface="chat", approver=approver)) == [
        "error: not run: the user denied `echo hi; touch smuggled`"]
    assert approver.asked == [("echo hi; touch smuggled", None)]  # never "always"


def test_an_untrusted_task_runs_only_what_a_rule_covers_and_asks_nobody(service, fake_ollama):
    at_once(fake_ollama, "echo allowed", "printf refused")
    assert results(Agent(service, surface="task")) == [
        "$ echo allowed\nallowed\n[exit status 0]",
        "error: not run: no allow rule covers `printf refused` and this task is not trusted; "
        "the user can allow it (hilo terminal allow, [tools] terminal_allow_rules) or mark the "
        "task trusted (hilo tasks add --trusted)"]


@pytest.mark.parametrize("prefix, command, why", [
    ("find .", "find . -maxdepth 0 -exec touch pwned {} +", "find -exec runs another command"),
    ("git log", "git log --output=pwned", "git --output can write files or run commands"),
    ("cat notes.txt", "cat notes.txt /etc/shadow", "/etc/shadow is outside the working folder"),
    ("env", "env sh -c 'touch pwned'", "env runs another command"),
    ("git", "git -c alias.x=!touch status", "git -c changes git's configuration or repository"),
])
def test_a_prefix_from_before_rules_no_longer_runs_dangerous_options(cfg, fake_ollama, tmp_path,
                                                                    prefix, command, why):
    (tmp_path / "notes.txt").write_text("notes\n")
    cfg = cfg.replace(tools={"terminal_allowed_prefixes": (prefix,)})
    with ChatService(cfg) as service:
        at_once(fake_ollama, command)
        assert results(Agent(service, surface="task")) == [
            f"error: not run: `{command}`: {why}; no allow rule or trusted task runs that, "
            "only a person approving this very call in hilo chat"]
    assert not (tmp_path / "pwned").exists()


def test_a_trusted_task_runs_any_command_the_refusals_leave(service, fake_ollama, tmp_path):
    at_once(fake_ollama, "printf trusted", "echo hi; touch smuggled", "env sh -c 'touch pwned'")
    assert results(Agent(service, surface="task"), trusted=True) == [
        "$ printf trusted\ntrusted\n[exit status 0]",
        "$ echo hi; touch smuggled\nhi; touch smuggled\n[exit status 0]",
        "error: not run: `env sh -c 'touch pwned'`: env runs another command; no allow rule or "
        "trusted task runs that, only a person approving this very call in hilo chat"]
    assert not (tmp_path / "smuggled").exists() and not (tmp_path / "pwned").exists()


def test_with_the_shell_on_a_trusted_task_runs_no_shell_characters(cfg, fake_ollama,
                                                                   tmp_path):
    with ChatService(cfg.replace(tools={"terminal_shell": True})) as service:
        terminal(fake_ollama, "echo hi; touch smuggled")
        assert results(Agent(service, surface="task"), trusted=True) == [
            "error: not run: `echo hi; touch smuggled`: through the shell its shell characters "
            "would run more than one command; no allow rule or trusted task runs that, only a "
            "person approving this very call in hilo chat"]
    assert not (tmp_path / "smuggled").exists()


def test_a_person_may_run_a_refused_command_once(service, fake_ollama, tmp_path):
    approver = Answers("once")
    terminal(fake_ollama, "find . -maxdepth 0 -exec touch approved {} +")
    assert results(Agent(service, surface="chat", approver=approver)) == [
        "$ find . -maxdepth 0 -exec touch approved {} +\n[exit status 0]"]
    assert approver.asked == [("find . -maxdepth 0 -exec touch approved {} +", None)]
    assert (tmp_path / "approved").exists()


def test_a_command_still_running_when_the_turn_ends_is_cut(cfg, fake_ollama):
    cfg = cfg.replace(tools={"max_seconds": 1.0, "terminal_allow_rules": ("sleep *",)})
    with ChatService(cfg) as service:
        terminal(fake_ollama, "sleep 60")
        [result] = results(Agent(service, surface="task"))
    assert result.startswith("$ sleep 60\n[cut after ")
    assert result.endswith("the turn ran out of time ([tools] max_seconds = 1), the command "
                           "was killed]")


def test_output_is_sanitised_before_it_is_stored(service, fake_ollama):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    terminal(fake_ollama, f"echo token={token}")
    [stored] = results(Agent(service, surface="task"))
    assert token not in stored and "[REDACTED:" in stored
    for body in fake_ollama.bodies("/api/chat")[1:]:  # nor does the model read it back
        assert token not in json.dumps(body["messages"][-1])


def test_hilo_terminal_allows_lists_and_revokes_rules(data_dir):
    where = ("--data-dir", str(data_dir))
    assert hilo("terminal", "allow", "git status", *where).stdout == "Allowed: git status\n"
    assert hilo("terminal", "allow", "cat  <path>", *where).stdout == "Allowed: cat <path>\n"
    refused = hilo("terminal", "allow", "ls; rm", *where)
    assert refused.returncode == 1 and "cannot be allowed: a rule is plain words" in refused.stderr
    listed = json.loads(hilo("terminal", "allowed", "--json", *where).stdout)
    assert [(r["rule"], r["source"]) for r in listed] == [("git status", "stored"),
                                                          ("cat <path>", "stored")]
    assert hilo("terminal", "revoke", "git status", *where).returncode == 0
    assert hilo("terminal", "revoke", "cat <path>", *where).returncode == 0
    assert hilo("terminal", "allowed", *where).stdout == "(none: every command asks first)\n"


def test_prefixes_stored_before_rules_become_rules_that_cover_what_they_named(tmp_path, cfg):
    con = db.connect(tmp_path / "m.sqlite3")
    con.execute(f"CREATE TABLE {db.MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
    for migration in [m for m in db.available_migrations() if m.number < 13]:
        con.execute(migration.sql)
        con.execute(f"INSERT INTO {db.MIGRATIONS_TABLE} VALUES (?, 'then')", (migration.name,))
    con.execute("INSERT INTO terminal_allowed_prefixes VALUES ('ana', 'git', 'then1'), "
                "('ana', 'df -h', 'then2')")

    assert "0014_terminal_allow_rules.sql" in db.migrate(con)

    rules = allow_rules(con, cfg.replace(tools={"terminal_allow_rules": ()}), "ana")
    assert [r.text for r in rules] == ["git *", "df -h *"]
    assert matching_rule("git status", rules, tmp_path) is rules[0]
    assert matching_rule("df -h /", rules, tmp_path) is rules[1]
    assert matching_rule("df /", rules, tmp_path) is None
    assert matching_rule("git -c alias.x=!id status", rules, tmp_path) is None
