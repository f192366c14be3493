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
                now), and its JSON under /memory/turns
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.ui import auth, forms, memory, ops, turns

STATIC_DIR = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Put the memory page's routes and its stylesheet on `app`."""
    for pages in (auth, memory, forms, ops):
        app.include_router(pages.router)
    app.include_router(turns.pages)
    app.include_router(turns.api)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
