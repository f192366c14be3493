"""/health, open without the token, and /metrics for the people who run Hilo."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app import __version__
from app.api.deps import Service
from app.db import schema_version
from app.metrics import render
from workers.metrics import render_queue

# Hilo's version, as /health and the OpenAPI document report it.
VERSION = __version__

router = APIRouter(tags=["Health"])


@router.get("/health", summary="Is Hilo up (open without the token)")
def get_health(service: Service) -> Response:
    try:
        version = schema_version(service.reader())
    except Exception as exc:  # noqa: BLE001 — health reports, it does not raise
        return JSONResponse({"status": "error", "error": f"memory database: {exc}"},
                            status_code=503)
    return JSONResponse({"status": "ok", "version": VERSION, "schema_version": version})


@router.get("/metrics", summary="Prometheus metrics: queue, jobs, writer, context and model "
                                "latency (needs the token when one is set)")
def get_metrics(service: Service) -> Response:
    return Response(render(service.writer) + render_queue(service.config),
                    media_type=CONTENT_TYPE_LATEST)
