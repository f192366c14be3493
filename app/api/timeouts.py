"""Slow clients are timed out: uvicorn's h11 protocol with a deadline for a request's headers.

uvicorn times out only idle keep-alive connections, and cancels that timer on the first
byte: a client that opens a connection and sends headers a byte at a time (or never
finishes them) holds the connection for ever. `HeaderTimeoutProtocol` closes a
connection whose request headers have not all arrived HEADER_TIMEOUT_SECONDS after it
opened, or after its previous response ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
# Connections and requests served at once; beyond, uvicorn answers 503 at once.
LIMIT_CONCURRENCY = 1000


class HeaderTimeoutProtocol(H11Protocol):
    header_timeout: float = HEADER_TIMEOUT_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting_for_headers():
            return
        self._cancel_header_deadline()  # a request is being served

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_deadline()  # the next request's headers

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_deadline(self) -> None:
        self._cancel_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def timeout_settings() -> dict[str, Any]:
    """The uvicorn.Config settings that bound what a slow or idle client can hold."""
    return {"http": HeaderTimeoutProtocol, "timeout_keep_alive": KEEP_ALIVE_SECONDS,
            "limit_concurrency": LIMIT_CONCURRENCY}
