"""web_fetch: read a page from a host the user listed in `[tools] web_allowed_hosts`
(no list, no tool), over httpx; a redirect is followed only to another listed host. HTML
comes back as its text.

The address is checked, not only the name: each host is resolved once, here, and every
address it resolves to must be public — a private, loopback, link-local or otherwise
reserved one is refused (a listed name whose DNS an attacker controls could point at
this machine's Ollama, a router, a cloud's metadata service) unless the owner listed
that address itself ("127.0.0.1:8080", "localhost"). The request then goes to the
address that was checked (the URL's name stays in the Host header and TLS's server
name), so no second lookup can answer differently in between (DNS rebinding).

Bounds a page cannot stretch: one deadline for the whole exchange — name lookup,
connection, the response's headers, redirects and body (`web_timeout_seconds`, cut to
what is left of the turn's `[tools] max_seconds`): at the deadline every socket the
fetch opened is shut down under whatever read is waiting, so a server that sends its
headers or its body a byte at a time holds it no longer (a read timeout alone restarts
with each byte); and `web_max_bytes` of the body as decoded, read incrementally (gzip
and deflate are decompressed here, a bounded piece at a time, so a small compressed body
cannot inflate into memory). A fetch asked for in a turn that read content from outside
needs a fresh yes (registry.py): a URL can carry what the turn read to anyone.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from app.turn.tools.registry import Tool, ToolContext, ToolFailed, schema

__all__ = ["MAX_REDIRECTS", "ACCEPT_ENCODING", "host_allowed", "html_text", "fetch", "Target",
           "checked_target", "listed_as_address", "private_kind", "TOOL"]

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
    watchdog = _Watchdog(deadline)
    try:
        with httpx.Client(follow_redirects=False, headers={
                "User-Agent": "hilo-web-fetch", "Accept-Encoding": ACCEPT_ENCODING}) as client:
            for _ in range(MAX_REDIRECTS + 1):
                if not host_allowed(url, hosts):
                    raise ToolFailed(f"{url} is not on a host web_fetch may read; the hosts "
                                     f"are: {', '.join(hosts)} ([tools] web_allowed_hosts)")
                target = checked_target(url, hosts, deadline)
                try:
                    with client.stream("GET", target.url, headers={"Host": target.host},
                                       extensions=target.extensions(watchdog.trace),
                                       timeout=deadline.left()) as response:
                        if response.is_redirect and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue
                        page = _read(url, response, tools.web_max_bytes, deadline, watchdog)
                        return _report(url, response, page, tools.web_output_chars, deadline)
                except httpx.TimeoutException:
                    raise ToolFailed(f"{url} did not answer {deadline.within()}") from None
                except httpx.HTTPError as exc:
                    if watchdog.fired:  # the deadline shut the socket before the headers came
                        raise ToolFailed(f"{url} did not answer {deadline.within()}") from None
                    raise ToolFailed(f"could not fetch {url}: {exc}") from None
        raise ToolFailed(f"{url}: more than {MAX_REDIRECTS} redirects")
    finally:
        watchdog.cancel()


# -- the address ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a URL's request goes: the checked address in place of its name."""

    url: str  # the URL with the address as its host
    host: str  # the Host header: the URL's name (and port) as it gave them
    server_name: str | None  # https: the name TLS asks for and the certificate must carry

    def extensions(self, trace: Any) -> dict[str, Any]:
        extensions: dict[str, Any] = {"trace": trace}
        if self.server_name is not None:
            extensions["sni_hostname"] = self.server_name
        return extensions


def checked_target(url: str, hosts: Sequence[str], deadline: _Deadline) -> Target:
    """The URL's host resolved once, every address it has checked (module docstring), and
    the request aimed at the first; ToolFailed naming an address that is not public."""
    split = urlsplit(url)
    name = (split.hostname or "").rstrip(".")
    port = split.port or (443 if split.scheme == "https" else 80)
    addresses = _resolve(url, name, port, deadline)
    if not listed_as_address(name, port, hosts):
        for address in addresses:
            kind = private_kind(address)
            if kind is not None:
                raise ToolFailed(
                    f"{url}: {name} resolves to {address}, a {kind} address; web_fetch reads "
                    "such addresses only from a host [tools] web_allowed_hosts lists by its "
                    'address (such as "127.0.0.1:8080" or "localhost")')
    address = addresses[0]
    netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    host = split.netloc.rpartition("@")[2]  # the name and port, without any user:password
    return Target(urlunsplit((split.scheme, netloc, split.path or "/", split.query, "")), host,
                  name if split.scheme == "https" else None)


def listed_as_address(name: str, port: int, hosts: Sequence[str]) -> bool:
    """Whether the owner listed this very address (an IP, or "localhost"), not a name
    whose DNS could answer anything."""
    for pattern in hosts:
        listed, _, wanted_port = pattern.lower().rpartition(":") if (
            pattern.count(":") == 1 or pattern.startswith("[")) else (pattern.lower(), "", "")
        listed = listed.strip("[]")
        if wanted_port and wanted_port != str(port):
            continue
        if listed == name.lower() and (listed == "localhost" or _is_address(listed)):
            return True
    return False


def private_kind(address: str) -> str | None:
    """What makes an address not public ("loopback", "private", "link-local", "reserved"),
    or None for one on the public internet. An IPv4 address inside IPv6 (mapped, NAT64)
    is judged as itself."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private:
        return "private"
    if not ip.is_global or ip.is_multicast:
        return "reserved"
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _resolve(url: str, name: str, port: int, deadline: _Deadline) -> list[str]:
    """The host's addresses, looked up once, within the deadline (a lookup that hangs
    is left to finish on its own)."""
    if _is_address(name):
        return [name]
    found: dict[str, Any] = {}

    def look_up() -> None:
        try:
            found["infos"] = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            found["error"] = exc

    lookup = threading.Thread(target=look_up, name="web-fetch-dns", daemon=True)
    lookup.start()
    lookup.join(deadline.left())
    if lookup.is_alive():
        raise ToolFailed(f"{url} did not answer {deadline.within()} (its name did not resolve)")
    if "error" in found:
        raise ToolFailed(f"could not fetch {url}: {name} does not resolve ({found['error']})")
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found["infos"]))
    if not addresses:
        raise ToolFailed(f"could not fetch {url}: {name} resolves to no address")
    return addresses


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


def _read(url: str, response: httpx.Response, limit: int, deadline: _Deadline,
          watchdog: _Watchdog) -> _Page:
    """The body, decoded, up to `limit` bytes, until the deadline."""
    decoder = _Decoder(response.headers.get("content-encoding", ""), url)
    body = bytearray()
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
    """At the deadline, shut down every socket the fetch opened (httpcore's trace hands
    each over as it connects, before a byte of the request): a read blocked on headers
    or a body that drip a byte at a time returns at once (a read timeout would restart
    with each byte)."""

    def __init__(self, deadline: _Deadline) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(deadline.left(), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self.watch(info["return_value"].get_extra_info("socket"))

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the read is over anyway


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
