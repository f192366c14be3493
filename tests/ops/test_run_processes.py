"""`make run` as a person runs it, in a terminal: console log lines through honcho, and a
clean stop on Ctrl-C or SIGTERM, without make reporting an error."""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tests.fake_ollama import unused_loopback_url
from tests.system_tools import required_tool
from tests.workers.support import wait_until

VENV = Path(sys.executable).parent.parent


class Terminal:
    """A pseudo-terminal a command runs in, as in a person's terminal window (its own
    session, the terminal as its controlling one: Ctrl-C reaches its process group)."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
            start_new_session=True,
            # The new session's controlling terminal: where Ctrl-C becomes SIGINT.
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.output = ""
        self.descendants: list[psutil.Process] = []

    def read_until(self, *texts: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while not all(t in self.output for t in texts):
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {texts} in:\n{self.output[-3000:]}")
            self._read(0.2)
        # honcho starts its processes in sessions of their own: remember them to clean up.
        self.descendants = psutil.Process(self.process.pid).children(recursive=True)
        return self.output

    def _read(self, wait: float) -> int:
        """Read what is there within `wait` seconds; how many bytes (0: none, or closed)."""
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return 0
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the terminal closed: every process in it has gone
            return 0
        self.output += chunk.decode(errors="replace")
        return len(chunk)

    def type_ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.2):  # what was written before it ended
            pass
        return self.process.wait(timeout=1)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for process in self.descendants:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        os.close(self.master)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "HONCHO_"))}
    env.update(TERM="xterm", **extra)
    return env


# -- logs under honcho ----------------------------------------------------------------------


SAY_HELLO = ("from app.log import configure_logging; import structlog; "
             "configure_logging('info', '{fmt}'); structlog.get_logger('t').info('said.hello')")


def honcho_saying_hello(tmp_path: Path, fmt: str) -> list[str]:
    procfile = tmp_path / "Procfile"
    procfile.write_text(f'say: exec {sys.executable} -c "{SAY_HELLO.format(fmt=fmt)}"\n')
    return [sys.executable, "-m", "honcho", "start", "-f", str(procfile), "-d", str(REPO_ROOT)]


def test_under_honcho_in_a_terminal_logs_are_console_lines(tmp_path):
    terminal = Terminal(honcho_saying_hello(tmp_path, "auto"), base_env(), REPO_ROOT)
    try:
        terminal.wait()
    finally:
        terminal.close()
    line = next(x for x in terminal.output.splitlines() if "said.hello" in x)
    assert "[info" in line and '"event"' not in line


@pytest.mark.parametrize("fmt", ["auto", "json"])
def test_json_lines_when_asked_or_when_no_terminal_is_there(tmp_path, fmt):
    if fmt == "json":  # asked for, in a terminal
        terminal = Terminal(honcho_saying_hello(tmp_path, fmt), base_env(), REPO_ROOT)
        try:
            terminal.wait()
        finally:
            terminal.close()
        output = terminal.output
    else:  # honcho itself writes to a file: nobody reads it live
        output = subprocess.run(honcho_saying_hello(tmp_path, fmt), capture_output=True,
                                text=True, env=base_env(), timeout=60).stdout
    line = next(x for x in output.splitlines() if "said.hello" in x)
    assert '{"event": "said.hello"' in line


# -- make run ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_make_run(tmp_path: Path) -> Terminal:
    """`make run` with this test's venv (already installed: `-o` skips the install step),
    a fresh data directory and a model server that is not there."""
    required_tool("make", "apt-get install make")
    env = base_env(HILO_DATA_DIR=str(tmp_path / "data"), HILO_LLM_URL=unused_loopback_url(),
                   HILO_SERVER_PORT=str(free_port()))
    terminal = Terminal(["make", "-o", f"{VENV}/.run-installed", "run", f"VENV={VENV}"],
                        env, REPO_ROOT)
    terminal.read_until("worker.started", "Uvicorn running")
    return terminal


def honcho_pid(make_pid: int) -> int:
    found = [p for p in psutil.Process(make_pid).children(recursive=True)
             if any(part.endswith("/honcho") for part in p.cmdline()[:2])]
    return min(found, key=lambda p: p.create_time()).pid  # honcho, not its runners


@pytest.mark.slow
def test_make_run_reads_as_console_lines_and_stops_cleanly_on_ctrl_c(tmp_path):
    terminal = start_make_run(tmp_path)
    try:
        assert '"event": "worker.started"' not in terminal.output
        assert "models.degraded" in terminal.output  # the start line, for a person
        terminal.type_ctrl_c()
        terminal.wait()
    finally:
        terminal.close()
    assert "worker.1 stopped (rc=0)" in terminal.output
    assert "api.1 stopped (rc=0)" in terminal.output
    assert "make: ***" not in terminal.output, terminal.output[-2000:]


@pytest.mark.slow
def test_make_run_exits_0_when_honcho_is_sent_sigterm(tmp_path):
    terminal = start_make_run(tmp_path)
    try:
        os.kill(honcho_pid(terminal.process.pid), signal.SIGTERM)
        status = terminal.wait()
    finally:
        terminal.close()
    assert status == 0, terminal.output[-2000:]
    assert "Error" not in terminal.output and "make: ***" not in terminal.output


def stopped_in_time(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running after a bounded wait."""
    _, alive = psutil.wait_procs(processes, timeout=30)
    return alive


