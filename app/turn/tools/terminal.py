"""The terminal tool: nothing runs that the user did not allow, everything runs in a
sandbox, and all that ran is on record (the call and its output are events).

A command runs without asking only when an allow rule covers it (terminal_rules.py: the
user's "allow always" answers, table `terminal_allow_rules`, and `[tools]
terminal_allow_rules`; `[tools] terminal_allowed_prefixes` from before rules read as
"PREFIX *"). A rule names the command and its arguments; a command with a shell
metacharacter, or with an option `terminal_rules.refusal` refuses (`find -exec`, `git -c`,
`env`, `sh -c`, a file outside the working folder, …), is covered by no rule. Otherwise:
`hilo chat` asks the person (once / always — exactly this command — / deny; a refused
command only once); a scheduled task runs it only when the user marked the task trusted
and nothing in it is refused (with `terminal_shell` on, shell characters are); over HTTP
the tool does not exist. In a turn that read content from outside (registry.py) no rule
or trust applies: only what the person approves now runs. A command's output is the
owner's data (it ran on their authority), unless the command ran in such a turn.

Commands run without a shell (their words as argv) unless `[tools] terminal_shell`, in
`[tools] terminal_workdir` (default: the user's own folder under the data directory,
never the home directory), under bubblewrap (terminal_sandbox.py: no network, no Unix
socket, read-only but the working folder, a memory cap), with stdin closed, an
environment without secrets, a timeout — the command's own, cut to what is left of the
turn's `[tools] max_seconds` — after which the whole process group is killed, and
output cut at `[tools] terminal_output_chars`. The agent stores the result as an event,
redacted like every event.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from app.config import Config
from app.datadir import DataDir
from app.timeutil import utc_now
from app.turn.tools.registry import OUTSIDE_KINDS, Tool, ToolContext, ToolFailed, schema
from app.turn.tools.terminal_rules import (
    AllowRule,
    InvalidRule,
    has_metacharacters,
    matching_rule,
    plain_words,
    refusal,
    rule_to_store,
)
from app.turn.tools.terminal_sandbox import Sandbox, filter_fd, sandbox_for, scrubbed_environment
from app.writer import Writer

__all__ = ["command_words", "allow_rules", "stored_rules", "allow_rule", "revoke_rule",
           "CommandRun", "run_command", "working_directory", "terminal", "not_run_reason",
           "why_not_always", "TOOL"]

# Bytes read per character kept: UTF-8 takes at most four.
_BYTES_PER_CHAR = 4
# How long to wait for the output of a process whose group was killed but whose pipe a
# detached grandchild still holds.
_DRAIN_SECONDS = 2.0


def command_words(command: str) -> list[str]:
    """The command's words as a POSIX shell splits them; ToolFailed when it does not split."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ToolFailed(f"the command does not parse ({exc}): check its quotes") from None
    if not words:
        raise ToolFailed("the command is empty")
    return words


# -- the allow rules ---------------------------------------------------------------------------


def allow_rules(con: apsw.Connection, config: Config, user_id: str) -> list[AllowRule]:
    """config.toml's rules, its prefixes from before rules, then the user's "allow always"
    answers. ToolFailed naming a config.toml rule that does not read as one."""
    tools = config.tools
    try:
        rules = [*map(AllowRule.parse, tools.terminal_allow_rules),
                 *map(AllowRule.from_prefix, tools.terminal_allowed_prefixes)]
    except InvalidRule as exc:
        raise ToolFailed(f"{exc}: fix [tools] terminal_allow_rules") from None
    for text, _ in stored_rules(con, user_id):
        try:
            rules.append(AllowRule.parse(text))
        except InvalidRule:
            continue  # a migrated prefix that does not read as a rule covers nothing
    return list({rule.text: rule for rule in rules}.values())


def stored_rules(con: apsw.Connection, user_id: str) -> list[tuple[str, str]]:
    """The user's "allow always" answers: (rule, when)."""
    return [(row[0], row[1]) for row in con.execute(
        "SELECT rule, created_at FROM terminal_allow_rules WHERE user_id = ? "
        "ORDER BY created_at", (user_id,))]


def allow_rule(writer: Writer, user_id: str, text: str) -> str:
    """Store an allow rule (as written back by AllowRule: the text `hilo terminal allowed`
    shows); ToolFailed when it does not read as one."""
    try:
        rule = AllowRule.parse(text)
    except InvalidRule as exc:
        raise ToolFailed(str(exc)) from None
    writer.submit(lambda con: con.execute(
        "INSERT OR IGNORE INTO terminal_allow_rules (user_id, rule, created_at) "
        "VALUES (?, ?, ?)", (user_id, rule.text, utc_now())))
    return rule.text


