"""The turn inspector's pages: every stored turn, and for one the prompt Hilo sent by
layer, what was recalled and why, what the model server's cache held, and the jobs it
set off.

/ui/turns and /ui/turns/{id} are the pages; /memory/turns and /memory/turns/{id}
(app/api/turn_records.py) the same as JSON, both rendering app/ops/turn_view.py's data, for scripts. Both read as the calling user:
another user's turn is 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from app.http.deps import Service
from app.http.params import TurnId
from app.ops.turn_view import turn_view
from app.turn.records import list_turn_records
from app.ui.memory import STREAM_WORDS
from app.ui.render import PageRoute, page
from app.ui.users import Who

__all__ = ["LISTED", "PART_WORDS", "pages", "turns_page", "turn_page"]

LISTED = 100
# What each part of the prompt is, for a person (app/turn/records.py PROMPT_PARTS).
PART_WORDS = {"instructions": "system prompt", "bootstrap": "MEMORY.md",
              "profile": "profile", "diary": "diary", "facts": "facts",
              "cards": "context cards", "events": "recalled messages",
              "window": "conversation so far", "note": "recalled for this message",
              "message": "the new message"}

pages = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)


@pages.get("/turns", response_class=HTMLResponse)
def turns_page(request: Request, who: Who, service: Service,
               session: Annotated[str | None, Query(max_length=200)] = None) -> HTMLResponse:
    records = list_turn_records(service.reader(), who.user_id, limit=LISTED,
                                session_id=session)
    return page(request, who, "turns.html", records=records, session=session)


@pages.get("/turns/{record_id}", response_class=HTMLResponse)
def turn_page(request: Request, who: Who, service: Service, record_id: TurnId) -> HTMLResponse:
    view = turn_view(service.reader(), service.config, who.user_id, record_id)
    return page(request, who, "turn.html", view=view, part_words=PART_WORDS,
                stream_words=STREAM_WORDS,
                widest=max([layer["tokens"] for layer in view.layers] + [1]))
