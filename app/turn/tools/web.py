"""web_fetch: read a page from a host the user listed in `[tools] web_allowed_hosts`
(no list, no tool), over httpx; a redirect is followed only to another listed host. HTML
comes back as its text.

Bounds a page cannot stretch: one deadline for the whole fetch, connection, redirects
and body (`web_timeout_seconds`, cut to what is left of the turn's `[tools]
max_seconds`) — a page still arriving then, however slowly it drips, is cut: its
socket is shut down under the read; and `web_max_bytes` of the body as decoded, read
incrementally (gzip and deflate are decompressed here, a bounded piece at a time, so a
small compressed body cannot inflate into memory). A fetch asked for in a turn that read
content from outside needs a fresh yes (registry.py): a URL can carry what the turn read
to anyone.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from app.turn.tools.registry import Tool, ToolContext, ToolFailed, schema

MAX_REDIRECTS = 5
# The encodings decoded here, a bounded piece at a time; httpx's own decoders inflate
# each network chunk whole (64 KiB of gzip can be 64 MiB of zeros).
ACCEPT_ENCODING = "gzip, deflate"
_SKIPPED = {"script", "style", "noscript", "template", "svg"}
_BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
           "article", "pre", "table", "ul", "ol", "title"}


def host_allowed(url: str, hosts: Sequence[str]) -> bool:
    """Whether the URL is http(s) to a listed host: "example.org" (any port),
    "example.org:8080", or "*.example.org" (its subdomains)."""
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError:
        return False
    host = (split.hostname or "").lower().rstrip(".")
    if split.scheme not in ("http", "https") or not host:
        return False
    for pattern in hosts:
        name, _, wanted_port = pattern.lower().partition(":")
        if wanted_port and str(port or (443 if split.scheme == "https" else 80)) != wanted_port:
            continue
        if name.startswith("*.") and host.endswith(name[1:]):
            return True
        if host == name:
            return True
    return False


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self._skipping:
            self._skipping -= 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\s*\n\s*", "\n", text).strip()


def fetch(ctx: ToolContext, args: dict[str, Any]) -> str:
    tools = ctx.config.tools
    url = args["url"].strip()
    ctx.fresh_approval(f"fetch {url}")
    hosts = tools.web_allowed_hosts
    seconds = ctx.seconds_left(tools.web_timeout_seconds)
    deadline = _Deadline(time.monotonic() + seconds, seconds,
                         tools.max_seconds if seconds < tools.web_timeout_seconds else None)
    with httpx.Client(follow_redirects=False, headers={
            "User-Agent": "hilo-web-fetch", "Accept-Encoding": ACCEPT_ENCODING}) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if not host_allowed(url, hosts):
                raise ToolFailed(f"{url} is not on a host web_fetch may read; the hosts are: "
                                 f"{', '.join(hosts)} ([tools] web_allowed_hosts)")
            try:
                with client.stream("GET", url, timeout=deadline.left()) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    page = _read(response, tools.web_max_bytes, deadline)
                    return _report(url, response, page, tools.web_output_chars, deadline)
            except httpx.TimeoutException:
                raise ToolFailed(f"{url} did not answer {deadline.within()}") from None
            except httpx.HTTPError as exc:
                raise ToolFailed(f"could not fetch {url}: {exc}") from None
    raise ToolFailed(f"{url}: more than {MAX_REDIRECTS} redirects")


@dataclass(frozen=True)
class _Deadline:
    """When the fetch must be over (time.monotonic()), and what set it."""

    at: float
    seconds: float
    turn_seconds: float | None  # the turn's max_seconds, when what was left of it set `at`

    def left(self) -> float:
        return max(0.001, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def within(self) -> str:
        if self.turn_seconds is not None:
            return (f"before the turn ran out of time ([tools] max_seconds = "
                    f"{self.turn_seconds:g})")
        return f"within {self.seconds:g} s"


@dataclass(frozen=True)
class _Page:
    body: bytes
    cut_at_size: bool = False  # more than web_max_bytes (decoded)
    cut_at_deadline: bool = False  # still arriving at the deadline


def _read(response: httpx.Response, limit: int, deadline: _Deadline) -> _Page:
    """The body, decoded, up to `limit` bytes, until the deadline."""
    decoder = _Decoder(response.headers.get("content-encoding", ""), response.url)
    body = bytearray()
    watchdog = _Watchdog(response, deadline)
    try:
        for chunk in response.iter_raw():
            body += decoder.decode(chunk, limit + 1 - len(body))
            if len(body) > limit:
                return _Page(bytes(body[:limit]), cut_at_size=True)
            if deadline.passed():
                return _Page(bytes(body), cut_at_deadline=True)
        body += decoder.flush()
    except httpx.HTTPError:
        if watchdog.fired or deadline.passed():
            return _Page(bytes(body[:limit]), cut_at_deadline=True)
        raise
    finally:
        watchdog.cancel()
    if watchdog.fired:
        return _Page(bytes(body[:limit]), cut_at_deadline=True)
    return _Page(bytes(body[:limit]), cut_at_size=len(body) > limit)


class _Decoder:
    """Content-Encoding undone a bounded piece at a time."""

    def __init__(self, encoding: str, url: object) -> None:
        self._encoding = encoding.strip().lower()
        self._url = url
        self._started = False
        if self._encoding in ("", "identity"):
            self._zlib = None
        elif self._encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self._encoding == "deflate":
            self._zlib = zlib.decompressobj()
        else:
            raise ToolFailed(f"{url} came encoded as {self._encoding!r}, which web_fetch does "
                             f"not read (it asks for {ACCEPT_ENCODING})")

    def decode(self, data: bytes, room: int) -> bytes:
        """At most `room` bytes of what `data` decodes to; the rest of it is not needed
        (the caller stops once more than its limit arrived)."""
        if self._zlib is None:
            return data[:room]
        try:
            decoded = self._zlib.decompress(data, room)
        except zlib.error as exc:
            if self._encoding == "deflate" and not self._started:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without its header
                self._started = True
                return self.decode(data, room)
            raise ToolFailed(f"could not decode {self._url}: {exc}") from None
        self._started = True
        return decoded

    def flush(self) -> bytes:
        return self._zlib.flush() if self._zlib is not None else b""


class _Watchdog:
    """At the deadline, shut the response's socket down: a read blocked on a page that
    drips a byte at a time returns at once (a read timeout would restart with each byte)."""

    def __init__(self, response: httpx.Response, deadline: _Deadline) -> None:
        self.fired = False
        stream = response.extensions.get("network_stream")
        self._socket = stream.get_extra_info("socket") if stream is not None else None
        self._timer = threading.Timer(deadline.left(), self._fire)
        self._timer.daemon = True
        if self._socket is not None:
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the read is over anyway

    def cancel(self) -> None:
        self._timer.cancel()


def _report(url: str, response: httpx.Response, page: _Page, chars: int,
            deadline: _Deadline) -> str:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.status_code >= 400:
        raise ToolFailed(f"{url} answered HTTP {response.status_code}")
    if not (kind.startswith("text/") or kind.endswith(("json", "xml")) or not kind):
        return f"{url}: {kind} content, {len(page.body)} bytes, not text"
    text = page.body.decode(response.encoding or "utf-8", "replace")
    if kind in ("text/html", "application/xhtml+xml"):
        text = html_text(text)
    notes = []
    if page.cut_at_size:
        notes.append("the page was cut at [tools] web_max_bytes")
    if page.cut_at_deadline:
        notes.append(f"the page was cut: it did not arrive whole {deadline.within()}")
    if len(text) > chars:
        text = text[:chars]
        notes.append(f"the first {chars} characters of its text are shown")
    note = f"\n[… {'; '.join(notes)}]" if notes else ""
    return f"{url} (HTTP {response.status_code}, {kind or 'no content type'}):\n{text}{note}"


TOOL = Tool(
    "web_fetch",
    "Read a web page (as text) from one of the hosts the user allowed. "
    'Example: {"url": "https://docs.python.org/3/library/shlex.html"}',
    schema({"url": {"type": "string", "description": "an http or https URL"}},
           required=("url",)),
    fetch,
    reads_outside=True,
)
