"""The terminal tool: nothing runs that the user did not allow, and all that ran is on
record (the call and its output are events).

A command runs without asking only when its words start with an allowed prefix — the
user's "allow always" answers (table `terminal_allowed_prefixes`) and `[tools]
terminal_allowed_prefixes` — compared word by word ("ls" allows `ls -la`, not `lsblk`).
A command holding a shell metacharacter (`;`, `&`, `|`, a backtick, `$`, a redirection,
parentheses, a backslash, a newline) never matches a prefix, so `ls; rm -rf ~` is not
an `ls`. Otherwise: `hilo chat` asks the person (once / always / deny); a scheduled
task runs it only when the user marked the task trusted; over HTTP the tool does not
exist. A turn that read content from outside runs as untrusted (registry.py): only what
an allowed prefix covers, or the person approves now.

Commands run without a shell (their words as argv) unless `[tools] terminal_shell`,
in `[tools] terminal_workdir` (default: home), with stdin closed, an environment
without secrets (variables named like keys, tokens or passwords, Hilo's own, and any
whose value looks like a credential), a timeout after which the whole process group is
killed, and output cut at `[tools] terminal_output_chars`. The agent stores the result
as an event, redacted like every event.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import apsw

from app.config import Config
from app.sanitize import secret_kind
from app.timeutil import utc_now
from app.turn.tools.registry import OUTSIDE_KINDS, Tool, ToolContext, ToolFailed, schema
from app.writer import Writer

METACHARACTERS = re.compile(r"[;&|`$<>()\\\n\r\x00]")
# Environment variables never handed to a command: credentials by name, and Hilo's own.
SECRET_NAME = re.compile(r"(?i)(key|token|secret|passw|credential|auth|cookie|session|private"
                         r"|^hilo_)")
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


def has_metacharacters(command: str) -> bool:
    return METACHARACTERS.search(command) is not None


def _plain_words(command: str) -> list[str] | None:
    """The command's words, or None when it holds a shell metacharacter or does not
    split (an unclosed quote): such a command never matches or earns a prefix."""
    if has_metacharacters(command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


def matching_prefix(command: str, prefixes: list[str]) -> str | None:
    """The allowed prefix the command starts with, word by word; None when none does or
    the command holds a shell metacharacter."""
    words = _plain_words(command)
    if words is None:
        return None
    for prefix in prefixes:
        try:
            wanted = shlex.split(prefix)
        except ValueError:
            continue
        if wanted and words[: len(wanted)] == wanted:
            return prefix
    return None


def prefix_to_allow(command: str) -> str | None:
    """What "allow always" stores for a command: its program (first word). None for a
    command with metacharacters: that can be allowed once, never always."""
    words = _plain_words(command)
    return words[0] if words else None


# -- the allowed prefixes ----------------------------------------------------------------------


def allowed_prefixes(con: apsw.Connection, config: Config, user_id: str) -> list[str]:
    """config.toml's prefixes, then the user's "allow always" answers."""
    stored = [row[0] for row in con.execute(
        "SELECT prefix FROM terminal_allowed_prefixes WHERE user_id = ? ORDER BY created_at",
        (user_id,))]
    return list(dict.fromkeys([*config.tools.terminal_allowed_prefixes, *stored]))


def stored_prefixes(con: apsw.Connection, user_id: str) -> list[tuple[str, str]]:
    """The user's "allow always" answers: (prefix, when)."""
    return [(row[0], row[1]) for row in con.execute(
        "SELECT prefix, created_at FROM terminal_allowed_prefixes WHERE user_id = ? "
        "ORDER BY created_at", (user_id,))]


def allow_prefix(writer: Writer, user_id: str, prefix: str) -> None:
    if not prefix.strip() or has_metacharacters(prefix) or not prefix.isprintable():
        raise ToolFailed(f"{prefix!r} cannot be allowed: a prefix is plain words")
    writer.submit(lambda con: con.execute(
        "INSERT OR IGNORE INTO terminal_allowed_prefixes (user_id, prefix, created_at) "
        "VALUES (?, ?, ?)", (user_id, prefix.strip(), utc_now())))


