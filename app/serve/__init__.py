"""`hilo serve`: one HTTP server for the front-ends, which know nothing of each other.

- server.py: `create_app` (the chat client's routes, error shapes, gate, the app's
  state) and `run_server`, which refuses to listen off loopback without `[server]
  token`. The chat client's routes answer from the start; the rest is built on its first
  request (app/http/on_demand.py).
- documented.py: Hilo's own API in FastAPI (app/api's routers), with the OpenAPI
  document of every route, and the memory page (app/ui) put on it.
- mcp_route.py: /mcp, its MCP server (app/mcp/server.py) built when first asked for.
"""

from app.serve.server import BindRefused, check_bind, create_app, is_loopback, run_server

__all__ = ["BindRefused", "check_bind", "create_app", "is_loopback", "run_server"]
