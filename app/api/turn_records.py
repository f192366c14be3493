"""/memory/turns: the stored turns as JSON, for scripts: each model call a chat turn made,
and for one the prompt by layer, what was recalled and why, and the jobs it set off (the
memory page's turn inspector, app/ui/turns.py, shows the same). Both read as the calling
user: another user's turn is 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.http.deps import JsonRoute, Service, Who
from app.http.params import MAX_ROW_ID, TurnId
from app.turn.records import list_turn_records

__all__ = ["router", "list_turns", "get_turn"]

router = APIRouter(prefix="/memory", tags=["Memory API"], route_class=JsonRoute)


@router.get("/turns", summary="Stored turns, newest first")
def list_turns(who: Who, service: Service,
               limit: Annotated[int, Query(ge=1, le=1000)] = 50,
               before: Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)] = None,
               session: Annotated[str | None, Query(max_length=200)] = None) -> dict:
    """Each model call a chat turn made: its prompt's size by layer, what was recalled,
    the server's counts; `before` (a turn's id) pages back."""
    records = list_turn_records(service.reader(), who.user_id, limit=limit, before=before,
                                session_id=session)
    return {"turns": [r.to_dict() for r in records]}


@router.get("/turns/{record_id}", summary="One turn: its prompt by layer, recall and jobs")
def get_turn(who: Who, service: Service, record_id: TurnId) -> dict:
    """The turn's record with its messages, each recalled item as the memory holds it now
    (forgotten ones without their words), and the background jobs it caused."""
    # start-up: the inspector reads the job queue (Huey), which `hilo serve` loads only
    # when a turn is inspected
    from app.ops.turn_view import turn_view

    return turn_view(service.reader(), service.config, who.user_id, record_id).to_dict()