def revoke_rule(writer: Writer, user_id: str, text: str) -> bool:
    """Forget an "allow always" answer; False when there was none."""
    try:
        wanted = {text.strip(), AllowRule.parse(text).text}
    except InvalidRule:
        wanted = {text.strip()}

    def write(con: apsw.Connection) -> bool:
        removed = 0
        for rule in wanted:
            con.execute("DELETE FROM terminal_allow_rules WHERE user_id = ? AND rule = ?",
                        (user_id, rule))
            removed += con.changes()
        return removed > 0

    return writer.submit(write)


# -- running -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandRun:
    command: str
    exit_status: int | None  # None: killed at the timeout
    output: str  # what was kept, decoded
    total_bytes: int  # what the command wrote in all
    timed_out: bool
    seconds: float

    def report(self, output_chars: int, timeout: float, turn_seconds: float | None = None) -> str:
        """The result as the model (and the record) reads it; `turn_seconds`: the timeout
        was what was left of a turn of that many seconds."""
        lines = [f"$ {self.command}"]
        if self.output:
            lines.append(self.output.rstrip("\n"))
        if self.total_bytes > len(self.output.encode("utf-8", "replace")):
            lines.append(f"[… output cut: {self.total_bytes} bytes in all, the first "
                         f"{output_chars} characters shown]")
        if self.timed_out and turn_seconds is not None:
            lines.append(f"[cut after {timeout:.3g} s: the turn ran out of time ([tools] "
                         f"max_seconds = {turn_seconds:g}), the command was killed]")
        elif self.timed_out:
            lines.append(f"[killed after {timeout:g} s: the command did not finish in time]")
        else:
            lines.append(f"[exit status {self.exit_status}]")
        return "\n".join(lines)


def run_command(command: str, *, shell: bool, cwd: Path, timeout: float, output_chars: int,
                sandbox: Sandbox | None, environ: Mapping[str, str] | None = None,
                passed_environment: Iterable[str] = ()) -> CommandRun:
    """Run it (argv, or /bin/sh -c with `shell`) in `sandbox` (None: as it is), stdin
    closed, stdout and stderr together, the environment clean (scrubbed_environment, with
    `passed_environment`); kill its process group
    at `timeout` or when interrupted."""
    argv = ["/bin/sh", "-c", command] if shell else command_words(command)
    env = scrubbed_environment(os.environ if environ is None else environ, passed_environment)
    program = _check_program(argv[0], cwd, env)
    if sandbox is not None and sandbox.hides(program, cwd):
        raise ToolFailed(f"{argv[0]!r} is in {program.parent}, which the sandbox hides from "
                         "commands (an empty /tmp, no /run, no Hilo data): install it elsewhere")
    with filter_fd(sandbox.seccomp) if sandbox is not None else nullcontext(None) as fd:
        if sandbox is not None:
            argv = sandbox.argv(argv, cwd, fd, timeout)
        return _run(argv, command, cwd, env, timeout, output_chars,
                    pass_fds=() if fd is None else (fd,))


def _run(argv: list[str], command: str, cwd: Path, env: Mapping[str, str], timeout: float,
         output_chars: int, pass_fds: tuple[int, ...]) -> CommandRun:
    started = time.monotonic()
    try:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True, pass_fds=pass_fds)
    except FileNotFoundError:
        raise ToolFailed(f"no program {argv[0]!r} on the PATH") from None
    except PermissionError:
        raise ToolFailed(f"{argv[0]!r} is not executable") from None
    limit = output_chars * _BYTES_PER_CHAR
    kept = bytearray()
    total = 0

    def drain() -> None:
        nonlocal total
        assert process.stdout is not None
        try:
            while chunk := os.read(process.stdout.fileno(), 65536):
                total += len(chunk)
                if len(kept) < limit:
                    kept.extend(chunk[: limit - len(kept)])
        except (OSError, ValueError):
            pass  # the pipe was closed under us: the process is gone

    reader = threading.Thread(target=drain, name="terminal-output", daemon=True)
    reader.start()
    timed_out = False
    try:
        status: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        process.wait()
        status, timed_out = None, True
    except BaseException:  # Ctrl-C in the REPL: the command goes with the turn
        _kill_group(process)
        process.wait()
        raise
    finally:
        reader.join(_DRAIN_SECONDS)
        if process.stdout is not None:
            process.stdout.close()
    output = kept.decode("utf-8", "replace")[:output_chars]
    return CommandRun(command, status, output, total, timed_out, time.monotonic() - started)


def _check_program(program: str, cwd: Path, env: Mapping[str, str]) -> Path:
    """Where the program is; ToolFailed for one that is not there (inside the sandbox,
    bwrap would only say so on the command's output)."""
    path = cwd / program if os.sep in program else shutil.which(program, path=env.get("PATH"))
    if path is None or not Path(path).exists():
        raise ToolFailed(f"no program {program!r} on the PATH")
    if not os.access(path, os.X_OK) or Path(path).is_dir():
        raise ToolFailed(f"{program!r} is not executable")
    return Path(os.path.realpath(path))


