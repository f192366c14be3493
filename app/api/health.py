"""/health, open without the token, and /metrics for the people who run Hilo.

/health says "ok" when the memory database answers and takes writes and the model
server has the chat, distill and embedding models; "degraded" (still HTTP 200: memory
and the queue work) with the reasons when the model server is down or a model is
missing; "error" (503: a load balancer sends nothing more here) with what is wrong when
the memory database does not answer, or cannot store anything (a full disk, a database
that cannot be written): every chat would fail.
"""

from __future__ import annotations

import apsw
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import __version__
from app.api.routing import Routes
from app.datadir import DataDir
from app.db import corrupt_memory, memory_damage, schema_version
from app.errors import HiloError, InsufficientStorage
from app.model.probe import CachedProbe
from app.turn.chat import ChatService
from app.turn.metrics import render

__all__ = ["VERSION", "routes", "QUICK_CHECK_EVERY_SECONDS", "PROBE_BYTES",
           "PROBE_TIMEOUT_SECONDS", "get_health", "get_metrics"]

# Hilo's version, as /health and the OpenAPI document report it.
VERSION = __version__

routes = Routes("Health")

# A quick check reads every page (about 3 ms a megabyte): at most this often, longer for a
# large memory (app.db.memory_damage).
QUICK_CHECK_EVERY_SECONDS = 30.0
# The write health tries, undone, needs this much new room: a few messages' worth.
PROBE_BYTES = 64 * 1024
# A writer that takes longer than this to try it cannot serve a chat either.
PROBE_TIMEOUT_SECONDS = 10.0


@routes.get("/health", summary="Is Hilo up (open without the token)")
def get_health(request: Request) -> Response:
    service = request.app.state.service
    try:
        damage = memory_damage(DataDir.of(service.config).memory_db, QUICK_CHECK_EVERY_SECONDS)
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
    cannot_store = _why_nothing_can_be_stored(service)
    if cannot_store is not None:
        return JSONResponse({**body, "status": "error", "error": cannot_store}, status_code=503)
    return JSONResponse(body)


def _why_nothing_can_be_stored(service: ChatService) -> str | None:
    """Whether the memory database takes a write, asked as a chat would: through the
    server's own writer, with a write that needs new room and is then undone."""
    path = service.writer.path
    try:
        service.writer.submit(_take_room_and_give_it_back, timeout=PROBE_TIMEOUT_SECONDS)
    except InsufficientStorage:
        return (f"the disk holding {path} is full: nothing can be stored (every chat gets "
                "507); free space on that disk")
    except TimeoutError:
        return (f"{path} took no write within {PROBE_TIMEOUT_SECONDS:g} seconds: is another "
                "process holding it?")
    except (HiloError, apsw.Error) as exc:
        return f"{path} cannot be written: {exc}"
    return None


def _take_room_and_give_it_back(con: apsw.Connection) -> None:
    con.execute("SAVEPOINT health_probe")
    try:
        # One statement: an INSERT that finds the disk full takes the writer's whole
        # transaction with it; this keeps it, failing alone.
        con.execute("CREATE TABLE health_probe AS SELECT zeroblob(?) AS room", (PROBE_BYTES,))
    finally:
        con.execute("ROLLBACK TO health_probe; RELEASE health_probe")


def _model_probe(request: Request, service: ChatService) -> CachedProbe:
    """One cached probe per app: `hilo serve`'s from its start (app/serve/server.py), else
    made on the first health check."""
    probe = getattr(request.app.state, "model_probe", None)
    if probe is None:
        probe = request.app.state.model_probe = CachedProbe(service.config)
    return probe


@routes.get("/metrics", summary="Prometheus metrics: queue, jobs, writer, context and model "
                                "latency (needs the token when one is set)")
def get_metrics(request: Request) -> Response:
    # start-up: the queue's part reads Huey's storage, which a chat does not need
    from workers.queue_metrics import render_queue

    service = request.app.state.service
    return Response(render(service.writer) + render_queue(service.config),
                    media_type=CONTENT_TYPE_LATEST)
