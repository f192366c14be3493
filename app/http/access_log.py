"""uvicorn's access log, without what people asked: a line per request with the path only.

The query string is dropped (`/memory/search?q=...` is what someone searched their
memory for) and the path is redacted like a stored message (a profile key or a session
id in it may hold a secret), so the access log never records more than the database.
"""

from __future__ import annotations

import logging
from urllib.parse import quote, unquote

from app.sanitize import redact_secrets

__all__ = ["ACCESS_LOGGER", "PathOnly", "log_paths_without_queries"]

ACCESS_LOGGER = "uvicorn.access"


class PathOnly(logging.Filter):
    """Rewrites uvicorn's access record: '%s - "%s %s HTTP/%s" %d' with the path alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, target, version, status = record.args
            path = str(target).partition("?")[0]
            path = quote(redact_secrets(unquote(path)).text, safe="/[]:")
            record.args = (client, method, path, version, status)
        return True


def log_paths_without_queries() -> None:
    """Install PathOnly on uvicorn's access logger (once per process)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, PathOnly) for f in logger.filters):
        logger.addFilter(PathOnly())
