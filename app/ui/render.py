"""How the memory page answers: templates, errors as pages, flash messages, and the
same-origin check every form passes.

A form POSTs and is redirected (303) to a page that says what it did: the message rides
in a short-lived cookie, never in the address, so a link cannot make the page say
something Hilo did not. A form is accepted only from the page's own origin: the token's
cookie is SameSite=Strict, and a browser's Origin (or Referer) must name this server.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader

from app.errors import HiloError
from app.http.callers import Caller
from app.http.errors import ApiError
from app.http.gate import SAFE_METHODS, TOKEN_COOKIE

__all__ = ["TEMPLATE_DIR", "FLASH_COOKIE", "COOKIE_PATH", "NAV", "SECURITY_HEADERS", "templates",
           "Flash", "page", "done", "error_page", "no_such_page", "PageRoute", "same_origin"]

TEMPLATE_DIR = Path(__file__).parent / "templates"
FLASH_COOKIE = "hilo_flash"
COOKIE_PATH = "/ui"

# The sections in the navigation: (address, label). /ui/turns is the turn inspector's.
NAV = (("/ui", "Overview"), ("/ui/profile", "Profile"), ("/ui/facts", "Facts"),
       ("/ui/cards", "Cards"), ("/ui/diary", "Diary"), ("/ui/memory-md", "MEMORY.md"),
       ("/ui/sessions", "Sessions"), ("/ui/search", "Search"), ("/ui/turns", "Turns"),
       ("/ui/tasks", "Tasks"), ("/ui/queue", "Queue"))

# Only Hilo's own assets, never inside another site's frame (a hidden "Forget" button
# under a decoy), forms only to Hilo: a second wall behind the escaping.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}

# Autoescaped everywhere: memory holds other people's words (web pages, tool results).
templates = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=True,
                        trim_blocks=True, lstrip_blocks=True)
templates.filters["when"] = lambda moment: (moment or "").replace("T", " ")[:19]
templates.filters["seg"] = lambda text: quote(str(text), safe="")  # one path segment


@dataclass(frozen=True)
class Flash:
    text: str
    ok: bool = True


def page(request: Request, who: Caller | None, template: str, *, status: int = 200,
         **context: Any) -> HTMLResponse:
    """`template` rendered for `who`, with the flash message left by the last form."""
    flash = _read_flash(request)
    html = templates.get_template(template).render(
        nav=NAV, user=who.user_id if who else None, flash=flash,
        signed_in=TOKEN_COOKIE in request.cookies, path=request.url.path,
        # Whose memory the caller may open (app/ui/users.py), for the list in the header.
        users=getattr(request.state, "readable_users", []) if who else [], **context)
    response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path=COOKIE_PATH)
    return response


def done(location: str, message: str, *, ok: bool = True) -> RedirectResponse:
    """The answer to a form: to `location`, which will say `message`."""
    response = RedirectResponse(location, status_code=303)
    value = quote(("ok:" if ok else "error:") + message, safe="")
    response.set_cookie(FLASH_COOKIE, value[:3000], path=COOKIE_PATH, httponly=True,
                        samesite="strict")
    return response


def _read_flash(request: Request) -> Flash | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, text = unquote(raw).partition(":")
    return Flash(text, ok=kind == "ok")


def error_page(request: Request, status: int, message: str,
               heading: str = "Not done") -> HTMLResponse:
    back = _same_origin_referer(request) or "/ui"
    return page(request, None, "error.html", status=status, message=message, back=back,
                heading=heading)


async def no_such_page(request: Request) -> HTMLResponse:
    """An address under /ui that names no page: a page saying so (not the API's JSON)."""
    return error_page(request, 404, f"there is no page at {request.url.path}: the menu above "
                      "lists the memory's pages", heading="No such page")


class PageRoute(APIRoute):
    """A route of the memory page: the HiloError family and malformed forms answer as a
    page saying what went wrong, with the error's status."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except HiloError as exc:
                return error_page(request, exc.http_status, exc.message)
            except RequestValidationError as exc:
                fields = ", ".join(str(e.get("loc", ("?",))[-1]) for e in exc.errors())
                return error_page(request, 400,
                                  f"a bad or missing {fields} in this address or form")

        return answer


def same_origin(request: Request) -> None:
    """Refuse a form sent from another site (403): the browser says where it came from."""
    if request.method in SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise _cross_site(site)
    origin = request.headers.get("origin")
    if origin is not None and origin.rstrip("/").lower() != _own_origin(request):
        raise _cross_site(origin)
    referer = request.headers.get("referer")
    if origin is None and referer is not None and _same_origin_referer(request) is None:
        raise _cross_site(referer)


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}".lower()


def _same_origin_referer(request: Request) -> str | None:
    """The Referer's path when it is a page of this server, else None."""
    referer = urlsplit(request.headers.get("referer", ""))
    if f"{referer.scheme}://{referer.netloc}".lower() != _own_origin(request):
        return None
    return referer.path + (f"?{referer.query}" if referer.query else "")


def _cross_site(where: str) -> ApiError:
    return ApiError(403, f"a form sent from {where!r}: the memory page accepts forms only "
                    "from its own pages", "cross_site_form")
