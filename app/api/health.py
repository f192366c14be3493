"""/health, open without the token, and /metrics for the people who run Hilo.

/health says "ok" when the memory database answers and the model server has the chat,
distill and embedding models; "degraded" (still HTTP 200: memory and the queue work)
with the reasons when the model server is down or a model is missing; "error" (503)
when the memory database does not answer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app import __version__
from app.api.deps import Service
from app.datadir import DataDir
from app.db import MIGRATIONS_TABLE, corrupt_memory, file_damage, schema_version
from app.metrics import render
from app.probe import CachedProbe
from workers.metrics import render_queue

# Hilo's version, as /health and the OpenAPI document report it.
VERSION = __version__

router = APIRouter(tags=["Health"])

# A quick check reads every page (about 3 ms a megabyte): at most this often, per app.
QUICK_CHECK_EVERY_SECONDS = 30.0


def _memory_damage(state: Any, path: Path) -> str | None:
    """What file_damage last said about the memory database, asked again when stale."""
    checked_at, damage = getattr(state, "memory_checked", (None, None))
    if checked_at is None or time.monotonic() - checked_at >= QUICK_CHECK_EVERY_SECONDS:
        damage = file_damage(path, MIGRATIONS_TABLE)
        state.memory_checked = (time.monotonic(), damage)
    return damage


@router.get("/health", summary="Is Hilo up (open without the token)")
def get_health(request: Request, service: Service) -> Response:
    try:
        damage = _memory_damage(request.app.state, DataDir.of(service.config).memory_db)
        version = None if damage else schema_version(service.reader())
    except Exception as exc:  # noqa: BLE001 — health reports, it does not raise
        return JSONResponse({"status": "error", "error": f"memory database: {exc}"},
                            status_code=503)
    if damage is not None:
        return JSONResponse({"status": "error", "error": str(corrupt_memory(
            DataDir.of(service.config).memory_db, damage))}, status_code=503)
    models = _model_probe(request, service).report()
    body = {"status": "degraded" if models.degraded else "ok", "version": VERSION,
            "schema_version": version, "models": models.log_fields()}
    if models.degraded:
        body["reasons"] = models.reasons
    return JSONResponse(body)


def _model_probe(request: Request, service: Service) -> CachedProbe:
    """One cached probe per app, made on the first health check."""
    probe = getattr(request.app.state, "model_probe", None)
    if probe is None:
        probe = request.app.state.model_probe = CachedProbe(service.config)
    return probe


@router.get("/metrics", summary="Prometheus metrics: queue, jobs, writer, context and model "
                                "latency (needs the token when one is set)")
def get_metrics(service: Service) -> Response:
    return Response(render(service.writer) + render_queue(service.config),
                    media_type=CONTENT_TYPE_LATEST)
