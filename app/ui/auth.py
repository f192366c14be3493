"""Signing in to the memory page: paste a token, kept in an HttpOnly, SameSite=Strict
cookie that only /ui sees. Whether the token is good, and whose memory it opens, the
gate and `identify()` decide on the next request, exactly as for the API."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.access import tokens_in_use
from app.http.deps import Service
from app.http.gate import TOKEN_COOKIE
from app.ui.render import COOKIE_PATH, PageRoute, done, page, same_origin
from app.ui.users import USER_COOKIE

__all__ = ["router", "login_page", "sign_in", "sign_out"]

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False,
                   dependencies=[Depends(same_origin)])


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, service: Service, refused: bool = False) -> HTMLResponse:
    needed = bool(service.config.server.token) or tokens_in_use(service.reader())
    return page(request, None, "login.html", needed=needed, refused=refused)


@router.post("/login")
def sign_in(request: Request, token: Annotated[str, Form()]) -> RedirectResponse:
    # No "signed in" message: the gate has yet to accept the token (else: /ui/login?refused).
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(TOKEN_COOKIE, quote(token.strip(), safe=""), path=COOKIE_PATH,
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def sign_out() -> RedirectResponse:
    response = done("/ui/login", "Signed out.")
    response.delete_cookie(TOKEN_COOKIE, path=COOKIE_PATH)
    response.delete_cookie(USER_COOKIE, path=COOKIE_PATH)
    return response