def _kill_group(process: subprocess.Popen) -> None:
    # The sandbox goes with bwrap: its processes die with their namespace.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def working_directory(config: Config, user_id: str) -> Path:
    """`[tools] terminal_workdir`, else the user's own folder under the data directory
    (made here): Hilo's, never the home directory, whose keys and dotfiles (a config.toml
    Hilo would read) no allow rule should reach by default."""
    if not config.tools.terminal_workdir:
        folder = DataDir.of(config).terminal_folder(user_id)
        folder.mkdir(parents=True, exist_ok=True)
        return folder.resolve()
    folder = Path(config.tools.terminal_workdir).expanduser()
    if not folder.is_dir():
        raise ToolFailed(f"the working directory {folder} does not exist: fix [tools] "
                         "terminal_workdir")
    return folder.resolve()


# -- the tool ----------------------------------------------------------------------------------


def terminal(ctx: ToolContext, args: dict[str, Any]) -> str:
    if ctx.surface == "http":
        raise ToolFailed("the terminal never runs over HTTP")
    command = args["command"].strip()
    words = command_words(command)  # refuses what does not parse before anyone is asked
    tools = ctx.config.tools
    folder = working_directory(ctx.config, ctx.user_id)
    sandbox = sandbox_for(ctx.config)  # no sandbox, no command: nobody is asked in vain
    refused = refusal(words, folder)
    if refused is None and tools.terminal_shell and has_metacharacters(command):
        refused = "through the shell its shell characters would run more than one command"
    rules = allow_rules(ctx.service.reader(), ctx.config, ctx.user_id)
    # A turn that read outside content may be steered by it: no rule speaks for the
    # person then, only their yes to this very call.
    covered = (refused is None and not ctx.outside_content
               and matching_rule(command, rules, folder) is not None)
    if not (covered or ctx.preapproved or (ctx.trusted and refused is None)):
        if ctx.approver is None and ctx.outside_content and refused is None:
            raise ToolFailed(f"not run: `{command}` was asked for in a run that read content "
                             f"from outside ({OUTSIDE_KINDS}): no allow rule or trust covers "
                             "it then, only a person at the terminal approving this very call")
        if ctx.approver is None:
            raise ToolFailed(not_run_reason(command, refused, ctx.trusted))
        rule = rule_to_store(command, folder)
        decision = ctx.approver.approve_command(
            command, rule, why_not_always(command, ctx.config, ctx.user_id) if rule is None else "")
        if decision == "deny":
            raise ToolFailed(f"not run: the user denied `{command}`")
        if decision == "always" and rule is not None:
            allow_rule(ctx.service.writer, ctx.user_id, rule)
    timeout = ctx.seconds_left(tools.terminal_timeout_seconds)
    run = run_command(command, shell=tools.terminal_shell, cwd=folder, timeout=timeout,
                      output_chars=tools.terminal_output_chars, sandbox=sandbox,
                      passed_environment=tools.terminal_environment)
    cut_by_turn = timeout < tools.terminal_timeout_seconds
    return run.report(tools.terminal_output_chars, timeout,
                      tools.max_seconds if cut_by_turn else None)


def not_run_reason(command: str, refused: str | None, trusted: bool) -> str:
    """Why a command nobody could be asked about did not run."""
    if refused is not None:
        return (f"not run: `{command}`: {refused}; no allow rule or trusted task runs that, "
                "only a person approving this very call in hilo chat")
    return (f"not run: no allow rule covers `{command}` and this task is not trusted; the "
            "user can allow it (hilo terminal allow, [tools] terminal_allow_rules) or mark "
            "the task trusted (hilo tasks add --trusted)")


def why_not_always(command: str, config: Config, user_id: str) -> str:
    """Why "allow always" is not offered for `command` (rule_to_store said None): what
    the person approving it once should know."""
    words = plain_words(command)
    if words is None:
        return "it has shell characters"
    refused = refusal(words, working_directory(config, user_id))
    if refused is not None:
        return refused
    return "a word of it would read as a rule's placeholder (* or <path>)"


TOOL = Tool(
    "terminal",
    "Run a command on the user's computer and read its output (stdout and stderr, cut "
    "when long) and exit status. Commands the user has not allowed need their approval. "
    "No shell: pipes, redirections and `;` do not work unless the user enabled a shell. "
    'Example: {"command": "df -h /"}',
    schema({"command": {"type": "string", "description": "the command line"}},
           required=("command",)),
    terminal,
    surfaces=frozenset({"chat", "task"}),
)
