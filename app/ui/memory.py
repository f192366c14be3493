"""The memory by layer, to read: the overview, profile, facts and their history, context
cards, diary, MEMORY.md, sessions and their events, and search — each read through the
functions the JSON memory routes use, as the calling user."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from app.datadir import DataDir
from app.events import Event, events_by_ids, session_events
from app.http.deps import Service
from app.http.errors import ApiError
from app.http.params import MAX_ROW_ID
from app.learn.grounding import supporting_quote
from app.memory import (
    CATEGORIES,
    count_sessions,
    fact_history,
    get_fact,
    last_diary,
    list_cards,
    list_facts,
    list_profile,
    list_sessions,
    session_exists,
)
from app.memory.bootstrap import read_bootstrap
from app.memory.corrections import corrections_of
from app.tasks.store import list_tasks
from app.turn.records import recalls_not_counted
from app.ui.render import PageRoute, page
from app.ui.undo import undos_of
from app.ui.users import Who

__all__ = ["router", "ORIGIN_WORDS", "STREAM_WORDS", "LISTED", "SEARCH_HITS", "Provenance",
           "provenance", "Support", "support_of", "provenances", "overview", "profile", "facts",
           "fact", "cards", "diary", "memory_md", "sessions", "session", "search"]

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)

# What each origin of an event means to a person (app/events.py ORIGINS).
ORIGIN_WORDS = {"typed": "typed by you", "client": "sent by a chat client",
                "model": "the model's reply", "hilo_tool": "Hilo's tool (not approved)",
                "hilo_tool_approved": "Hilo's tool, approved", "task": "a scheduled task",
                "import": "an import"}
# Why a search hit matched, per retrieval stream (app/recall/fusion.py STREAMS).
STREAM_WORDS = {"bm25": "its words", "vector": "its meaning",
                "session": "beside a match in its session", "labels": "its labels",
                "importance": "marked important", "recency": "recent"}
LISTED = 500  # rows a list page shows; the JSON API pages through more
SEARCH_HITS = 20


@dataclass(frozen=True)
class Provenance:
    """Where a memory came from, for a person: words, a link to its message, and whether
    it is content from outside (a web page, a tool's result, an import)."""

    text: str
    outside: bool
    session_id: str | None = None
    event_id: int | None = None


def provenance(source: str, event: Event | None, from_outside: bool) -> Provenance:
    outside = from_outside or (event is not None and event.from_outside)
    if event is None:
        words = {"user": "set by you", "agent": "learned by Hilo",
                 "import": "imported"}.get(source, source)
        return Provenance(words, outside)
    said = (f"returned by the tool {event.tool_name}" if event.role == "tool" and event.tool_name
            else ORIGIN_WORDS.get(event.origin, event.origin))
    verb = "set by you" if source == "user" else "learned"
    return Provenance(f"{verb} from a message {said}", outside, event.session_id, event.id)


@dataclass(frozen=True)
class Support:
    """The message a learned item was kept for (app/learn/grounding.py): the sentence that
    says it, and where that message is."""

    quote: str
    number: int  # the message's place in its session, from 1
    session_id: str
    event_id: int


def support_of(con: Any, user_id: str, key: str, value: str,
               event_id: int | None) -> Support | None:
    if event_id is None:
        return None
    found = events_by_ids(con, user_id, [event_id])
    if not found:
        return None  # the message was forgotten since
    event = found[0]
    (number,) = con.execute("SELECT count(*) FROM events WHERE user_id = ? AND session_id = ? "
                            "AND id <= ?", (user_id, event.session_id, event.id)).fetchone()
    return Support(supporting_quote(key, value, event.content), number, event.session_id,
                   event.id)


def provenances(service: Any, user_id: str, items: Iterable[Any]) -> dict[int, Provenance]:
    """Each item's provenance by its position: (source, source_event_id, from_outside)."""
    items = list(items)
    events = {e.id: e for e in events_by_ids(
        service.reader(), user_id, [i.source_event_id for i in items if i.source_event_id])}
    return {n: provenance(i.source, events.get(i.source_event_id), i.from_outside)
            for n, i in enumerate(items)}


@router.get("", response_class=HTMLResponse)
def overview(request: Request, who: Who, service: Service) -> HTMLResponse:
    con, user = service.reader(), who.user_id
    facts = list_facts(con, user)
    # Each count links to its page.
    counts = {"Profile keys": (len(list_profile(con, user)), "/ui/profile"),
              "Facts": (len(facts), "/ui/facts"),
              "Context cards": (len(list_cards(con, user)), "/ui/cards"),
              "Diary entries": (len(last_diary(con, user, limit=MAX_ROW_ID)), "/ui/diary"),
              "Sessions": (count_sessions(con, user), "/ui/sessions"),
              "Scheduled tasks": (len(list_tasks(con, user)), "/ui/tasks")}
    recent = facts[:5]
    return page(request, who, "overview.html", counts=counts, recent=recent,
                origins=provenances(service, user, recent),
                diary=last_diary(con, user, limit=1))


@router.get("/profile", response_class=HTMLResponse)
def profile(request: Request, who: Who, service: Service) -> HTMLResponse:
    entries = list_profile(service.reader(), who.user_id)
    return page(request, who, "profile.html", entries=entries,
                origins=provenances(service, who.user_id, entries))


@router.get("/facts", response_class=HTMLResponse)
def facts(request: Request, who: Who, service: Service,
          category: Annotated[str | None, Query()] = None) -> HTMLResponse:
    category = category if category in CATEGORIES else None
    found = list_facts(service.reader(), who.user_id, category=category, limit=LISTED)
    return page(request, who, "facts.html", facts=found, category=category,
                categories=CATEGORIES, origins=provenances(service, who.user_id, found),
                undos=undos_of(request.app.state).pending(who.user_id))


@router.get("/facts/{fact_id}", response_class=HTMLResponse)
def fact(request: Request, who: Who, service: Service,
         fact_id: Annotated[int, Path(ge=1, le=MAX_ROW_ID)]) -> HTMLResponse:
    con, user = service.reader(), who.user_id
    found = get_fact(con, user, fact_id)
    if found is None or not found.value:  # none, or forgotten: only its key and hash are left
        raise ApiError(404, f"no fact {fact_id}: it was never stored, or was forgotten",
                       "not_found")
    # Oldest first, so each superseded value is followed by the one that replaced it.
    versions = sorted((f for f in list_facts(con, user, category=found.category,
                                             include_history=True) if f.key == found.key),
                      key=lambda f: (f.created_at, f.id))
    history = fact_history(con, user, fact_id)
    sources = {e.id: e for e in events_by_ids(
        con, user, [h["source_event_id"] for h in history if h["source_event_id"]])}
    support = (support_of(con, user, found.key, found.value, found.source_event_id)
               if found.source == "agent" else None)
    return page(request, who, "fact.html", fact=found, versions=versions, history=history,
                sources=sources, origin=provenances(service, user, [found])[0], support=support,
                current=found.superseded_at is None and found.deleted_at is None,
                # The worker counts the turns' recalls every minute; the newest are added here.
                recalled=found.access_count + recalls_not_counted(con, user, "fact", fact_id))


@router.get("/cards", response_class=HTMLResponse)
def cards(request: Request, who: Who, service: Service) -> HTMLResponse:
    return page(request, who, "cards.html",
                cards=list_cards(service.reader(), who.user_id, limit=LISTED))


@router.get("/diary", response_class=HTMLResponse)
def diary(request: Request, who: Who, service: Service) -> HTMLResponse:
    return page(request, who, "diary.html",
                entries=last_diary(service.reader(), who.user_id, limit=LISTED))


@router.get("/memory-md", response_class=HTMLResponse)
def memory_md(request: Request, who: Who, service: Service) -> HTMLResponse:
    path = DataDir.of(service.config).bootstrap
    written = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return page(request, who, "memory_md.html", written=written, sent=read_bootstrap(path),
                editable=who.token_user is None)


@router.get("/sessions", response_class=HTMLResponse)
def sessions(request: Request, who: Who, service: Service) -> HTMLResponse:
    return page(request, who, "sessions.html",
                sessions=list_sessions(service.reader(), who.user_id, limit=LISTED))


@router.get("/sessions/{session_id:path}", response_class=HTMLResponse)
def session(request: Request, who: Who, service: Service, session_id: str) -> HTMLResponse:
    if not session_exists(service.reader(), who.user_id, session_id):
        raise ApiError(404, f"no session {session_id!r}", "not_found")
    events = session_events(service.reader(), who.user_id, session_id)
    return page(request, who, "session.html", session_id=session_id, events=events,
                origin_words=ORIGIN_WORDS, corrections=corrections_of(
                    service.reader(), who.user_id, "event", [e.id for e in events]))


@router.get("/search", response_class=HTMLResponse)
def search(request: Request, who: Who, service: Service,
           q: Annotated[str, Query(max_length=2000)] = "") -> HTMLResponse:
    hits = []
    if q.strip():
        hits = service.search_memory(who.user_id, q, SEARCH_HITS)
    return page(request, who, "search.html", q=q, hits=hits)