def revoke_prefix(writer: Writer, user_id: str, prefix: str) -> bool:
    """Forget an "allow always" answer; False when there was none."""
    def write(con: apsw.Connection) -> bool:
        con.execute("DELETE FROM terminal_allowed_prefixes WHERE user_id = ? AND prefix = ?",
                    (user_id, prefix))
        return con.changes() > 0

    return writer.submit(write)


# -- running -----------------------------------------------------------------------------------


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without credentials: by name, Hilo's own, or by what the value looks like."""
    return {name: value for name, value in environ.items()
            if not SECRET_NAME.search(name) and secret_kind(f"{name}={value}") is None}


@dataclass(frozen=True)
class CommandRun:
    command: str
    exit_status: int | None  # None: killed at the timeout
    output: str  # what was kept, decoded
    total_bytes: int  # what the command wrote in all
    timed_out: bool
    seconds: float

    def report(self, output_chars: int, timeout: float) -> str:
        """The result as the model (and the record) reads it."""
        lines = [f"$ {self.command}"]
        if self.output:
            lines.append(self.output.rstrip("\n"))
        if self.total_bytes > len(self.output.encode("utf-8", "replace")):
            lines.append(f"[… output cut: {self.total_bytes} bytes in all, the first "
                         f"{output_chars} characters shown]")
        if self.timed_out:
            lines.append(f"[killed after {timeout:g} s: the command did not finish in time]")
        else:
            lines.append(f"[exit status {self.exit_status}]")
        return "\n".join(lines)


def run_command(command: str, *, shell: bool, cwd: Path, timeout: float,
                output_chars: int, environ: Mapping[str, str] | None = None) -> CommandRun:
    """Run it (argv, or /bin/sh -c with `shell`), stdin closed, stdout and stderr
    together; kill its process group at `timeout` or when interrupted."""
    argv = ["/bin/sh", "-c", command] if shell else command_words(command)
    env = scrubbed_environment(os.environ if environ is None else environ)
    started = time.monotonic()
    try:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
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


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def working_directory(config: Config) -> Path:
    folder = Path(config.tools.terminal_workdir or "~").expanduser()
    if not folder.is_dir():
        raise ToolFailed(f"the working directory {folder} does not exist: fix [tools] "
                         "terminal_workdir")
    return folder


# -- the tool ----------------------------------------------------------------------------------


def terminal(ctx: ToolContext, args: dict[str, Any]) -> str:
    if ctx.surface == "http":
        raise ToolFailed("the terminal never runs over HTTP")
    command = args["command"].strip()
    command_words(command)  # refuses what does not parse before anyone is asked
    tools = ctx.config.tools
    allowed = matching_prefix(command, allowed_prefixes(ctx.service.reader(), ctx.config,
                                                        ctx.user_id))
    if allowed is None and not (ctx.trusted or ctx.preapproved):
        if ctx.approver is None and ctx.outside_content:
            raise ToolFailed(f"not run: `{command}` starts with no allowed prefix, and this "
                             f"run read content from outside ({OUTSIDE_KINDS}): only an "
                             "allowed prefix or a person at the terminal can let it run")
        if ctx.approver is None:
            raise ToolFailed(
                f"not run: `{command}` starts with no allowed prefix and this task is not "
                "trusted; the user can allow a prefix ([tools] terminal_allowed_prefixes) or "
                "mark the task trusted (hilo tasks add --trusted)")
        decision = ctx.approver.approve_command(command, prefix_to_allow(command))
        if decision == "deny":
            raise ToolFailed(f"not run: the user denied `{command}`")
        if decision == "always":
            prefix = prefix_to_allow(command)
            if prefix is not None:
                allow_prefix(ctx.service.writer, ctx.user_id, prefix)
    timeout = ctx.seconds_left(tools.terminal_timeout_seconds)
    run = run_command(command, shell=tools.terminal_shell, cwd=working_directory(ctx.config),
                      timeout=timeout, output_chars=tools.terminal_output_chars)
    return run.report(tools.terminal_output_chars, timeout)


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
    reads_outside=True,
)
