"""The memory page at /ui: what Hilo remembers, by layer, to read, correct and trust.

Server-rendered HTML (Jinja2, autoescaped: memory text is often someone else's words),
one stylesheet served from the package, no script needed to read; forms POST and
redirect. Every read and edit goes through the functions the JSON routes, the CLI and
MCP call, as the user `identify()` names (app/api/deps.py); the gate (app/api/gate.py)
lets the page's token arrive in a cookie.

    render.py   the templates, the page's route class (errors as pages), flash
                messages, the same-origin check on every form
    auth.py     sign in (paste a token) and out
    memory.py   the layers: overview, profile, facts and their history, cards, diary,
                MEMORY.md, sessions and their events, search
    forms.py    the corrections: profile keys, facts (add, edit, forget), MEMORY.md
    ops.py      scheduled tasks and the job queue
    turns.py    the turn inspector (inspector.py reads a turn's record as the memory is
                now; its JSON is app/api/turn_records.py's, under /memory/turns)

None of it is loaded before the first request to /ui: the pages and Jinja2 are about
0.15 s of `hilo serve`'s start on two cores, and a chat needs neither. `install` puts
`PageOnDemand` at /ui and under it; the first request builds the routes on a thread (the
event loop goes on serving chats meanwhile), and every request is handed to them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import anyio
from fastapi import APIRouter, FastAPI
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

STATIC_DIR = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Put the memory page (its routes and its stylesheet) on `app`, built on first use."""
    page = PageOnDemand(page_routes)
    app.router.routes.extend([Route("/ui", endpoint=page),
                              Route("/ui/{rest:path}", endpoint=page)])


def page_routes() -> APIRouter:
    """The memory page's routes and its stylesheet."""
    # start-up: the pages and Jinja2 load on the first request to /ui (PageOnDemand)
    from fastapi.staticfiles import StaticFiles

    from app.ui import auth, forms, memory, ops, turns

    routes = APIRouter()
    for pages in (auth, memory, forms, ops):
        routes.include_router(pages.router)
    routes.include_router(turns.pages)
    routes.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    return routes


class PageOnDemand:
    """The ASGI app at /ui and under it: builds the page's routes once, when first asked,
    and hands each request to them as the app's own routes would have taken it."""

    def __init__(self, build: Callable[[], APIRouter]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._routes: APIRouter | None = None

    def _built(self) -> APIRouter:
        with self._lock:  # two first requests at once build it once
            if self._routes is None:
                self._routes = self._build()
            return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routes = self._routes
        if routes is None:
            routes = await anyio.to_thread.run_sync(self._built)
        scope["path_params"] = {}  # the page's routes match the whole path themselves
        await routes(scope, receive, send)
