"""The terminal's sandbox, with the real bubblewrap: a command cannot write outside the
working folder, reach the network or read a secret from its environment, and its
processes end with it; without bubblewrap the terminal is off and says why."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.config import Config
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.turn.tools import terminal_sandbox
from app.turn.tools.registry import ToolFailed
from app.turn.tools.terminal import run_command
from app.turn.tools.terminal_sandbox import (
    Sandbox,
    sandbox_for,
    scrubbed_environment,
    unix_socket_filter,
)
from tests.fake_ollama import FakeOllama
from tests.system_tools import interpreter, required_tool
from tests.turn.test_terminal import Answers, results, terminal
from tests.workers.support import wait_until

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


# -- the environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, value", [
    ("OPENAI_API_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
    ("GITHUB_TOKEN", TOKEN),
    ("DB_PASSWORD", "hunter2"),
    ("DB_PWD", "hunter2"),
    ("AWS_SECRET_ACCESS_KEY", "x"),
    ("SSH_AUTH_SOCK", "/tmp/agent"),
    ("HILO_SERVER_TOKEN", "t"),
    ("HILO_LLM_URL", "http://127.0.0.1:11434"),
    ("INNOCENT_NAME", TOKEN),
    ("SENTRY_DSN", "https://0123456789abcdef0123456789abcdef@o123456.ingest.sentry.io/4504"),
    ("ERRORS_URL", "https://0123456789abcdef@o123456.ingest.sentry.io/4504"),
    ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T01/B02/shortsecret"),
    ("ALERTS_URL", "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/abcdefghijklmnopqrstuvwx"),
    ("CHAT_HOOK", "https://discord.com/api/webhooks/123/abc"),
    ("GOOGLE_CREDS", "/home/ana/creds.json"),
    ("DEPLOY_CREDS_FILE", "/home/ana/deploy.json"),
    ("PROXY_HEADER", "Basic dXNlcjpwYXNzd29yZA=="),
    ("UPSTREAM_AUTHORIZATION", "Bearer abcdef0123456789"),
    ("DATABASE_URL", "postgres://app:hunter2@db/app"),
])
def test_the_environment_loses_each_kind_of_credential(name, value):
    kept = {"PATH": "/usr/bin", "HOME": "/home/ana", "LANG": "C.UTF-8", "TERM": "xterm",
            "EDITOR": "vim", "LC_ALL": "C.UTF-8"}
    assert scrubbed_environment({**kept, name: value}, passed=[name]) == kept


def test_a_command_sees_only_the_base_variables_and_those_the_owner_lists():
    environ = {"PATH": "/usr/bin", "HOME": "/home/ana", "DEPLOY_NOTE": "marble harbour 4410",
               "GOPATH": "/home/ana/go", "HTTP_PROXY": "http://proxy:3128"}
    assert scrubbed_environment(environ) == {"PATH": "/usr/bin", "HOME": "/home/ana"}
    assert scrubbed_environment(environ, passed=["GOPATH"]) == {
        "PATH": "/usr/bin", "HOME": "/home/ana", "GOPATH": "/home/ana/go"}


# -- the sandbox ---------------------------------------------------------------------------------


@pytest.fixture
def sandbox(config: Config) -> Sandbox:
    required_tool("bwrap", "apt-get install bubblewrap")
    found = sandbox_for(config)
    assert found is not None
    return found


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder on the real root filesystem (not under /tmp, which the sandbox replaces)."""
    folder = Path(tempfile.mkdtemp(prefix="hilo-outside-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder)


def run(command: str, cwd: Path, sandbox: Sandbox | None, **kwargs) -> str:
    done = run_command(command, shell=False, cwd=cwd, timeout=30, output_chars=4000,
                       sandbox=sandbox, **kwargs)
    return done.report(4000, 30)


def test_a_sandboxed_command_writes_in_the_working_folder_and_nowhere_else(tmp_path, sandbox,
                                                                         outside):
    assert run(f"touch inside {outside / 'escaped'}", tmp_path, sandbox).endswith(
        "Read-only file system\n[exit status 1]")
    assert (tmp_path / "inside").exists()
    assert not (outside / "escaped").exists()
    assert run(f"touch {outside / 'escaped'}", tmp_path, None).endswith("[exit status 0]")


def test_a_sandboxed_command_cannot_reach_the_network(tmp_path, sandbox):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    connect = (f"{interpreter()} -c \"import socket; "
               f"socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\"")
    try:
        sandboxed = run(connect, tmp_path, sandbox)
        assert "ConnectionRefusedError" in sandboxed and "[exit status 1]" in sandboxed
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing arrived
        assert "connected\n[exit status 0]" in run(connect, tmp_path, None)  # the listener works
    finally:
        listener.close()


def test_a_sandboxed_command_does_not_see_a_secret_in_the_environment(tmp_path, sandbox):
    environ = {"PATH": os.environ["PATH"], "GITHUB_TOKEN": TOKEN, "LANG": "C.UTF-8",
               "DEPLOY_NOTE": "marble harbour 4410",
               "SENTRY_DSN": "https://0123456789abcdef@o1.ingest.sentry.io/2"}
    shown = run("env", tmp_path, sandbox, environ=environ)
    assert "LANG=C.UTF-8" in shown
    assert TOKEN not in shown and "sentry" not in shown and "marble" not in shown


def test_hilos_data_and_config_are_hidden_from_a_sandboxed_command(config, data_dir, sandbox,
                                                                   tmp_path):
    (data_dir / "memory.sqlite3").write_bytes(b"memories")
    assert data_dir.parent == tmp_path  # the working folder holds the data directory
    assert run(f"ls -A {data_dir}", tmp_path, sandbox) == f"$ ls -A {data_dir}\n[exit status 0]"
    unhidden = replace(sandbox, hidden_folders=(), hidden_files=())
    assert "memory.sqlite3" in run(f"ls -A {data_dir}", tmp_path, unhidden)
    assert config.origin.file is not None and "[tools]" in config.origin.file.read_text()
    assert "[tools]" not in run(f"cat {config.origin.file}", tmp_path, sandbox)


def test_a_sandboxed_commands_processes_end_with_it(tmp_path, sandbox):
    marker = "61.2345"  # a sleep nobody else runs
    done = run_command(f"sh -c 'sleep {marker} & sleep {marker}'", shell=False, cwd=tmp_path,
                       timeout=0.5, output_chars=100, sandbox=sandbox)
    assert done.timed_out

    def sleepers() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_text():
                    found.append(pid)
            except OSError:
                continue  # gone meanwhile
        return found

    assert wait_until(lambda: not sleepers(), 10, "the sandbox's processes to end")


def test_a_sandboxed_command_cannot_open_a_unix_socket_even_in_the_working_folder(tmp_path,
                                                                                   sandbox):
    # A socket anyone could drop in the working folder (a Docker or D-Bus one, an agent's).
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "api.sock"))
    listener.listen(1)
    connect = (f"{interpreter()} -c \"import socket; s = socket.socket(socket.AF_UNIX); "
               "s.connect('api.sock'); print('connected')\"")
    try:
        assert "PermissionError" in run(connect, tmp_path, sandbox)
        assert "connected\n[exit status 0]" in run(connect, tmp_path, None)
        pair = f"{interpreter()} -c \"import socket; socket.socketpair(); print('paired')\""
        assert "paired\n[exit status 0]" in run(pair, tmp_path, sandbox)  # no one else's end
    finally:
        listener.close()


