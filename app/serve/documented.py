"""Hilo's documented API: the JSON memory API (/memory/...), scheduled tasks, the turn
records, the OpenAPI document (/openapi.json) and its pages (/docs, /redoc, offline),
and the memory page (/ui, app/ui, built on its own first request).

A FastAPI app, built on the first request that reaches it (app/serve/server.py), sharing
the serving app's state (config, service, …). Its document also describes the routes
the serving app answers itself (app/api/routing.py): the chat client's APIs, /health,
/metrics.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI
from starlette.datastructures import State

from app import ui
from app.api import health, memory, ollama, openai, tasks, turn_records
from app.api.docs import install_docs
from app.api.health import VERSION
from app.api.routing import Routes
from app.http.deps import caller
from app.http.errors import install_error_handlers, install_validation_errors

__all__ = ["documented_api", "describe"]


def documented_api(state: State) -> FastAPI:
    """The documented API on the serving app's `state`."""
    api = FastAPI(
        title="Hilo", version=VERSION, docs_url=None, redoc_url=None,
        description="Persistent, layered memory for chat agents on local models. Point an "
                    "Ollama or OpenAI client here instead of at the model server.")
    api.state = state
    install_error_handlers(api)
    install_validation_errors(api)
    install_docs(api)  # /docs and /redoc, offline
    describe(api, ollama.routes)
    describe(api, openai.routes)
    api.include_router(tasks.router)
    api.include_router(memory.router)
    describe(api, health.routes)
    api.include_router(turn_records.router)
    ui.install(api)
    return api


def describe(api: FastAPI, routes: Routes) -> None:
    """Put `routes` in the API document. The serving app answers them before a request
    reaches `api`; these copies are what /openapi.json and /docs show."""
    for entry in routes.entries:
        api.add_api_route(
            entry.path, entry.endpoint, methods=[entry.method], summary=entry.summary,
            tags=[routes.tag], responses=entry.responses, response_model=None,
            operation_id=entry.operation_id,
            dependencies=[Depends(caller)] if entry.names_the_caller else None)
