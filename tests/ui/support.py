"""Speaking to the memory page as a browser does: forms from the page's own origin,
cookies kept, redirects followed by hand so each test sees where a form leads."""

from __future__ import annotations

import html
import re

import httpx

from tests.api.support import HiloServer

BROWSER = {"Accept": "text/html,application/xhtml+xml"}


def browser(hilo: HiloServer, **headers: str) -> httpx.Client:
    """A new browser: its own cookie jar, no redirects followed."""
    return httpx.Client(base_url=hilo.url, headers={**BROWSER, **headers}, timeout=30)


def submit(client: httpx.Client, path: str, data: dict | None = None) -> httpx.Response:
    """A form on one of the page's own pages, POSTed as a browser sends it."""
    return client.post(path, data=data or {}, headers={
        "Origin": str(client.base_url).rstrip("/"), "Sec-Fetch-Site": "same-origin"})


def follow(client: httpx.Client, response: httpx.Response) -> httpx.Response:
    """The page a form's 303 leads to."""
    assert response.status_code == 303, response.text
    return client.get(response.headers["location"])


def text(response: httpx.Response) -> str:
    """The page as a person reads it: tags dropped, entities decoded, spaces collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", response.text, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