def test_a_sandboxed_command_that_looks_up_users_still_answers(tmp_path, sandbox):
    (tmp_path / "notes.txt").write_text("x\n")
    shown = run("ls -l notes.txt", tmp_path, sandbox)  # nss may try a socket, then files
    assert shown.endswith("notes.txt\n[exit status 0]"), shown


def test_a_sandboxed_command_cannot_set_up_io_uring(tmp_path, sandbox):
    # io_uring's operations open sockets past the seccomp filter: no io_uring at all.
    setup = (f"{interpreter()} -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
             "print(libc.syscall(425, 1, 0), ctypes.get_errno())\"")
    assert "-1 38\n[exit status 0]" in run(setup, tmp_path, sandbox)  # ENOSYS


def test_a_sandboxed_command_gets_at_most_its_memory(tmp_path, sandbox):
    capped = replace(sandbox, memory_bytes=256 * 1024 * 1024)
    allocate = f"{interpreter()} -c \"x = bytearray({{}} * 1024 * 1024); print('allocated')\""
    assert "MemoryError" in run(allocate.format(400), tmp_path, capped)
    assert "allocated\n[exit status 0]" in run(allocate.format(64), tmp_path, capped)
    fill = "head -c 300000000 /dev/zero"  # into /tmp and /dev/shm, which are memory too
    for folder in ("/tmp", "/dev/shm"):
        shown = run_command(f"{fill} > {folder}/x", shell=True, cwd=tmp_path, timeout=30,
                            output_chars=400, sandbox=capped).report(400, 30)
        assert "No space left on device" in shown, shown


def test_a_sandboxed_command_sees_no_device_but_the_harmless_ones(tmp_path, sandbox):
    shown = set(run("ls /dev", tmp_path, sandbox).splitlines()[1:-1])
    assert shown <= {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr",
                     "stdin", "stdout", "tty", "urandom", "zero"}, shown
    assert "Read-only file system" in run("touch /dev/made", tmp_path, sandbox)