@pytest.mark.slow
def test_make_run_piped_to_tee_stops_everything_on_ctrl_c(tmp_path):
    required_tool("make", "apt-get install make")
    env = base_env(HILO_DATA_DIR=str(tmp_path / "data"), HILO_LLM_URL=unused_loopback_url(),
                   HILO_SERVER_PORT=str(free_port()))
    log = tmp_path / "log"
    make = f"make -o {VENV}/.run-installed run VENV={VENV} 2>&1 | tee {log}"
    terminal = Terminal(["bash", "-c", make], env, REPO_ROOT)
    try:
        terminal.read_until("worker.started", "Uvicorn running")
        started = terminal.descendants
        # tee writes each chunk to the terminal before the file, and Ctrl-C stops tee too:
        # press it once the file holds what the terminal shows.
        wait_until(lambda: log.exists() and "worker.started" in log.read_text(), 10,
                   "tee to write the start line to its file")
        terminal.type_ctrl_c()
        terminal.wait()
        alive = stopped_in_time(started)
    finally:
        terminal.close()
    assert not alive, [p.cmdline() for p in alive if p.is_running()]


@pytest.mark.slow
def test_honcho_start_as_the_procfile_says_finds_hilo_in_the_venv(tmp_path):
    """From the repository root, without .venv/bin on PATH: the Procfile finds hilo there."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(REPO_ROOT / "Procfile", root / "Procfile")
    (root / ".venv").symlink_to(VENV)
    env = base_env(HILO_DATA_DIR=str(tmp_path / "data"), HILO_LLM_URL=unused_loopback_url(),
                   HILO_SERVER_PORT=str(free_port()), PYTHONPATH=str(REPO_ROOT),
                   PATH=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                        if not Path(p, "hilo").exists()))
    subprocess.run([VENV / "bin" / "hilo", "init"], env=env, check=True, timeout=60,
                   capture_output=True)
    terminal = Terminal([str(root / ".venv" / "bin" / "honcho"), "start"], env, root)
    try:
        terminal.read_until("worker.started", "Uvicorn running")
        terminal.type_ctrl_c()
        terminal.wait()
    finally:
        terminal.close()
    assert "not found" not in terminal.output
    assert "worker.1 stopped (rc=0)" in terminal.output


@pytest.mark.slow
def test_sigterm_to_make_run_stops_honcho_serve_and_worker(tmp_path):
    terminal = start_make_run(tmp_path)
    started = terminal.descendants
    try:
        assert {"honcho", "serve", "worker"} <= {
            word for p in started for word in ("honcho", "serve", "worker")
            if any(part.endswith(word) for part in p.cmdline()[:3])}
        os.kill(terminal.process.pid, signal.SIGTERM)  # make itself, as `kill <pid>` does
        terminal.wait()
        alive = stopped_in_time(started)
    finally:
        terminal.close()
    assert not alive, [p.cmdline() for p in alive if p.is_running()]
    assert "worker.1 stopped (rc=0)" in terminal.output
    assert "api.1 stopped (rc=0)" in terminal.output


@pytest.mark.slow
def test_make_run_does_not_print_its_recipe(tmp_path):
    terminal = start_make_run(tmp_path)
    try:
        terminal.type_ctrl_c()
        terminal.wait()
    finally:
        terminal.close()
    assert "honcho start" not in terminal.output and "trap" not in terminal.output
    assert "hilo init" not in terminal.output
