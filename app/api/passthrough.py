"""Requests Hilo adds nothing to, relayed to the model server unchanged.

Everything of the model server's API but chat — generation, embeddings, model
management, the running models, the version, `/` — goes through as it came: the same
method, path, query and body bytes, and back the same status, content type and body,
streamed as it arrives (a pull's progress lines, a generation's tokens). Only the
client's credentials stay here: the model server gets `[llm] api_key` instead.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from app.api.turns import pull_in_threadpool

__all__ = ["relay_request"]


async def relay_request(request: Request, path: str | None = None) -> Response:
    """Relay this request to the model server (at `path`, by default the same one)."""
    service = request.app.state.service
    content = await request.body()
    relayed = await run_in_threadpool(
        service.model.relay, request.method, path or request.url.path, content=content or None,
        params=request.query_params.multi_items() or None,
        content_type=request.headers.get("content-type") if content else None)
    if request.method == "HEAD":
        relayed.close()
        return Response(status_code=relayed.status_code, media_type=relayed.media_type)
    return StreamingResponse(pull_in_threadpool(iter(relayed)), status_code=relayed.status_code,
                             media_type=relayed.media_type)
