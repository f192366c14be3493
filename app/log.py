"""Logging, configured in one place.

structlog renders readable console lines on a terminal and JSON lines elsewhere; the
standard library's loggers (Huey's, uvicorn's) go through the same processors, so
every line of every process has one shape. Tracebacks never carry local variables:
they can hold the secrets we keep out of the database.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

if "structlog" not in sys.modules and "rich" not in sys.modules:
    # structlog loads rich, when installed, for pretty tracebacks that Hilo does not use
    # (its tracebacks are plain and never show locals): ~45 ms of every process's
    # start-up. Hide rich while structlog loads; what prints with rich imports it itself.
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog
    finally:
        del sys.modules["rich"]
import structlog  # noqa: E402

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _renderer(fmt: str, stream: TextIO) -> structlog.typing.Processor:
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback, colors=stream.isatty()
        )
    return structlog.processors.JSONRenderer()


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging to one stream (stderr by default) through one
    set of processors. "auto" renders for a person on a terminal, JSON lines elsewhere."""
    stream = stream or sys.stderr
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = _renderer(fmt, stream)
    exceptions: list[structlog.typing.Processor] = []
    if isinstance(renderer, structlog.processors.JSONRenderer):
        exceptions = [structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )]
    structlog.configure(
        processors=shared + [structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *exceptions, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # httpx logs every request at INFO; that is noise next to our own request logs.
    logging.getLogger("httpx").setLevel(logging.WARNING)
