"""web_fetch reads only the hosts the user listed, within its size and time bounds,
against a real HTTP server on loopback: a page that drips or a body that inflates
cannot stretch them."""

from __future__ import annotations

import functools
import socket
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.config import Config
from app.turn.chat import ChatService
from app.turn.tools import ToolContext, default_registry
from app.turn.tools.web import host_allowed, private_kind

PAGE = (b"<html><head><title>Docs</title><script>var secret = 1;</script></head>"
        b"<body><h1>shlex</h1><p>Simple lexical analysis.</p></body></html>")
DRIP_SECONDS = 0.2  # between two bytes of /drip: well under any read timeout
DRIP_BYTES = 150  # so the page would take 30 s in all


@functools.cache
def gzip_of_zeros(mebibytes: int) -> bytes:
    """A gzip stream of that many MiB of zeros (about 1 KiB each), built from one
    compressed MiB repeated: after a full flush the compressor starts afresh, so every
    MiB after the first compresses to the same bytes."""
    mib = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    last_block = compressor.flush()[:-8]  # its trailer is for two MiB: ours follows
    crc = functools.reduce(lambda c, _: zlib.crc32(mib, c), range(mebibytes), 0)
    return (first + again * (mebibytes - 1) + last_block
            + struct.pack("<II", crc, (mebibytes << 20) & 0xFFFFFFFF))


class Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
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
        elif self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            for _ in range(DRIP_BYTES):
                if self.server.stopping.wait(DRIP_SECONDS):  # type: ignore[attr-defined]
                    return
                self.wfile.write(b"x")
                self.wfile.flush()
        elif self.path == "/bomb":
            self._send(200, "text/plain", gzip_of_zeros(300), encoding="gzip")
        elif self.path == "/deflated":
            self._send(200, "text/plain", zlib.compress(b"deflated " * 10), encoding="deflate")
        elif self.path == "/raw-deflated":
            raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
            self._send(200, "text/plain", raw.compress(b"raw " * 10) + raw.flush(),
                       encoding="deflate")
        elif self.path == "/brotli":
            self._send(200, "text/plain", b"\x0b\x02\x80hi\x03", encoding="br")
        else:
            self._send(404, "text/plain", b"no")

    def _send(self, status: int, kind: str, body: bytes, encoding: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if encoding is not None:
            self.send_header("Content-Encoding", encoding)
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
def fetch_within(config: Config, data_dir) -> Iterator:
    """fetch_within(url, turn_seconds=None): web_fetch's result, in a turn that has that
    long left (None: no turn deadline)."""
    cfg = config.replace(embedder={"kind": "none"}, tools={
        "web_allowed_hosts": ("127.0.0.1",), "web_max_bytes": 10_000,
        "web_timeout_seconds": 0.5, "web_output_chars": 1000, "max_seconds": 1.0})
    registry = default_registry(cfg)
    with ChatService(cfg) as service:
        def fetch(url: str, turn_seconds: float | None = None, **tools):
            config = cfg.replace(tools=tools) if tools else cfg
            deadline = None if turn_seconds is None else time.monotonic() + turn_seconds
            ctx = ToolContext(config, service, "default", "s1", "chat", deadline=deadline)
            return registry.call(ctx, "web_fetch", {"url": url})

        yield fetch


@pytest.fixture
def fetch(fetch_within) -> Iterator:
    return fetch_within


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


def test_a_page_that_drips_is_cut_at_the_deadline(fetch, site):
    # A byte every 0.2 s: no single read waits 2 s. (The deadline covers the headers too:
    # 2 s, not 0.5, so a loaded machine still has them in time.)
    dripped = fetch(f"{site}/drip", web_timeout_seconds=2.0)
    assert dripped.ok and dripped.text.startswith(f"{site}/drip (HTTP 200, text/plain):\nx")
    assert dripped.text.endswith("[… the page was cut: it did not arrive whole within 2 s]")


def test_a_fetch_still_running_when_the_turn_ends_is_cut(fetch_within, site):
    dripped = fetch_within(f"{site}/drip", turn_seconds=1.0, web_timeout_seconds=60.0)
    assert dripped.ok and dripped.text.endswith(
        "[… the page was cut: it did not arrive whole before the turn ran out of time ([tools] "
        "max_seconds = 1)]")
    silent = fetch_within(f"{site}/slow", turn_seconds=1.0, web_timeout_seconds=60.0)
    assert silent.text == (f"error: {site}/slow did not answer before the turn ran out of time "
                           "([tools] max_seconds = 1)")


def test_a_compressed_body_is_cut_at_the_size_limit_as_it_inflates(fetch, site):
    gzip_of_zeros(300)  # built before measuring
    tracemalloc.start()
    try:
        bomb = fetch(f"{site}/bomb")  # 300 MB of zeros in 300 KB of gzip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bomb.ok and bomb.text.endswith("[… the page was cut at [tools] web_max_bytes; the "
                                          "first 1000 characters of its text are shown]")
    assert peak < 5_000_000  # a few chunks and the 10 kB page, never the inflated body


