"""The turn inspector: every stored turn, and for one the prompt Hilo sent by layer, what
was recalled and why, what the model server's cache held, and the jobs it set off.

/ui/turns and /ui/turns/{id} are the pages; /memory/turns and /memory/turns/{id} the
same as JSON, for scripts. Both read as the calling user: another user's turn is 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from app.api.deps import Service, Who
from app.api.errors import ApiError
from app.api.memory import MAX_ROW_ID
from app.turn.chat import ChatService
from app.turn.records import TurnRecord, get_turn_record, list_turn_records
from app.ui.inspector import TurnView, inspect_turn
from app.ui.memory import STREAM_WORDS
from app.ui.render import PageRoute, page

TurnId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a turn record's id")]
LISTED = 100
# What each part of the prompt is, for a person (app/turn/records.py PROMPT_PARTS).
PART_WORDS = {"instructions": "system prompt", "bootstrap": "MEMORY.md",
              "profile": "profile", "diary": "diary", "facts": "facts",
              "cards": "context cards", "events": "recalled messages",
              "window": "conversation so far", "note": "recalled for this message",
              "message": "the new message"}

pages = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)
api = APIRouter(prefix="/memory", tags=["Memory API"])


def _record(service: ChatService, user_id: str, record_id: int) -> TurnRecord:
    record = get_turn_record(service.reader(), user_id, record_id)
    if record is None:
        raise ApiError(404, f"no turn {record_id}", "not_found")
    return record


def _view(service: ChatService, user_id: str, record_id: int) -> TurnView:
    return inspect_turn(service.reader(), service.config, user_id,
                        _record(service, user_id, record_id))


@pages.get("/turns", response_class=HTMLResponse)
def turns_page(request: Request, who: Who, service: Service,
               session: Annotated[str | None, Query(max_length=200)] = None) -> HTMLResponse:
    records = list_turn_records(service.reader(), who.user_id, limit=LISTED,
                                session_id=session)
    return page(request, who, "turns.html", records=records, session=session)


@pages.get("/turns/{record_id}", response_class=HTMLResponse)
def turn_page(request: Request, who: Who, service: Service, record_id: TurnId) -> HTMLResponse:
    view = _view(service, who.user_id, record_id)
    return page(request, who, "turn.html", view=view, part_words=PART_WORDS,
                stream_words=STREAM_WORDS,
                widest=max([layer["tokens"] for layer in view.layers] + [1]))


@api.get("/turns", summary="Stored turns, newest first")
def list_turns(who: Who, service: Service,
               limit: Annotated[int, Query(ge=1, le=1000)] = 50,
               before: Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)] = None,
               session: Annotated[str | None, Query(max_length=200)] = None) -> dict:
    """Each model call a chat turn made: its prompt's size by layer, what was recalled,
    the server's counts; `before` (a turn's id) pages back."""
    records = list_turn_records(service.reader(), who.user_id, limit=limit, before=before,
                                session_id=session)
    return {"turns": [r.to_dict() for r in records]}


@api.get("/turns/{record_id}", summary="One turn: its prompt by layer, recall and jobs")
def get_turn(who: Who, service: Service, record_id: TurnId) -> dict:
    """The turn's record with its messages, each recalled item as the memory holds it now
    (forgotten ones without their words), and the background jobs it caused."""
    return _view(service, who.user_id, record_id).to_dict()
