"""What every HTTP front-end shares (the API's routes, the memory page, MCP over HTTP):
below them, so that none imports another.

- gate.py: what every request passes first: the Host and Origin checks (DNS rebinding,
  cross-site requests), the bearer token (shared, or a user's own), the body cap.
- errors.py: the one place HTTP errors are shaped, in the calling API's own shape.
- callers.py: who is asking, and the request's JSON body; deps.py hands them (and the
  service) to FastAPI's routes.
- params.py: path parameters more than one front-end takes (row ids, bounded).
- on_demand.py: an app built on its first request (the documented API, the page, MCP).
- access_log.py: uvicorn's access log with paths only, never query strings.
- timeouts.py: deadlines for a slow client's request headers and body.
"""