def test_deflate_with_or_without_its_header_is_read(fetch, site):
    assert fetch(f"{site}/deflated").text.endswith(":\n" + "deflated " * 9 + "deflated ")
    assert fetch(f"{site}/raw-deflated").text.endswith(":\n" + "raw " * 10)


def test_an_encoding_web_fetch_did_not_ask_for_is_refused(fetch, site):
    assert fetch(f"{site}/brotli").text == (
        f"error: {site}/brotli came encoded as 'br', which web_fetch does not read (it asks "
        "for gzip, deflate)")


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


# -- one deadline over the whole exchange ---------------------------------------------------------


class HeaderDrip:
    """A server that sends its status line, then one header line every `every` seconds
    (`lines` of them): a client still there after the last one was held all that time."""

    def __init__(self, lines: int = 40, every: float = 0.1) -> None:
        self.lines, self.every = lines, every
        self.held_to_the_end = threading.Event()
        self.left_early = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/page"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)
            try:
                connection.sendall(b"HTTP/1.1 200 OK\r\n")
                for index in range(self.lines):
                    if self._stop.wait(self.every):
                        return
                    connection.sendall(f"X-Line-{index}: a\r\n".encode())
                connection.sendall(b"Content-Length: 2\r\n\r\nok")
                self.held_to_the_end.set()
            except OSError:
                self.left_early.set()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def test_a_server_dripping_its_headers_is_cut_at_the_deadline(fetch):
    drip = HeaderDrip()  # 4 s of headers, a line every 0.1 s: no read waits 0.5 s
    try:
        result = fetch(drip.url)
        assert result.text == f"error: {drip.url} did not answer within 0.5 s"
        assert drip.left_early.wait(10) and not drip.held_to_the_end.is_set()
    finally:
        drip.close()


# -- the address, not only the name ---------------------------------------------------------------


class Dns:
    """Names under .test resolve to what a test puts in `answers`: one answer per lookup
    (the last repeats), each a list of addresses; `lookups` counts them by name."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: dict[str, int] = {}


@pytest.fixture
def dns(monkeypatch) -> Dns:
    fake, real = Dns(), socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if not str(host).endswith(".test"):
            return real(host, port, *args, **kwargs)
        fake.lookups[host] = fake.lookups.get(host, 0) + 1
        answers = fake.answers[host]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in answers[min(fake.lookups[host], len(answers)) - 1]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return fake


def test_a_listed_name_that_resolves_to_a_private_address_is_refused(fetch, site, dns):
    port = site.rsplit(":", 1)[1]
    dns.answers["intranet.test"] = [["93.184.216.34", "127.0.0.1"]]
    result = fetch(f"http://intranet.test:{port}/page", web_allowed_hosts=("*.test",))
    assert result.text == (
        f"error: http://intranet.test:{port}/page: intranet.test resolves to 127.0.0.1, a "
        "loopback address; web_fetch reads such addresses only from a host [tools] "
        'web_allowed_hosts lists by its address (such as "127.0.0.1:8080" or "localhost")')
    dns.answers["router.test"] = [["192.168.1.1"]]
    assert "a private address" in fetch("http://router.test/", web_allowed_hosts=("*.test",)).text


def test_the_request_goes_to_the_address_that_was_checked(fetch, site, dns, monkeypatch):
    # The attacker's DNS answers a public address to the check and loopback afterwards.
    port = int(site.rsplit(":", 1)[1])
    dns.answers["rebind.test"] = [["93.184.216.34"], ["127.0.0.1"]]
    connected = []

    def create_connection(address, *args, **kwargs):
        connected.append(address)
        raise ConnectionRefusedError("refused by the test")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    result = fetch(f"http://rebind.test:{port}/page", web_allowed_hosts=("*.test",))
    assert connected == [("93.184.216.34", port)]
    assert dns.lookups == {"rebind.test": 1}
    assert result.text.startswith(f"error: could not fetch http://rebind.test:{port}/page")


@pytest.mark.parametrize("address, kind", [
    ("93.184.216.34", None), ("2606:2800:220:1:248:1893:25c8:1946", None),
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"),
    ("192.168.1.1", "private"), ("169.254.169.254", "link-local"), ("fe80::1%eth0", "link-local"),
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a01:203", "private"), ("0.0.0.0", "private"),
    ("100.64.0.1", "reserved"), ("224.0.0.1", "reserved"),
])
def test_which_addresses_are_not_public(address, kind):
    assert private_kind(address) == kind
