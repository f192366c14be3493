"""/mcp on `hilo serve`, its MCP server built when first asked for.

Importing the MCP SDK is about a second of `hilo serve`'s start on two cores (a third of
it), and most clients never call /mcp. So the route answers as soon as the server
listens: the first request starts the build on a thread, and every request waits for it.
The MCP session manager must be entered and left by one task, so a task of the app's
lifespan holds it open (`serve`), not the request that asked first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.log import get_logger

if TYPE_CHECKING:
    from app.mcp.server import HttpEndpoint

__all__ = ["log", "McpOnDemand"]

log = get_logger(__name__)


class McpOnDemand:
    """The /mcp route (`route`) and the lifespan task that builds and runs its server."""

    def __init__(self, build: Callable[[], HttpEndpoint], path: str = "/mcp") -> None:
        self._build = build
        self._endpoint: HttpEndpoint | None = None
        self._failed: str | None = None
        self._wanted: anyio.Event | None = None  # made on the event loop, in serve()
        self._ready: anyio.Event | None = None
        self.route = Route(path, endpoint=self)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run for the app's life (`await task_group.start(serve)` in its lifespan): wait
        for the first request, build the server off the event loop, and hold its session
        manager open."""
        self._wanted, self._ready = anyio.Event(), anyio.Event()
        task_status.started()
        await self._wanted.wait()
        try:
            endpoint = await anyio.to_thread.run_sync(self._build)
        except Exception as exc:  # noqa: BLE001 — the rest of hilo serve goes on without /mcp
            log.error("mcp.not_started", error=str(exc))
            self._failed = str(exc)
            self._ready.set()
            return
        async with endpoint.running():
            self._endpoint = endpoint
            self._ready.set()
            await anyio.sleep_forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._wanted is not None and self._ready is not None, "serve() runs first"
        self._wanted.set()
        await self._ready.wait()
        if self._endpoint is None:
            response = JSONResponse({"error": f"/mcp could not start: {self._failed}"},
                                    status_code=503)
            await response(scope, receive, send)
            return
        await self._endpoint.route.handle(scope, receive, send)
