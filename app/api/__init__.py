"""The HTTP API's routes: memory for any existing chat client, and Hilo's own JSON.

Hilo is a transparent proxy in front of the model server. It speaks Ollama's API and
OpenAI's: their chat endpoints (`POST /api/chat`, `POST /v1/chat/completions`) get the
memory layers added and their conversation stored; every other endpoint of the model
server is relayed unchanged. Beside them: a JSON memory API under `/memory/...` and
`GET /health`. The server that serves them with the memory page and MCP is app/serve/;
what every route shares (the gate, errors, who is asking) is app/http/.

The rooms, each one concept:
- routing.py: the table the chat client's routes are declared in, served by Starlette.
- conversation.py: what a chat request says and how it meets the store: what is new,
  which session.
- housekeeping.py: requests that are a client's own chores, relayed without memory.
- turns.py: a chat request answered: stored, relayed with memory, the reply streamed
  back and stored.
- passthrough.py: everything else, relayed unchanged.
- ollama.py, openai.py: the two APIs' routes.
- memory.py: the /memory routes; tasks.py: /memory/tasks; turn_records.py: /memory/turns
  (app/ops/turn_view.py's data as JSON); health.py: /health, /metrics; docs.py: /docs
  and /redoc, their assets served from the package.
"""
