"""What a FastAPI route handler is handed: who is asking (app/api/callers.py decides it)
and the service that answers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from app.api.callers import Caller, caller_of
from app.turn.chat import ChatService

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
