"""The corrections a person makes on the memory page — profile keys, facts (add, edit,
forget) and MEMORY.md — through the same functions as the JSON memory routes, the CLI
and MCP (app/memory/edits.py and friends), on the front-end's writer. Each form answers
with a redirect to a page that says what was done. What the person writes here, signed in
as themselves, is the owner's own hand (app.memory.provenance).

Forgetting asks once, on a page of its own (no script needed), and can be undone for a
few minutes from the facts page: app/ui/undo.py holds the value in this process only
(the forget took it out of every file), and undoing stores it again as it was learned."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.datadir import DataDir
from app.http.deps import Service
from app.http.errors import ApiError
from app.http.params import MAX_ROW_ID
from app.memory import (
    FactNotFound,
    correct_fact,
    delete_profile,
    get_fact,
    is_outside,
    remember_fact,
    set_profile,
)
from app.memory.bootstrap import write_bootstrap
from app.memory.facts import Fact
from app.memory.forget import forget as forget_for_good
from app.memory.restore import restore_forgotten_fact
from app.ui.render import PageRoute, done, page, same_origin
from app.ui.undo import UNDO_SECONDS, ForgetUndos, undos_of
from app.ui.users import Who

__all__ = ["router", "FactId", "Text", "SHOWN_CHARS", "ACTION_WORDS", "save_profile_key",
           "delete_profile_key", "add_fact", "edit_fact", "confirm_forget", "forget",
           "undo_forget", "save_memory_md"]

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False,
                   dependencies=[Depends(same_origin)])

FactId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
Text = Annotated[str, Form()]
SHOWN_CHARS = 120  # of a value, in the message that says what was done

ACTION_WORDS = {"insert": "Added", "update": "Updated", "unchanged": "Already known",
                "supersede": "Updated (the old value is kept as history)",
                "history": "Kept as history (a newer value was said since)"}


def _shown(fact: Fact) -> str:
    value = fact.value if len(fact.value) <= SHOWN_CHARS else fact.value[:SHOWN_CHARS] + "…"
    return f"#{fact.id} {fact.category} · {fact.key}: {value}"


@router.post("/profile")
def save_profile_key(who: Who, service: Service, key: Text, value: Text) -> RedirectResponse:
    action = service.edit(lambda con: set_profile(con, who.user_id, key, value,
                                                  source="user", worker="user",
                                                  from_outside=is_outside("owner")))
    return done("/ui/profile", f"{ACTION_WORDS.get(action, action)}: {key.strip()}")


@router.post("/profile/{key:path}/delete")
def delete_profile_key(key: str, who: Who, service: Service) -> RedirectResponse:
    if not service.edit(lambda con: delete_profile(con, who.user_id, key, worker="user")):
        raise ApiError(404, f"no profile key {key!r}", "not_found")
    return done("/ui/profile", f"Deleted the profile key {key.strip()!r}: no worker will "
                               "learn it again")


@router.post("/facts")
def add_fact(who: Who, service: Service, category: Text, key: Text,
             value: Text) -> RedirectResponse:
    edited = service.edit(lambda con: remember_fact(
        con, who.user_id, category, key, value,
        similarity=service.config.memory.dedupe_similarity, from_outside=is_outside("owner")))
    if edited.fact is None:
        return done("/ui/facts", f"Nothing stored: you forgot {category} · {key} before, and "
                                 "a forgotten fact stays forgotten", ok=False)
    return done(f"/ui/facts/{edited.fact.id}",
                f"{ACTION_WORDS.get(edited.action, edited.action)}: {_shown(edited.fact)}")


@router.post("/facts/{fact_id}/edit")
def edit_fact(fact_id: FactId, who: Who, service: Service, value: Text) -> RedirectResponse:
    edited = service.edit(lambda con: correct_fact(con, who.user_id, fact_id, value,
                                                   from_outside=is_outside("owner")))
    return done(f"/ui/facts/{edited.fact.id}",
                f"{ACTION_WORDS.get(edited.action, edited.action)}: {_shown(edited.fact)}")


def _undos(request: Request) -> ForgetUndos:
    return undos_of(request.app.state)


def _current_fact(service: Service, user_id: str, fact_id: int) -> Fact:
    fact = get_fact(service.reader(), user_id, fact_id)
    if fact is None or fact.superseded_at is not None or fact.deleted_at is not None:
        raise FactNotFound(fact_id)
    return fact


@router.get("/facts/{fact_id}/forget", response_class=HTMLResponse)
def confirm_forget(request: Request, fact_id: FactId, who: Who, service: Service,
                   with_sources: Annotated[bool, Query()] = False) -> HTMLResponse:
    """The one question before a forget: what goes, whether it can be undone."""
    return page(request, who, "forget.html", fact=_current_fact(service, who.user_id, fact_id),
                with_sources=with_sources, undo_minutes=round(UNDO_SECONDS / 60))


@router.post("/facts/{fact_id}/forget", response_model=None)
def forget(request: Request, fact_id: FactId, who: Who, service: Service,
           with_sources: Annotated[bool, Form()] = False,
           confirmed: Annotated[str, Form()] = "") -> RedirectResponse | HTMLResponse:
    if confirmed != "yes":  # a Forget button elsewhere: ask first
        return confirm_forget(request, fact_id, who, service, with_sources)
    gone = forget_for_good(service.writer, who.user_id, fact_id, worker="user",
                           with_sources=with_sources)
    if gone is None or gone.fact is None:
        raise FactNotFound(fact_id)
    said = (f"Forgot {_shown(gone.fact)} — {gone.versions} version(s)"
            + (f" and {gone.events} source message(s)" if with_sources else "")
            + "; no worker will learn it again")
    if with_sources:  # the messages cannot be brought back: no undo is offered
        return done("/ui/facts", said)
    _undos(request).hold(gone.fact)
    return done("/ui/facts", f"{said}. You can undo it below for {round(UNDO_SECONDS / 60)} "
                             "minutes")


@router.post("/facts/undo/{token}")
def undo_forget(request: Request, token: str, who: Who, service: Service) -> RedirectResponse:
    held = _undos(request).take(who.user_id, token)
    if held is None:
        return done("/ui/facts", "Nothing to undo: its time is up (or the server restarted), "
                                 "and a forgotten fact is not kept anywhere", ok=False)
    restored = service.edit(lambda con: restore_forgotten_fact(con, held.fact))
    if restored.outcome == "stated_again":
        return done(f"/ui/facts/{restored.fact_id}", f"Not undone: {held.fact.category} · "
                    f"{held.fact.key} was stated again since; that value stays", ok=False)
    if restored.outcome == "gone":
        return done("/ui/facts", "Not undone: the forgotten fact's place in memory is gone",
                    ok=False)
    return done(f"/ui/facts/{restored.fact_id}", f"Brought back {_shown(held.fact)}, as it "
                "was learned (its earlier values stay forgotten)")


@router.post("/memory-md")
def save_memory_md(who: Who, service: Service,
                   text: Annotated[str, Form()] = "") -> RedirectResponse:
    if who.token_user is not None:
        raise ApiError(403, "MEMORY.md is the owner's: every user's conversations read it, "
                       "so it is edited at the machine or with the [server] token",
                       "owner_only")
    write_bootstrap(DataDir.of(service.config).bootstrap, text)
    return done("/ui/memory-md", "Saved MEMORY.md: the next turn reads it")
