"""The HTTP front-end, `hilo serve`: memory for any existing chat client.

Hilo speaks Ollama's API (`POST /api/chat`, with `GET /api/tags`, `POST /api/show` and
`GET /api/version` passed through to the model server) and OpenAI's
(`POST /v1/chat/completions`, `GET /v1/models`), so a client pointed at Hilo instead of
the model server gets memory without changing anything else. Beside them: a JSON
memory API under `/memory/...`, MCP at `/mcp` (app/mcp.py, mounted by server.py) and
`GET /health`; the OpenAPI document is /openapi.json.

The rooms, each one concept:
- server.py: `create_app` (routes, error shapes, gate, the app's state) and `run_server`,
  which refuses to listen off loopback without `[server] token`.
- gate.py: what every request passes first: the Host and Origin checks (DNS rebinding,
  cross-site requests), the bearer token (shared, or a user's own), the body cap.
- access_log.py: uvicorn's access log with paths only, never query strings.
- errors.py: the one place HTTP errors are shaped, in the calling API's own shape.
- deps.py: what a route is handed: who is asking (user, session header), the service.
- turns.py: the chat turn both chat APIs share: which session, whether the message is a
  resend, storing it under the session's lock, and streaming the reply.
- ollama.py, openai.py: the two chat APIs and their wire formats (NDJSON, SSE).
- memory.py: the /memory routes; scheduled.py: /memory/tasks; health.py: /health, /metrics.
"""

from app.api.server import BindRefused, check_bind, create_app, is_loopback, run_server

__all__ = ["BindRefused", "check_bind", "create_app", "is_loopback", "run_server"]
