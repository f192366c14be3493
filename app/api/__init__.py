"""The HTTP front-end, `hilo serve`: memory for any existing chat client.

Hilo is a transparent proxy in front of the model server. It speaks Ollama's API and
OpenAI's: their chat endpoints (`POST /api/chat`, `POST /v1/chat/completions`) get the
memory layers added and their conversation stored; every other endpoint of the model
server is relayed unchanged. Beside them: a JSON memory API under `/memory/...`, MCP at `/mcp`
(app/mcp/server.py, mounted by server.py) and
`GET /health`; the OpenAPI document is /openapi.json.

The rooms, each one concept:
- server.py: `create_app` (routes, error shapes, gate, the app's state) and `run_server`,
  which refuses to listen off loopback without `[server] token`. The chat client's routes
  answer from the start; the rest is built on its first request (on_demand.py).
- routing.py: the table the chat client's routes are declared in, served by Starlette.
- documented.py: Hilo's own API in FastAPI, with the OpenAPI document of every route.
- gate.py: what every request passes first: the Host and Origin checks (DNS rebinding,
  cross-site requests), the bearer token (shared, or a user's own), the body cap.
- access_log.py: uvicorn's access log with paths only, never query strings.
- errors.py: the one place HTTP errors are shaped, in the calling API's own shape.
- callers.py: who is asking, and the request's JSON body; deps.py hands them (and the
  service) to FastAPI's routes.
- conversation.py: what a chat request says and how it meets the store: what is new,
  which session.
- housekeeping.py: requests that are a client's own chores, relayed without memory.
- turns.py: a chat request answered: stored, relayed with memory, the reply streamed
  back and stored.
- passthrough.py: everything else, relayed unchanged.
- ollama.py, openai.py: the two APIs' routes.
- memory.py: the /memory routes; tasks.py: /memory/tasks; turn_records.py: /memory/turns;
  health.py: /health, /metrics; mcp_route.py: /mcp, its MCP server built when first asked
  for; docs.py: /docs and /redoc, their assets served from the package.
- timeouts.py: deadlines for a slow client's request headers and body.
"""

from app.api.server import BindRefused, check_bind, create_app, is_loopback, run_server

__all__ = ["BindRefused", "check_bind", "create_app", "is_loopback", "run_server"]
