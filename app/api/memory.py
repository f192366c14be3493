"""The memory API under /memory: append events, preview a turn's context, search, and
read or edit the profile, facts and sessions, always as the calling user."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from app.events import Event, InvalidEvent, session_events
from app.http.callers import check_id, check_session
from app.http.deps import JsonRoute, Service, Who
from app.http.errors import ApiError
from app.http.params import MAX_ROW_ID
from app.memory import (
    Category,
    InvalidMemory,
    delete_profile,
    fact_history,
    get_fact,
    is_outside,
    list_facts,
    list_profile,
    list_sessions,
    remember_fact,
    session_exists,
    set_profile,
)
from app.memory.forget import forget
from app.memory.profile import KEY_CHARS as PROFILE_KEY_CHARS
from app.memory.profile import VALUE_CHARS as PROFILE_VALUE_CHARS
from app.memory.validation import check_entry
from app.model.tool_calls import stored_tool_calls
from app.sanitize import clean_text, redact_secrets
from app.turn.chat import ChatService

__all__ = ["FactId", "EventIn", "AppendEvents", "ContextRequest", "ProfileValue", "FactIn",
           "router", "append_events", "get_context", "search", "get_profile", "put_profile",
           "remove_profile", "get_facts", "add_fact", "get_one_fact", "remove_fact",
           "get_sessions", "get_session_events", "end_session"]

# SQLite's row ids are signed 64-bit integers: a larger id names no row.
FactId = Annotated[int, Path(le=MAX_ROW_ID, description="a fact's id")]


class EventIn(BaseModel):
    role: Literal["user", "assistant", "tool", "system"]
    content: str
    tool_call_id: str | None = None
    tool_name: str | None = None


class AppendEvents(BaseModel):
    session_id: str
    events: list[EventIn] = Field(min_length=1, max_length=1000)


class ContextRequest(BaseModel):
    session_id: str
    text: str
    system: str | None = Field(None, description="the client's system prompt, kept first")
    model: str | None = None


class ProfileValue(BaseModel):
    value: str


class FactIn(BaseModel):
    category: Category = "fact"
    key: str
    value: str
    importance: float = Field(0.5, ge=0, le=1)


def _event_dict(event: Event) -> dict:
    return {"id": event.id, "session_id": event.session_id, "role": event.role,
            "content": event.content, "created_at": event.created_at,
            "importance": event.importance, "compacted": event.compacted,
            "truncated_from": event.original_length, "redactions": list(event.redactions),
            "tool_name": event.tool_name, "tool_call_id": event.tool_call_id,
            "tool_calls": stored_tool_calls(event.tool_calls_json) or None,
            "origin": event.origin, "from_outside": event.from_outside}


def _fact_dict(fact: Any) -> dict:
    record = asdict(fact)
    record.pop("user_id")
    return record


def _edit(service: ChatService, write: Any) -> Any:
    try:
        return service.edit(write)
    except InvalidMemory as exc:
        raise ApiError(400, str(exc), "invalid_memory") from exc


router = APIRouter(prefix="/memory", tags=["Memory API"], route_class=JsonRoute)


@router.post("/events", summary="Append events to a session", status_code=201)
def append_events(body: AppendEvents, who: Who, service: Service) -> dict:
    """Stored as the client sent them (sanitised: secrets redacted, size capped), as content
    from outside (a client's, not the person typing), and handed to the workers like a
    chat turn."""
    session_id = check_session(body.session_id)
    try:
        stored = [service.append(who.user_id, session_id, e.role, e.content,
                                 tool_call_id=e.tool_call_id, tool_name=e.tool_name,
                                 origin="client")
                  for e in body.events]
    except InvalidEvent as exc:
        raise ApiError(400, str(exc), "invalid_event") from exc
    service.handoff.after_reply(who.user_id, session_id, [e.id for e in stored])
    return {"events": [_event_dict(e) for e in stored]}


@router.post("/context", summary="The context a turn would get, with explain")
def get_context(body: ContextRequest, who: Who, service: Service) -> dict:
    """The messages the model would receive for `text` in this session — nothing is
    stored — and `explain`: each layer's status and tokens, and why each fact and card
    was chosen."""
    # Cleaned and redacted as a stored message would be: the text is embedded by the
    # model server and shown in the messages.
    system = clean_text(body.system) if body.system is not None else None
    built = service.build_context(who.user_id, check_id("session", body.session_id),
                                  redact_secrets(clean_text(body.text)).text,
                                  client_system=system, model=body.model)
    return {"messages": built.messages, "tokens": built.tokens, "budget": built.budget,
            "explain": built.explain}


@router.get("/search", summary="Search facts, context cards and events")
def search(who: Who, service: Service, q: Annotated[str, Query(min_length=1)],
           limit: Annotated[int, Query(ge=1, le=100)] = 10, explain: bool = False) -> dict:
    """Facts, then cards, then raw events matching `q`, ranked as a chat turn ranks them,
    each with `why` it matches (words, the time asked about, a close meaning, or the
    question or reply beside a match); with `explain`, each hit's rank in every retrieval
    stream and its fused score."""
    hits = service.search_memory(who.user_id, q, limit)
    return {"hits": [hit.to_dict(explain) for hit in hits]}


@router.get("/profile", summary="List profile keys")
def get_profile(who: Who, service: Service) -> dict:
    return {"profile": [asdict(entry) for entry in list_profile(service.reader(), who.user_id)]}


@router.put("/profile/{key}", summary="Set a profile key")
def put_profile(key: str, body: ProfileValue, who: Who, service: Service) -> dict:
    # A client's word, not the owner's own hand (app.memory.provenance).
    action = _edit(service, lambda con: set_profile(con, who.user_id, key, body.value,
                                                    source="user", worker="user",
                                                    from_outside=is_outside("outside")))
    # The entry as stored: cleaned, and redacted when it holds or is a secret.
    stored_key, _ = check_entry(key, body.value, PROFILE_KEY_CHARS, PROFILE_VALUE_CHARS)
    value = next((e.value for e in list_profile(service.reader(), who.user_id)
                  if e.key == stored_key), None)
    return {"key": stored_key, "value": value, "action": action}


@router.delete("/profile/{key}", summary="Delete a profile key (no worker re-creates it)")
def remove_profile(key: str, who: Who, service: Service) -> dict:
    if not _edit(service, lambda con: delete_profile(con, who.user_id, key, worker="user")):
        raise ApiError(404, f"no profile key {key!r}", "not_found")
    return {"key": key.strip().casefold(), "deleted": True}


@router.get("/facts", summary="List current facts")
def get_facts(who: Who, service: Service,
              category: Annotated[Category | None, Query()] = None,
              limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
              history: bool = False) -> dict:
    """Most recent first; with `history`, superseded and deleted versions too."""
    facts = list_facts(service.reader(), who.user_id, category=category, limit=limit,
                       include_history=history)
    return {"facts": [_fact_dict(f) for f in facts]}


@router.post("/facts", summary="Add or update a fact", status_code=201)
def add_fact(body: FactIn, who: Who, service: Service) -> dict:
    """One current fact per (category, key), and the workers' dedupe: a new value, or a
    similar text under another key, supersedes the old fact, which is kept."""
    edited = _edit(service, lambda con: remember_fact(
        con, who.user_id, body.category, body.key, body.value, importance=body.importance,
        similarity=service.config.memory.dedupe_similarity,
        from_outside=is_outside("outside")))  # a client's word (app.memory.provenance)
    return {"action": edited.action, "fact": _fact_dict(edited.fact) if edited.fact else None}


@router.get("/facts/{fact_id}", summary="One fact and the history of its key")
def get_one_fact(fact_id: FactId, who: Who, service: Service) -> dict:
    con = service.reader()
    fact = get_fact(con, who.user_id, fact_id)
    if fact is None:
        raise ApiError(404, f"no fact {fact_id}", "not_found")
    return {"fact": _fact_dict(fact), "history": fact_history(con, who.user_id, fact_id)}


@router.delete("/facts/{fact_id}", summary="Forget a fact for good (no worker re-creates it)")
def remove_fact(fact_id: FactId, who: Who, service: Service, with_sources: bool = False) -> dict:
    """The value, its earlier versions, vectors and log values go; with `with_sources`,
    the messages it was learned from too."""
    if not forget(service.writer, who.user_id, fact_id, worker="user",
                  with_sources=with_sources):
        raise ApiError(404, f"no current fact {fact_id}", "not_found")
    return {"id": fact_id, "deleted": True}


@router.get("/sessions", summary="List sessions, most recent first")
def get_sessions(who: Who, service: Service,
                 limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict:
    return {"sessions": [asdict(s) for s in list_sessions(service.reader(), who.user_id,
                                                          limit=limit)]}


@router.get("/sessions/{session_id}/events", summary="A session's events, oldest first")
def get_session_events(session_id: str, who: Who, service: Service,
                       limit: Annotated[int | None, Query(ge=1, le=10_000)] = None) -> dict:
    if not session_exists(service.reader(), who.user_id, session_id):
        raise ApiError(404, f"no session {session_id!r}", "not_found")
    events = session_events(service.reader(), who.user_id, session_id, limit=limit)
    return {"session_id": session_id, "events": [_event_dict(e) for e in events]}


@router.post("/sessions/{session_id}/end", summary="End a session (its diary entry is queued)")
def end_session(session_id: str, who: Who, service: Service) -> dict:
    if not session_exists(service.reader(), who.user_id, session_id):
        raise ApiError(404, f"no session {session_id!r}", "not_found")
    ended = service.end_session(who.user_id, session_id)
    return {"session_id": session_id, "ended": ended}
