"""Fixtures of the worker tests (helpers they share are in tests/workers/support.py)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.system_tools import required_tool
from tests.workers.support import scripted_queue, wait_until


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    """The worker's config with its queue run in this process, three attempts a job.
    A module whose jobs need another queue defines its own `cfg`."""
    return scripted_queue(config, fake_ollama, bound_queue, max_attempts=3)


@pytest.fixture
def redis_url(tmp_path):
    """A throwaway redis-server on a free loopback port."""
    server = required_tool("redis-server", "apt-get install redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(port), 10, "redis-server to accept connections")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
