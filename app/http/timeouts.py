"""Slow clients are timed out: uvicorn's h11 protocol with deadlines for a request's headers
and for its body.

uvicorn times out only idle keep-alive connections, and cancels that timer on the first
byte: a client that opens a connection and sends headers a byte at a time (or never
finishes them), or sends its headers and then trickles or stops its body, holds the
connection (and a request handler waiting for the body) for ever. `DeadlineProtocol`
closes a connection whose request headers have not all arrived HEADER_TIMEOUT_SECONDS
after it opened or after its previous response ended, and answers 408 and closes one
whose body has not all arrived BODY_TIMEOUT_SECONDS after its headers.

uvicorn counts every open connection against LIMIT_CONCURRENCY and answers 503 beyond
it, so idle ones would starve requests (a local process reopening them, for ever). At
most MAX_WAITING_CONNECTIONS connections wait for a request's headers; a new one closes
the one that has waited longest, which has sent no request to lose.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from weakref import WeakKeyDictionary

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from app.http.errors import error_body

__all__ = ["HEADER_TIMEOUT_SECONDS", "BODY_TIMEOUT_SECONDS", "KEEP_ALIVE_SECONDS",
           "LIMIT_CONCURRENCY", "MAX_WAITING_CONNECTIONS", "DeadlineProtocol", "timeout_settings"]

HEADER_TIMEOUT_SECONDS = 10.0
# Time for a whole request body after its headers: 32 MB (the cap) at about 4 Mbit/s.
BODY_TIMEOUT_SECONDS = 60.0
KEEP_ALIVE_SECONDS = 5
# Connections and requests served at once; beyond, uvicorn answers 503 at once.
LIMIT_CONCURRENCY = 1000
# Far more than the keep-alive connections a person's clients hold, far fewer than the limit.
MAX_WAITING_CONNECTIONS = 100

# Per server: its connections waiting for a request's headers, longest waiting first.
_WAITING: WeakKeyDictionary[ServerState, dict[DeadlineProtocol, None]] = WeakKeyDictionary()


class DeadlineProtocol(H11Protocol):
    header_timeout: float = HEADER_TIMEOUT_SECONDS
    body_timeout: float = BODY_TIMEOUT_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._body_deadline: asyncio.TimerHandle | None = None
        self._waiting = _WAITING.setdefault(self.server_state, {})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        self._cancel_body_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting_for_headers():
            return
        self._cancel_header_deadline()  # a request is being served
        if self._waiting_for_body():
            if self._body_deadline is None:
                self._body_deadline = self.loop.call_later(self.body_timeout, self._body_too_slow)
        else:
            self._cancel_body_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._cancel_body_deadline()
        if not self.transport.is_closing():
            self._arm_header_deadline()  # the next request's headers

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _waiting_for_body(self) -> bool:
        cycle = self.cycle
        return (cycle is not None and cycle.more_body and not cycle.disconnected
                and not self.transport.is_closing())

    def _arm_header_deadline(self) -> None:
        self._cancel_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_too_slow)
        self._waiting[self] = None
        while len(self._waiting) > MAX_WAITING_CONNECTIONS:
            longest = next(iter(self._waiting))
            longest._cancel_header_deadline()
            longest.transport.close()

    def _cancel_header_deadline(self) -> None:
        self._waiting.pop(self, None)
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _cancel_body_deadline(self) -> None:
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        self._waiting.pop(self, None)
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def _body_too_slow(self) -> None:
        self._body_deadline = None
        if not self._waiting_for_body():
            return
        if self.flow.read_paused:  # the app is not reading yet: the wait is ours
            self._body_deadline = self.loop.call_later(self.body_timeout, self._body_too_slow)
            return
        cycle = self.cycle
        if not cycle.response_started:
            self._send_408(cycle.scope["path"])
        # The app waiting for the rest of the body hears that the client went away.
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()

    def _send_408(self, path: str) -> None:
        message = (f"the request body did not arrive within {self.body_timeout:g} seconds "
                   "of its headers: send the whole body at once")
        body = json.dumps(error_body(path, 408, message, "request_timeout")).encode()
        try:
            for event in (h11.Response(status_code=408, reason=b"Request Timeout", headers=[
                              (b"content-type", b"application/json"),
                              (b"content-length", str(len(body)).encode()),
                              (b"connection", b"close")]),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # h11 will not answer now: closing says enough
            pass


def timeout_settings() -> dict[str, Any]:
    """The uvicorn.Config settings that bound what a slow or idle client can hold."""
    return {"http": DeadlineProtocol, "timeout_keep_alive": KEEP_ALIVE_SECONDS,
            "limit_concurrency": LIMIT_CONCURRENCY}
