"""The gate every request passes first: the bearer token and the cap on request bodies.

With `[server] token` set, every route but /health needs `Authorization: Bearer
<token>`. A pure ASGI middleware, so streamed replies pass through untouched.
"""

from __future__ import annotations

import hmac
from typing import Any

from app.api.errors import error_response

# Routes open without the token.
OPEN_PATHS = frozenset({"/health"})


class Gate:
    """Bearer token on every route but /health, and a cap on request bodies."""

    def __init__(self, app: Any, token: str, max_body: int) -> None:
        self.app, self.token, self.max_body = app, token.encode(), max_body

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = dict(scope["headers"])
        if self.token and path not in OPEN_PATHS and not self._authorized(headers):
            await error_response(
                path, 401, "missing or wrong bearer token: send the header "
                "`Authorization: Bearer <token>` with Hilo's [server] token", "unauthorized",
                {"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None:
            if int(length) > self.max_body:
                await self._too_large(scope, receive, send, int(length))
                return
        elif scope["method"] in ("POST", "PUT", "PATCH"):
            # A chunked body: read it here, up to the cap, and hand it on whole.
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                if len(body) > self.max_body:
                    await self._too_large(scope, receive, send, None)
                    return
                if not message.get("more_body"):
                    break
            receive = _replay(bytes(body), receive)
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token)

    async def _too_large(self, scope: dict, receive: Any, send: Any, size: int | None) -> None:
        size_text = f"{size} bytes" if size is not None else "larger than that"
        message = (f"the request body is {size_text}; Hilo accepts at most "
                   f"{self.max_body} bytes — send less history or shorter messages")
        await error_response(scope["path"], 413, message, "body_too_large")(scope, receive, send)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
