"""The app and the process that serves it: `create_app` puts the routes, the error
shapes and the gate together; `run_server` is `hilo serve`.

The app is Starlette's, with the routes a chat client calls (app/api/routing.py): they
answer from the first moment. Everything else — Hilo's documented JSON API, /docs,
/openapi.json and the memory page (FastAPI: app/serve/documented.py, app/ui) and MCP — is
built on its first request, so the first message after a start waits for none of them.

Without `[server] token`, `run_server` refuses to listen anywhere but loopback: anyone
who could reach it could read the memory.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool

from app.api import health, ollama, openai
from app.api.turns import SessionLocks
from app.config import Config
from app.datadir import DataDir
from app.errors import Misconfigured
from app.http.access_log import log_paths_without_queries
from app.http.callers import identify
from app.http.errors import install_error_handlers
from app.http.gate import TOKEN_USER, Gate, is_loopback
from app.http.on_demand import BuiltOnDemand
from app.http.timeouts import timeout_settings
from app.log import get_logger
from app.model.probe import CachedProbe, announce_models
from app.serve.mcp_route import McpOnDemand
from app.turn.chat import ChatService

if TYPE_CHECKING:
    from app.turn.agent import Agent
from workers.huey_loader import load_huey

__all__ = ["log", "MAX_BODY_BYTES", "create_app", "BindRefused", "http_agent", "check_bind",
           "run_server", "is_loopback"]

log = get_logger(__name__)

# Whole conversations are resent every turn: 100 turns of 32k characters fit.
MAX_BODY_BYTES = 32 * 1024 * 1024


def create_app(config: Config, service: ChatService | None = None) -> Starlette:
    """The ASGI app. Without a service, it makes one (and closes it on shutdown)."""
    owned = service is None
    if service is None:
        # start-up: Huey loads here, once the queue's backend is known, so that a SQLite
        # queue never loads the Redis client (workers/huey_loader.py)
        load_huey(config.queue.backend)
        from workers.handoff import queue_handoff

        DataDir.of(config).init()
        service = ChatService(config, handoff=queue_handoff(config))

    def build_mcp():
        # start-up: the MCP SDK takes a second to import; /mcp builds on its first request
        from app.mcp.server import http_endpoint

        return http_endpoint(service, lambda request: identify(
            config, request.scope.get(TOKEN_USER), request.headers).user_id)

    mcp = McpOnDemand(build_mcp)

    def build_documented_api():
        # start-up: FastAPI and pydantic load with the documented API, on its first request
        from app.serve.documented import documented_api

        return documented_api(app.state)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.warm_vectors()
        async with anyio.create_task_group() as tasks:
            await tasks.start(mcp.serve)
            yield
            tasks.cancel_scope.cancel()
        if owned:
            await run_in_threadpool(app.state.service.close)

    app = Starlette(lifespan=lifespan, routes=[
        *ollama.routes.served(), *openai.routes.served(), *health.routes.served(),
        mcp.route])  # MCP over streamable HTTP at /mcp (app/mcp/server.py)
    app.router.default = BuiltOnDemand(build_documented_api)  # every other path
    app.state.config = config
    app.state.service = service
    app.state.agent = http_agent(service)
    app.state.session_locks = SessionLocks()
    install_error_handlers(app)
    app.add_middleware(Gate, config=config, max_body=MAX_BODY_BYTES)
    log_paths_without_queries()
    return app


class BindRefused(Misconfigured):
    """Listening here would expose the memory without a token."""


def http_agent(service: ChatService) -> Agent | None:
    """Hilo's own agent for `hilo serve`'s chats, when [tools] http offers its tools; none
    otherwise (the default), so the tools never load at start."""
    if not service.config.tools.http:
        return None
    # start-up: the tools (terminal, web fetch, macros, tasks) load only when offered
    from app.turn.agent import Agent

    return Agent(service, surface="http")


def check_bind(host: str, token: str) -> None:
    if not token and not is_loopback(host):
        raise BindRefused(
            f"refusing to listen on {host} without a token: anyone who can reach it could "
            "read this memory. Set [server] token (HILO_SERVER_TOKEN), or listen on 127.0.0.1")


def run_server(config: Config, host: str | None = None, port: int | None = None) -> int:
    """`hilo serve`: serve until interrupted. Returns the exit status."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    try:
        check_bind(host, config.server.token)
    except BindRefused as exc:
        print(f"hilo serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(config)
    # No WebSockets: no route takes one, and uvicorn would load a WebSocket library for them.
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_config=None, timeout_graceful_shutdown=3, ws="none",
        **timeout_settings()))
    log.info("serve.starting", url=f"http://{host}:{port}", ollama_api=f"http://{host}:{port}/api",
             openai_api=f"http://{host}:{port}/v1", memory_page=f"http://{host}:{port}/ui",
             auth=bool(config.server.token))
    # The first /health reports this probe instead of asking the model server again.
    app.state.model_probe = CachedProbe(config, made=announce_models(config))
    # Said plainly, beside the log: the address a person opens (`make run` shows it).
    print(f"hilo serve: the memory page is at http://{host}:{port}/ui", file=sys.stderr,
          flush=True)
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully; a
        # quiet handler underneath makes that a clean exit (status 0 under honcho).
        signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with DataDir.of(config).hold_pid_file("serve"):  # restore refuses while we run
            server.run()
    except SystemExit:
        pass
    if not server.started:
        print(f"hilo serve: could not listen on {host}:{port} (is the port in use? "
              "choose another with --port)", file=sys.stderr)
        return 1
    return 0
