"""Ollama's API: `POST /api/chat` with memory, and the rest of Ollama's API relayed.

Chat goes through app/api/turns.py: the client's request relayed with the memory
layers added, its reply streamed back as Ollama's NDJSON (or one object with
`stream: false`) exactly as the model server wrote it. Everything else — `/`,
generate, embed, embeddings, ps, pull, push, create, copy, delete, blobs, tags, show,
version — is relayed unchanged (app/api/passthrough.py). `/api/generate` gets no memory:
it is the raw completion endpoint (fill-in-the-middle, `raw` prompts, a `context` that
is the model's own token state), where added text would break what the client built.

With an OpenAI-compatible model server ([llm] provider "openai"), chat is translated
both ways (app/model/translate.py); tags, show, version and `/` answer from what that
server offers, and the model-management endpoints, which it lacks, answer 501.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from app.api.health import VERSION
from app.api.passthrough import relay_request
from app.api.routing import Routes
from app.api.turns import answer_chat_request
from app.http.callers import json_body
from app.http.errors import ApiError

__all__ = ["routes", "ollama_chat", "root", "ollama_tags", "ollama_show", "ollama_version",
           "ollama_ps", "RELAYED"]

routes = Routes("Ollama API")


@routes.post("/api/chat", summary="Chat with memory (Ollama's /api/chat)", names_the_caller=True,
             responses={200: {"description": "NDJSON stream, or one JSON object with stream=false"},
                        400: {"description": "invalid JSON"},
                        503: {"description": "the model server is down; new messages are kept"}})
async def ollama_chat(request: Request) -> Response:
    """The request goes to the model as the client sent it — tools, format, images,
    options, keep_alive, think — with the memory layers added to its system prompt;
    what is new in it is stored, and the reply, tool calls included, comes back as the
    model wrote it. `messages: []` (load or unload a model) is relayed and stores nothing."""
    return await answer_chat_request("ollama", request)


def _speaks_ollama(request: Request) -> bool:
    return request.app.state.service.model.provider == "ollama"


@routes.get("/", summary="Whether the server runs (Ollama's \"Ollama is running\")")
@routes.head("/", summary="Whether the server runs, headers only")
async def root(request: Request) -> Response:
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/ui", status_code=303)  # a browser: the memory page
    if _speaks_ollama(request):
        return await relay_request(request)
    return PlainTextResponse("Ollama is running")


@routes.get("/api/tags", summary="The model server's models (relayed)")
async def ollama_tags(request: Request) -> Response:
    if _speaks_ollama(request):
        return await relay_request(request)
    names = request.app.state.service.model.list_models()
    return JSONResponse({"models": [
        {"name": name, "model": name, "modified_at": "1970-01-01T00:00:00Z", "size": 0,
         "digest": "", "details": {}} for name in names]})


@routes.post("/api/show", summary="A model's details (relayed)")
async def ollama_show(request: Request) -> Response:
    body = await json_body(request)
    if _speaks_ollama(request):
        return await relay_request(request)
    name = str(body.get("model") or body.get("name") or "")
    if name not in request.app.state.service.model.list_models():
        return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
    return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": {},
                         "model_info": {}, "capabilities": ["completion"]})


@routes.get("/api/version", summary="The model server's version (relayed)")
async def ollama_version(request: Request) -> Response:
    if _speaks_ollama(request):
        return await relay_request(request)
    return JSONResponse({"version": VERSION})


@routes.get("/api/ps", summary="The models loaded in memory (relayed)")
async def ollama_ps(request: Request) -> Response:
    if _speaks_ollama(request):
        return await relay_request(request)
    return JSONResponse({"models": []})


async def _ollama_only(request: Request) -> Response:
    if _speaks_ollama(request):
        return await relay_request(request)
    raise ApiError(501, f"{request.method} {request.url.path} is Ollama's own; the model "
                   f"server at {request.app.state.service.model.url} speaks the OpenAI API, "
                   "which has no such endpoint", "not_implemented")


# Ollama's endpoints Hilo adds nothing to: (method, path, summary).
RELAYED: list[tuple[str, str, str]] = [
    ("POST", "/api/generate", "Generate a completion, no memory added (relayed)"),
    ("POST", "/api/embed", "Embeddings (relayed)"),
    ("POST", "/api/embeddings", "Embeddings, the older endpoint (relayed)"),
    ("POST", "/api/pull", "Pull a model (relayed, progress streamed)"),
    ("POST", "/api/push", "Push a model (relayed, progress streamed)"),
    ("POST", "/api/create", "Create a model (relayed, progress streamed)"),
    ("POST", "/api/copy", "Copy a model (relayed)"),
    ("DELETE", "/api/delete", "Delete a model (relayed)"),
    ("HEAD", "/api/blobs/{digest}", "Whether a blob exists (relayed)"),
    ("POST", "/api/blobs/{digest}", "Upload a blob (relayed)"),
]
for method, path, summary in RELAYED:
    routes.add(method, path, _ollama_only, summary, operation_id=f"ollama_{method.lower()}_{path}")
