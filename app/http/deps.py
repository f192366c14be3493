"""What a FastAPI route handler is handed: who is asking (app/http/callers.py decides it)
and the service that answers; and `JsonRoute`, the routes whose body is read as
app/http/callers.py reads every request's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from fastapi.routing import APIRoute

from app.http.callers import Caller, caller_of, load_json
from app.turn.chat import ChatService

__all__ = ["UserHeader", "SessionHeader", "caller", "service_of", "Who", "Service", "JsonRoute"]

UserHeader = Annotated[str | None, Header(description="The user, else [memory] user_id "
                                                      "(a per-user token fixes it)")]
SessionHeader = Annotated[str | None, Header(description="The session (chat routes)")]


def caller(request: Request, x_hilo_user: UserHeader = None,
           x_hilo_session: SessionHeader = None) -> Caller:
    # The two parameters put the headers on the OpenAPI page; identify reads them all.
    return caller_of(request)


def service_of(request: Request) -> ChatService:
    return request.app.state.service


Who = Annotated[Caller, Depends(caller)]
Service = Annotated[ChatService, Depends(service_of)]


class _JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = load_json(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """A JSON API route: its body read by `load_json` (NaN, Infinity and numbers past a
    double's range are a 400 saying so, as on the chat routes)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            return await handler(_JsonRequest(request.scope, request.receive))

        return answer
