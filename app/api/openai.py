"""OpenAI's API: `POST /v1/chat/completions` with memory, the rest of /v1 relayed.

Chat goes through app/api/turns.py: the client's request relayed with the memory
layers added, every other field as sent (tools, tool_choice, response_format, n,
logprobs, stream_options, …), and the reply — a chat.completion, or with `stream: true`
server-sent chunks ending in `data: [DONE]` — exactly as the model server wrote it.
To Ollama the request goes to its own OpenAI-compatible /v1, which reads
response_format, image_url parts and tools itself. Models, embeddings and (legacy)
completions are relayed unchanged (app/api/passthrough.py).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.api.passthrough import relay_request
from app.api.routing import Routes
from app.api.turns import answer_chat_request

__all__ = ["routes", "openai_chat", "openai_relayed"]

routes = Routes("OpenAI API")


@routes.post("/v1/chat/completions", summary="Chat with memory (OpenAI's chat completions)",
             names_the_caller=True,
             responses={200: {"description": "a chat.completion, or SSE with stream=true"},
                        400: {"description": "invalid JSON"},
                        503: {"description": "the model server is down; new messages are kept"}})
async def openai_chat(request: Request) -> Response:
    """The request goes to the model as the client sent it, with the memory layers added
    to its system prompt; what is new in it is stored, and the reply, tool calls
    included, comes back as the model wrote it. The body's `user` names Hilo's user
    (X-Hilo-User wins)."""
    return await answer_chat_request("openai", request)


@routes.get("/v1/models", summary="The model server's models (relayed)")
@routes.get("/v1/models/{model:path}", summary="One model (relayed)")
@routes.post("/v1/embeddings", summary="Embeddings (relayed)")
@routes.post("/v1/completions", summary="Completions, no memory added (relayed)")
async def openai_relayed(request: Request) -> Response:
    return await relay_request(request)
