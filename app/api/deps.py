"""What a route handler is handed: who is asking, the service that answers, and the
request's JSON body.

The user is the per-user token's (app/access.py, checked by the gate), else the
`X-Hilo-User` header, else `[memory] user_id`; every read and write is filtered by it,
so one user never sees another's rows. A request with a per-user token that names
another user in `X-Hilo-User` is refused. The `X-Hilo-Session` header names the session
on the chat routes (app/api/turns.py says what happens without it). Ids that look like a
secret are refused: an id is stored, queued and logged as it is.

Bodies are read as JSON whatever their Content-Type, as Ollama reads them: LiteLLM and
curl examples send none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Header, Request

from app.api.errors import ApiError
from app.api.gate import TOKEN_USER
from app.turn.agent import Agent
from app.turn.chat import ChatService
from app.config import Config
from app.events import MAX_ID_LENGTH, InvalidEvent, refuse_secret_id


@dataclass(frozen=True)
class Caller:
    user_id: str
    session_header: str | None
    user_header: bool = False  # the user was named by X-Hilo-User


def check_id(name: str, value: str) -> str:
    """`value` as a user or session id, or a 400 saying what one must look like."""
    if not value.strip() or len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise ApiError(400, f"{name} must be 1 to {MAX_ID_LENGTH} printable characters",
                       f"bad_{name}")
    try:
        refuse_secret_id(name, value)
    except InvalidEvent as exc:
        raise ApiError(400, str(exc), f"bad_{name}") from None
    return value


UserHeader = Annotated[str | None, Header(description="The user, else [memory] user_id "
                                                      "(a per-user token fixes it)")]
SessionHeader = Annotated[str | None, Header(description="The session (chat routes)")]


def user_of(x_hilo_user: str | None, config: Config) -> str:
    """The calling user: the X-Hilo-User header, else [memory] user_id (also for /mcp)."""
    return check_id("user", x_hilo_user if x_hilo_user is not None else config.memory.user_id)


def caller(request: Request, x_hilo_user: UserHeader = None,
           x_hilo_session: SessionHeader = None) -> Caller:
    token_user = request.scope.get(TOKEN_USER)
    if token_user is not None:
        if x_hilo_user is not None and x_hilo_user != token_user:
            raise ApiError(403, f"this token belongs to user {token_user!r} and cannot act as "
                           "another user: drop X-Hilo-User, or use that user's own token",
                           "wrong_user")
        user_id = token_user
    elif x_hilo_user is not None:
        user_id = x_hilo_user
    else:
        user_id = request.app.state.config.memory.user_id
    session = check_id("session", x_hilo_session) if x_hilo_session is not None else None
    return Caller(check_id("user", user_id), session, x_hilo_user is not None)


def service_of(request: Request) -> ChatService:
    return request.app.state.service


def agent_of(request: Request) -> Agent:
    """Hilo's own agent for the chat routes ([tools] http; never the terminal)."""
    return request.app.state.agent


async def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object, whatever the Content-Type; an empty body is {}."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the request body must be a JSON object", "invalid_json")
    return _without_lone_surrogates(value)


def _without_lone_surrogates(value: Any) -> Any:
    """JSON may escape half a surrogate pair (`"\\ud800"`), which no UTF-8 can carry on to
    the model server or the database: each becomes "?" (clean_text's rule)."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8") if not value.isascii() else value
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


Who = Annotated[Caller, Depends(caller)]
Service = Annotated[ChatService, Depends(service_of)]
Tools = Annotated[Agent, Depends(agent_of)]
JsonBody = Annotated[dict[str, Any], Depends(json_body)]
