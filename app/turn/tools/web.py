"""web_fetch: read a page from a host the user listed in `[tools] web_allowed_hosts`
(no list, no tool), over httpx, within `web_timeout_seconds` and `web_max_bytes`; a
redirect is followed only to another listed host. HTML comes back as its text. A fetch
asked for in a turn that read content from outside needs a fresh yes (registry.py): a
URL can carry what the turn read to anyone."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any, Sequence
from urllib.parse import urljoin, urlsplit

import httpx

from app.turn.tools.registry import Tool, ToolContext, ToolFailed, schema

MAX_REDIRECTS = 5
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
    timeout = ctx.seconds_left(tools.web_timeout_seconds)
    with httpx.Client(timeout=timeout, follow_redirects=False,
                      headers={"User-Agent": "hilo-web-fetch"}) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if not host_allowed(url, hosts):
                raise ToolFailed(f"{url} is not on a host web_fetch may read; the hosts are: "
                                 f"{', '.join(hosts)} ([tools] web_allowed_hosts)")
            try:
                with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    body, cut = _read(response, tools.web_max_bytes)
                    return _report(url, response, body, cut, tools.web_output_chars)
            except httpx.TimeoutException:
                raise ToolFailed(f"{url} did not answer within {timeout:g} s") from None
            except httpx.HTTPError as exc:
                raise ToolFailed(f"could not fetch {url}: {exc}") from None
    raise ToolFailed(f"{url}: more than {MAX_REDIRECTS} redirects")


def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    body = bytearray()
    for chunk in response.iter_bytes():
        body.extend(chunk)
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


def _report(url: str, response: httpx.Response, body: bytes, cut: bool, chars: int) -> str:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.status_code >= 400:
        raise ToolFailed(f"{url} answered HTTP {response.status_code}")
    if not (kind.startswith("text/") or kind.endswith(("json", "xml")) or not kind):
        return f"{url}: {kind} content, {len(body)} bytes, not text"
    text = body.decode(response.encoding or "utf-8", "replace")
    if kind in ("text/html", "application/xhtml+xml"):
        text = html_text(text)
    notes = []
    if cut:
        notes.append("the page was cut at [tools] web_max_bytes")
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
