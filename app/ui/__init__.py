"""The memory page at /ui: what Hilo remembers, by layer, to read, correct and trust.

Server-rendered HTML (Jinja2, autoescaped: memory text is often someone else's words),
one stylesheet served from the package, no script needed to read; forms POST and
redirect. Every read and edit goes through the functions the JSON routes, the CLI and
MCP call, as the user `identify()` names (app/http/callers.py); the gate (app/http/gate.py)
lets the page's token arrive in a cookie.

    render.py   the templates, the page's route class (errors as pages), flash
                messages, the same-origin check on every form
    auth.py     sign in (paste a token) and out
    users.py    whose memory the page shows: every user Hilo keeps, to who may read them
    memory.py   the layers: overview, profile, facts and their history, cards, diary,
                MEMORY.md, sessions and their events, search
    forms.py    the corrections: profile keys, facts (add, edit, forget), MEMORY.md
    undo.py     a forget's undo, held in this process's memory for a few minutes
    ops.py      scheduled tasks and the job queue
    turns.py    the turn inspector's pages, rendering app/ops/turn_view.py's data (its
                JSON is app/api/turn_records.py's, under /memory/turns)

None of it is loaded before the first request to /ui: the pages and Jinja2 are about
0.15 s of `hilo serve`'s start on two cores, and a chat needs neither. `install` puts
the page on the documented API's app (app/serve/documented.py), built on its first
request (app/http/on_demand.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from starlette.routing import Route

from app.http.on_demand import BuiltOnDemand

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

__all__ = ["STATIC_DIR", "install", "page_routes"]

STATIC_DIR = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Put the memory page (its routes and its stylesheet) on `app`, built on first use."""
    page = BuiltOnDemand(page_routes)
    app.router.routes.extend([Route("/ui", endpoint=page),
                              Route("/ui/{rest:path}", endpoint=page)])


def page_routes() -> APIRouter:
    """The memory page's routes and its stylesheet."""
    # start-up: FastAPI, the pages and Jinja2 load on the first request to /ui
    from fastapi import APIRouter
    from fastapi.staticfiles import StaticFiles

    from app.ui import auth, forms, memory, ops, turns, users
    from app.ui.render import no_such_page

    routes = APIRouter()
    for pages in (auth, users, memory, forms, ops):
        routes.include_router(pages.router)
    routes.include_router(turns.pages)
    routes.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    # Last: any other address under /ui answers a page, not the API's JSON 404.
    routes.add_api_route("/ui/{rest:path}", no_such_page, include_in_schema=False,
                         methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
    return routes
