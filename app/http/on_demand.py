"""An ASGI app built on the first request that needs it.

`hilo serve` answers a chat client before it loads what a chat does not use: Hilo's
documented API (FastAPI, app/serve/documented.py) and the memory page (app/ui) are each
built once, on a thread (the event loop goes on serving chats meanwhile), when a
request first reaches them; every request after is handed straight to them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BuiltOnDemand"]


class BuiltOnDemand:
    """The ASGI app `build()` returns, built when first asked and then reused."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._app: ASGIApp | None = None

    def _built(self) -> ASGIApp:
        with self._lock:  # two first requests at once build it once
            if self._app is None:
                self._app = self._build()
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            app = await anyio.to_thread.run_sync(self._built)
        scope["path_params"] = {}  # the app's own routes match the whole path themselves
        await app(scope, receive, send)
