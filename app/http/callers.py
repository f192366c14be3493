"""Who is asking, and what they sent: the part of a request every route reads, with no
web framework of its own (the chat routes answer before FastAPI is loaded: app/serve/server.py).

Who is asking is decided once, by `identify`, for every route and for /mcp:
- a per-user token (app/access.py, checked by the gate) is its user. A request that
  names another user (`X-Hilo-User`, or a chat body's `user`: Caller.naming) is refused
  with 403 `wrong_user`: a token never borrows another user's memory.
- without one, `X-Hilo-User` names the user, else `[memory] user_id`: every process
  that can reach Hilo is trusted (one trust domain), as is whoever holds the shared
  `[server] token`.
- `[server] client_user_header` (Open WebUI's `X-OpenWebUI-User-Id`), when the owner
  sets it, maps each of a multi-person client's users to a Hilo user of their own,
  namespaced apart from the people Hilo knows by name: "openwebui:<id>" (a client naming
  "ana" never reaches "ana"), and "<token's user>/openwebui:<id>" under a per-user
  token, so one token never reaches another token's memory. It wins over X-Hilo-User.
  Unset, the header is ignored.
Every read and write is filtered by the user, so one user never sees another's rows;
sessions are the user's own too (keyed by user and id). The `X-Hilo-Session` header
names the session on the chat routes (app/api/turns.py says what happens without it).
Ids that look like a secret are refused: an id is stored, queued and logged as it is.

Bodies are read as JSON whatever their Content-Type, as Ollama reads them: LiteLLM and
curl examples send none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from app.config import Config
from app.events import MAX_ID_LENGTH, InvalidEvent, refuse_secret_id
from app.http.errors import MAX_JSON_DEPTH, ApiError, json_too_deep
from app.http.gate import TOKEN_USER
from app.tasks.sessions import is_task_session

__all__ = ["Caller", "wrong_user", "check_id", "check_session", "client_namespace", "identify",
           "caller_of", "load_json", "json_body"]


@dataclass(frozen=True)
class Caller:
    user_id: str
    session_header: str | None
    token_user: str | None = None  # the per-user token's user, which fixes the user
    chosen_by_header: bool = False  # X-Hilo-User or the client's user header named the user

    def naming(self, user: str) -> str:
        """The user for a request whose body names `user` (OpenAI's end-user id): refused
        when a per-user token is another user's; a header's choice stands; else `user`."""
        if self.token_user is not None and user != self.token_user:
            raise wrong_user(self.token_user, "the body's `user`")
        if self.token_user is not None or self.chosen_by_header:
            return self.user_id
        return check_id("user", user)


def wrong_user(token_user: str, named_by: str) -> ApiError:
    return ApiError(403, f"this token belongs to user {token_user!r} and cannot act as another "
                    f"user: drop {named_by}, or use that user's own token", "wrong_user")


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


def check_session(value: str) -> str:
    """`value` as a session a client may write into: a valid id that is not one of the
    sessions holding a scheduled task's runs (their messages are the task's instructions,
    so a client's words there would run as the owner's), else a 400 or 403."""
    check_id("session", value)
    if is_task_session(value):
        raise ApiError(403, f"session {value!r} holds a scheduled task's runs: a client cannot "
                       "write into it; name another session", "task_session")
    return value


def client_namespace(header: str) -> str:
    """The prefix of a client's users, from its header's name: "X-OpenWebUI-User-Id" →
    "openwebui"."""
    name = header.strip().lower().removeprefix("x-")
    for suffix in ("-user-id", "-userid", "-user"):
        if name.endswith(suffix):
            name = name.removesuffix(suffix)
            break
    return name.replace("-", "") or "client"


def identify(config: Config, token_user: str | None, headers: Mapping[str, str]) -> Caller:
    """Who asks (module docstring): `token_user` is the gate's, `headers` the request's
    (case-insensitive). Raises ApiError: 403 for another user's name, 400 for a bad id."""
    named = headers.get("x-hilo-user")
    if token_user is not None and named is not None and named != token_user:
        raise wrong_user(token_user, "X-Hilo-User")
    client_header = config.server.client_user_header
    client_id = (headers.get(client_header) or "").strip() if client_header else ""
    if client_id:
        user_id = f"{client_namespace(client_header)}:{client_id}"
        if token_user is not None:
            user_id = f"{token_user}/{user_id}"
    elif token_user is not None:
        user_id = token_user
    else:
        user_id = named if named is not None else config.memory.user_id
    session = headers.get("x-hilo-session")
    return Caller(check_id("user", user_id),
                  check_session(session) if session is not None else None,
                  token_user, bool(client_id) or named is not None)


def caller_of(request: Request) -> Caller:
    """Who sends `request` (identify, with the gate's token user)."""
    return identify(request.app.state.config, request.scope.get(TOKEN_USER), request.headers)


def load_json(raw: bytes | str) -> Any:
    """JSON as its standard has it, the one way request bodies are read: NaN, Infinity
    and numbers past a double's range (1e999) are not JSON numbers, and would reach the
    model server, the database or a comparison as nothing it can use: each is refused
    with a json.JSONDecodeError saying so."""
    def constant(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not a number JSON has: send a finite number",
                                   "", 0)

    def finite(text: str) -> float:
        number = float(text)
        if not math.isfinite(number):
            raise json.JSONDecodeError(f"the number {text[:40]} is too large: send a finite "
                                       "number", "", 0)
        return number

    return json.loads(raw, parse_constant=constant, parse_float=finite)


async def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object, whatever the Content-Type; an empty body is {}."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = load_json(raw)
    except ValueError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", "invalid_json") from None
    except RecursionError:  # deeper than the parser goes: far deeper than MAX_JSON_DEPTH
        raise json_too_deep() from None
    if not isinstance(value, dict):
        raise ApiError(400, "the request body must be a JSON object", "invalid_json")
    return _without_lone_surrogates(value, MAX_JSON_DEPTH)


def _without_lone_surrogates(value: Any, levels_left: int) -> Any:
    """JSON may escape half a surrogate pair (`"\\ud800"`), which no UTF-8 can carry on to
    the model server or the database: each becomes "?" (clean_text's rule). A list or
    object nested deeper than `levels_left` is refused."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8") if not value.isascii() else value
    if isinstance(value, (list, dict)) and levels_left <= 0:
        raise json_too_deep()
    if isinstance(value, list):
        return [_without_lone_surrogates(item, levels_left - 1) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k, 0): _without_lone_surrogates(v, levels_left - 1)
                for k, v in value.items()}
    return value
