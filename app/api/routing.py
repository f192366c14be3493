"""The routes a chat client calls: served without FastAPI, described in its document.

`hilo serve` answers Ollama's and OpenAI's APIs, /health and /metrics from a plain
Starlette app (app/serve/server.py), so the first message after a start does not wait
for FastAPI and pydantic to load (about half a second of a CPU's start). Hilo's own
JSON API, /docs and /openapi.json are a FastAPI app built on their first request
(app/serve/documented.py); its OpenAPI document describes these routes too, from the
same table, so a route is declared once, with its summary beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.routing import Route

__all__ = ["Endpoint", "Entry", "Routes"]

Endpoint = Callable[..., Any]


@dataclass(frozen=True)
class Entry:
    """One method on one path, and what the API document says of it."""

    method: str
    path: str
    endpoint: Endpoint
    summary: str
    responses: dict[int | str, dict[str, Any]] | None = None
    names_the_caller: bool = False  # documents X-Hilo-User and X-Hilo-Session
    operation_id: str | None = None


class Routes:
    """A table of routes under one tag of the API document: `get`, `head` and `post`
    declare them as FastAPI's decorators do; `served()` is them as Starlette routes."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.entries: list[Entry] = []

    def add(self, method: str, path: str, endpoint: Endpoint, summary: str,
            **documented: Any) -> None:
        self.entries.append(Entry(method, path, endpoint, summary, **documented))

    def _declare(self, method: str, path: str, summary: str,
                 **documented: Any) -> Callable[[Endpoint], Endpoint]:
        def declare(endpoint: Endpoint) -> Endpoint:
            self.add(method, path, endpoint, summary, **documented)
            return endpoint
        return declare

    def get(self, path: str, summary: str, **documented: Any) -> Callable[[Endpoint], Endpoint]:
        return self._declare("GET", path, summary, **documented)

    def head(self, path: str, summary: str, **documented: Any) -> Callable[[Endpoint], Endpoint]:
        return self._declare("HEAD", path, summary, **documented)

    def post(self, path: str, summary: str, **documented: Any) -> Callable[[Endpoint], Endpoint]:
        return self._declare("POST", path, summary, **documented)

    def served(self) -> list[Route]:
        # Starlette answers HEAD on a GET route as well (HTTP asks it of every server);
        # FastAPI's routes answered it 405.
        return [Route(entry.path, entry.endpoint, methods=[entry.method])
                for entry in self.entries]
