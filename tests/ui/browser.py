"""A real `hilo serve` process and a headless Chromium driving it, one of each per test
module: Debian's `chromium` (found on PATH), never a browser Playwright downloads.

The server runs on a free loopback port with its own data directory, in front of the fake
Ollama (tests/fake_ollama.py). Every page records the requests it made: `offsite` lists
those that left loopback (aborted, so a test that misses one fails rather than waits).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.test_serve_process import free_port
from tests.conftest import REPO_ROOT
from tests.fake_ollama import FakeOllama

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Elsewhere a machine without the browser skips these; CI installs it (.ci/run sets
# CI), so there a missing browser fails the run instead of passing it silently.
if os.environ.get("CI") and CHROMIUM is None:
    raise RuntimeError("CI is set but chromium is not on PATH: .ci/run installs it")
playwright_api = (importlib.import_module("playwright.sync_api") if os.environ.get("CI")
                  else pytest.importorskip("playwright.sync_api"))
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH "
                                "(apt-get install chromium; .ci/run does)")
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


@dataclass
class ServeProcess:
    """`hilo serve` as a person starts it, on its own data directory."""

    data_dir: Path
    fake: FakeOllama
    url: str = ""
    process: subprocess.Popen | None = None
    env: dict = field(default_factory=dict)

    def start(self) -> ServeProcess:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
        self.env.update(HILO_LLM_URL=self.fake.url, HILO_EMBEDDER_KIND="none", TZ="UTC")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(self.data_dir),
             "--port", str(port)], cwd=REPO_ROOT, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        pause = threading.Event()
        while True:
            try:
                httpx.get(f"{self.url}/health", timeout=5)
                return self
            except httpx.TransportError:
                assert time.monotonic() < deadline and self.process.poll() is None, \
                    "hilo serve never came up"
                pause.wait(0.05)

    def hilo(self, *args: str) -> str:
        """A `hilo` command on the same data directory (the CLI, as the owner runs it)."""
        done = subprocess.run([sys.executable, "-m", "app.cli", *args, "--data-dir",
                               str(self.data_dir)], cwd=REPO_ROOT, env=self.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeOllama]:
    fake = FakeOllama().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def serve(tmp_path_factory, fake_model) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path_factory.mktemp("data"), fake_model).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


class Page:
    """A browser tab on the server, with every request it made recorded."""

    def __init__(self, browser: object, base_url: str) -> None:
        self.context = browser.new_context(base_url=base_url)
        self.tab = self.context.new_page()
        self.requests: list[str] = []
        self.offsite: list[str] = []
        self.tab.route("**/*", self._route)

    def _route(self, route: object) -> None:
        url = route.request.url
        self.requests.append(url)
        host = urlsplit(url).hostname or ""
        if url.startswith(("data:", "blob:")) or host in LOOPBACK or host == "::1":
            route.continue_()
        else:
            self.offsite.append(url)
            route.abort()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(chromium, serve) -> Iterator[Page]:
    tab = Page(chromium, serve.url)
    yield tab
    tab.close()
