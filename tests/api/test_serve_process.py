"""`hilo serve` as a process: it announces itself and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # hilo serve as a process, stopped by signals


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_stops_the_server_with_status_0_and_removes_its_pid_file(data_dir, tmp_path,
                                                                        fake_ollama):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env["HILO_LLM_URL"] = fake_ollama.url  # /health says "ok" only with the models there
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir), "--port",
         str(port)], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "never came up"
                time.sleep(0.05)
        assert (data_dir / f"serve.{server.pid}.pid").exists()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
        assert not (data_dir / f"serve.{server.pid}.pid").exists()
        said = server.stderr.read().decode()
        assert f"the memory page is at http://127.0.0.1:{port}/ui" in said
    finally:
        if server.poll() is None:
            server.kill()


def test_the_first_health_check_reports_the_models_the_start_found_without_asking_again(
        data_dir, fake_ollama):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env["HILO_LLM_URL"] = fake_ollama.url
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir), "--port",
         str(port)], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health").json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "never came up"
                time.sleep(0.05)
        assert health["status"] == "ok"
        assert health["models"]["chat"].endswith("(ready)")
        # One look at the model server's models: the start's, which /health reported.
        assert [r.path for r in fake_ollama.requests if r.method == "GET"] == ["/api/tags"]
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_one_line_as_from_the_environment(data_dir, port):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    served = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir), "--port", port],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert served.returncode == 2
    assert served.stderr.splitlines() == [
        f"hilo: configuration error: server.port = {port} from --port: expected a number "
        "from 1 to 65535"]