def test_the_default_working_folder_is_the_users_own_under_the_data_directory(config, data_dir,
                                                                               sandbox):
    from app.turn.tools.terminal import working_directory

    (data_dir / "memory.sqlite3").write_bytes(b"memories")
    folder = working_directory(config, "ana")
    assert folder == (data_dir / "work" / "ana").resolve() and folder.is_dir()
    assert working_directory(config, "../bob").parent == folder.parent  # ids stay one folder
    assert working_directory(config, "..").parent == folder.parent
    assert run("touch made", folder, sandbox).endswith("[exit status 0]")
    assert (folder / "made").exists()
    # The rest of the data directory is still hidden, and read-only.
    assert run(f"ls -A {data_dir}", folder, sandbox) == f"$ ls -A {data_dir}\nwork\n[exit status 0]"
    assert "Read-only file system" in run(f"touch {data_dir}/planted", folder, sandbox)


def test_a_program_the_sandbox_hides_is_named_as_such(tmp_path, sandbox):
    elsewhere = Path(tempfile.mkdtemp())  # under the system temp folder, like a checkout there
    try:
        program = elsewhere / "tool"
        program.write_text("#!/bin/sh\necho hi\n")
        program.chmod(0o755)
        with pytest.raises(ToolFailed, match="which the sandbox hides from commands"):
            run(str(program), tmp_path, sandbox)
    finally:
        shutil.rmtree(elsewhere)


@pytest.mark.parametrize("machine", ["x86_64", "amd64", "aarch64", "arm64", "riscv64"])
def test_the_seccomp_filter_is_known_for_the_common_machines(machine):
    program = unix_socket_filter(machine)
    assert len(program) % 8 == 0 and 8 <= len(program) // 8 <= 16  # struct sock_filter each


def test_on_a_machine_without_a_known_filter_the_terminal_is_off(cfg, fake_ollama,
                                                                   monkeypatch):
    monkeypatch.setattr(terminal_sandbox.platform, "machine", lambda: "s390x")
    with ChatService(cfg) as service:
        terminal(fake_ollama, "touch made")
        [result] = results(Agent(service, surface="task"), trusted=True)
    assert result.startswith("error: the terminal is off: no seccomp filter is known for s390x")


# -- without the sandbox -------------------------------------------------------------------------


@pytest.fixture
def cfg(config: Config, data_dir: Path, fake_ollama: FakeOllama,
        tmp_path: Path) -> Iterator[Config]:
    terminal_sandbox._start_failure.cache_clear()
    escape = tmp_path / "escape"  # a program the refusals know nothing of
    escape.write_text('#!/bin/sh\ntouch "$1"\n')
    escape.chmod(0o755)
    yield config.replace(llm={"url": fake_ollama.url}, embedder={"kind": "none"},
                         tools={"terminal_workdir": str(tmp_path),
                                "terminal_allow_rules": ("touch *",)})
    terminal_sandbox._start_failure.cache_clear()


def test_a_command_the_agent_runs_is_sandboxed(cfg, fake_ollama, sandbox, outside):
    with ChatService(cfg) as service:
        terminal(fake_ollama, f"./escape {outside / 'escaped'}")
        [result] = results(Agent(service, surface="task"), trusted=True)
    assert "Read-only file system" in result
    assert not (outside / "escaped").exists()


def test_without_bubblewrap_the_terminal_is_off_and_says_why(cfg, fake_ollama, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    approver = Answers()
    with ChatService(cfg) as service:
        terminal(fake_ollama, "touch made")
        assert results(Agent(service, surface="chat", approver=approver)) == [
            "error: the terminal is off: bubblewrap (bwrap) is not installed, and it runs "
            "commands only in that sandbox; install it (apt-get install bubblewrap) or set "
            "[tools] terminal_sandbox = \"none\" to run commands unsandboxed"]
    assert approver.asked == [] and not (tmp_path / "made").exists()


def test_a_bubblewrap_that_cannot_start_turns_the_terminal_off(cfg, fake_ollama, tmp_path,
                                                              monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with ChatService(cfg) as service:
        terminal(fake_ollama, "touch made")
        [result] = results(Agent(service, surface="task"))
    assert result.startswith("error: the terminal is off: bubblewrap cannot start here (bwrap: "
                             "No permissions to create new namespace), and it runs commands "
                             "only in that sandbox")
    assert not (tmp_path / "made").exists()


def test_the_owner_may_run_commands_unsandboxed(cfg, fake_ollama, tmp_path, monkeypatch,
                                                outside):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "touch").symlink_to(shutil.which("touch"))
    monkeypatch.setenv("PATH", str(bin_dir))  # touch, and no bwrap
    with ChatService(cfg.replace(tools={"terminal_sandbox": "none"})) as service:
        terminal(fake_ollama, f"./escape {outside / 'unsandboxed'}")
        [result] = results(Agent(service, surface="task"), trusted=True)
    assert result == f"$ ./escape {outside / 'unsandboxed'}\n[exit status 0]"
    assert (outside / "unsandboxed").exists()
