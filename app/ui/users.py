"""Whose memory the page shows: every user Hilo keeps, to whoever may read them.

The caller is who `identify()` says (app/http/callers.py), as for the API; the page then
shows one of the users that caller may read, picked from a list in the header (kept in
an HttpOnly, SameSite=Strict cookie that only /ui sees, and checked again on every
request):
- the owner at the machine (no token, or the shared `[server] token`): any user Hilo
  keeps — `default`, the people a multi-person client named through `[server]
  client_user_header` (`openwebui:<id>`), and each token's users;
- a per-user token's holder: that user, and the client users under it
  (`<user>/openwebui:<id>`: a client connected with that token);
- a request whose user a header names (`X-Hilo-User`, or the client's user header): that
  user only, with no list.
Every read and edit of the page goes through `Who` below, so it acts on the user shown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated
from urllib.parse import quote, unquote

import apsw
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse

from app.http.callers import Caller, caller_of
from app.http.deps import Service
from app.http.errors import ApiError
from app.memory import known_users
from app.ui.render import COOKIE_PATH, PageRoute, done, same_origin

__all__ = ["USER_COOKIE", "router", "readable_users", "page_caller", "Who", "show_user"]

# The cookie that keeps the user the page shows.
USER_COOKIE = "hilo_user"

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False,
                   dependencies=[Depends(same_origin)])


def _named_by_header(request: Request, caller: Caller) -> bool:
    """Whether a header named the caller's user (no list: that user only)."""
    client_header = request.app.state.config.server.client_user_header
    return caller.chosen_by_header or bool(
        client_header and (request.headers.get(client_header) or "").strip())


def readable_users(con: apsw.Connection, caller: Caller, named_by_header: bool) -> list[str]:
    """The users whose memory `caller` may open on the page, their own first."""
    if named_by_header:
        return [caller.user_id]
    owner = caller.token_user
    kept = [u for u in known_users(con) if owner is None or u.startswith(f"{owner}/")]
    return [caller.user_id, *(u for u in kept if u != caller.user_id)]


def page_caller(request: Request, service: Service) -> Caller:
    """The caller, as the user the page shows (module docstring)."""
    caller = caller_of(request)
    users = readable_users(service.reader(), caller, _named_by_header(request, caller))
    request.state.readable_users = users
    picked = unquote(request.cookies.get(USER_COOKIE, ""))
    if picked and picked != caller.user_id and (picked in users or (
            caller.token_user is None and not _named_by_header(request, caller))):
        return replace(caller, user_id=picked)
    return caller


Who = Annotated[Caller, Depends(page_caller)]


@router.post("/user")
def show_user(request: Request, service: Service,
              user: Annotated[str, Form(max_length=400)]) -> RedirectResponse:
    """Show another user's memory: one the caller may read."""
    caller = caller_of(request)
    users = readable_users(service.reader(), caller, _named_by_header(request, caller))
    if user not in users:
        raise ApiError(403, f"you cannot open the memory of {user!r}: the page shows your "
                       "own users only (the owner, at the machine, may open any)",
                       "wrong_user")
    response = done("/ui", f"Showing the memory of {user}")
    response.set_cookie(USER_COOKIE, quote(user, safe=""), path=COOKIE_PATH, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response
