"""web_fetch reads only the hosts the user listed, within its size and time bounds,
against a real HTTP server on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from app.turn.chat import ChatService
from app.config import Config
from app.turn.tools import ToolContext, default_registry
from app.turn.tools.web import host_allowed

PAGE = (b"<html><head><title>Docs</title><script>var secret = 1;</script></head>"
        b"<body><h1>shlex</h1><p>Simple lexical analysis.</p></body></html>")


class Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 — http.server's name
        port = self.server.server_address[1]
        if self.path == "/page":
            self._send(200, "text/html; charset=utf-8", PAGE)
        elif self.path == "/big":
            self._send(200, "text/plain", b"x" * 50_000)
        elif self.path == "/hop":
            self.send_response(302)
            self.send_header("Location", "/page")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/away":
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/page")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/slow":
            self.server.stopping.wait(30)  # type: ignore[attr-defined]
        else:
            self._send(404, "text/plain", b"no")

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    server.daemon_threads = True
    server.stopping = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.stopping.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


@pytest.fixture
def fetch(config: Config, data_dir) -> Iterator:
    cfg = config.replace(embedder={"kind": "none"}, tools={
        "web_allowed_hosts": ("127.0.0.1",), "web_max_bytes": 10_000,
        "web_timeout_seconds": 0.5, "web_output_chars": 1000})
    registry = default_registry(cfg)
    with ChatService(cfg) as service:
        ctx = ToolContext(cfg, service, "default", "s1", "chat")
        yield lambda url: registry.call(ctx, "web_fetch", {"url": url})


def test_a_page_comes_back_as_its_text(fetch, site):
    result = fetch(f"{site}/page")
    assert result.ok
    assert result.text == (f"{site}/page (HTTP 200, text/html):\nDocs\nshlex\n"
                           "Simple lexical analysis.")


def test_a_redirect_is_followed_only_to_a_listed_host(fetch, site):
    assert fetch(f"{site}/hop").text.startswith(f"{site}/page (HTTP 200")
    refused = fetch(f"{site}/away")
    assert not refused.ok and "is not on a host web_fetch may read" in refused.text


def test_hosts_not_listed_and_other_schemes_are_refused(fetch):
    for url in ("http://localhost/page", "file:///etc/passwd", "ftp://127.0.0.1/x"):
        result = fetch(url)
        assert not result.ok and "is not on a host web_fetch may read" in result.text


def test_size_and_time_are_bounded(fetch, site):
    big = fetch(f"{site}/big")
    assert big.ok and big.text.endswith(
        "[… the page was cut at [tools] web_max_bytes; the first 1000 characters of its text "
        "are shown]")
    slow = fetch(f"{site}/slow")
    assert slow.text == f"error: {site}/slow did not answer within 0.5 s"


def test_an_http_error_is_a_tool_error(fetch, site):
    assert fetch(f"{site}/missing").text == f"error: {site}/missing answered HTTP 404"


@pytest.mark.parametrize("url, hosts, allowed", [
    ("https://docs.python.org/3/", ["docs.python.org"], True),
    ("https://en.wikipedia.org/wiki/X", ["*.wikipedia.org"], True),
    ("https://wikipedia.org.evil.com/", ["*.wikipedia.org"], False),
    ("https://evilwikipedia.org/", ["*.wikipedia.org"], False),
    ("http://127.0.0.1:8080/", ["127.0.0.1:8080"], True),
    ("http://127.0.0.1:9090/", ["127.0.0.1:8080"], False),
    ("http://user@127.0.0.1:8080/", ["127.0.0.1:8080"], True),
    ("javascript:alert(1)", ["127.0.0.1"], False),
])
def test_host_patterns(url, hosts, allowed):
    assert host_allowed(url, hosts) is allowed
