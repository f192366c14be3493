"""What a route handler is handed: who is asking, and the service that answers.

The user is the `X-Hilo-User` header, else `[memory] user_id`; every read and write is
filtered by it, so one user never sees another's rows. The `X-Hilo-Session` header names
the session on the chat routes (app/api/turns.py says what happens without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request

from app.api.errors import ApiError
from app.chat import ChatService
from app.config import Config
from app.events import MAX_ID_LENGTH


@dataclass(frozen=True)
class Caller:
    user_id: str
    session_header: str | None


def check_id(name: str, value: str) -> str:
    """`value` as a user or session id, or a 400 saying what one must look like."""
    if not value.strip() or len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise ApiError(400, f"{name} must be 1 to {MAX_ID_LENGTH} printable characters",
                       f"bad_{name}")
    return value


UserHeader = Annotated[str | None, Header(description="The user, else [memory] user_id")]
SessionHeader = Annotated[str | None, Header(description="The session (chat routes)")]


def user_of(x_hilo_user: str | None, config: Config) -> str:
    """The calling user: the X-Hilo-User header, else [memory] user_id (also for /mcp)."""
    return check_id("user", x_hilo_user if x_hilo_user is not None else config.memory.user_id)


def caller(request: Request, x_hilo_user: UserHeader = None,
           x_hilo_session: SessionHeader = None) -> Caller:
    session = check_id("session", x_hilo_session) if x_hilo_session is not None else None
    return Caller(user_of(x_hilo_user, request.app.state.config), session)


def service_of(request: Request) -> ChatService:
    return request.app.state.service


Who = Annotated[Caller, Depends(caller)]
Service = Annotated[ChatService, Depends(service_of)]
