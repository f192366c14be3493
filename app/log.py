"""Logging, configured in one place.

structlog renders readable console lines for a person and JSON lines for a machine; the
standard library's loggers (Huey's, uvicorn's) go through the same processors, so
every line of every process has one shape. Tracebacks never carry local variables:
they can hold the secrets we keep out of the database.

`[logging] format = "auto"` decides who reads: console lines when stderr is a terminal,
or when the process runs under honcho (`make run`) and honcho itself writes to a
terminal — honcho hands its processes a pipe and prints what they write, so a pipe
there still ends on a person's screen. Anywhere else (systemd, Docker, a file) JSON.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Mapping, TextIO

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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def honcho_writes_to_a_terminal(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs under honcho and honcho prints to a terminal.

    honcho names each process in HONCHO_PROCESS_NAME. Its output is found through the
    parent (the Procfile's `exec` makes honcho's runner the parent): /proc/<ppid>/fd/1
    on Linux; where /proc is missing, a TERM other than "dumb" stands in for it.
    """
    env = os.environ if env is None else env
    if not env.get("HONCHO_PROCESS_NAME"):
        return False
    try:
        target = os.readlink(f"/proc/{os.getppid()}/fd/1")
    except OSError:
        return env.get("TERM", "dumb") != "dumb"
    return target.startswith(("/dev/pts/", "/dev/tty", "/dev/console"))


def console_wanted(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """"auto": whether a person reads `stream` (see the module docstring)."""
    return _is_terminal(stream) or honcho_writes_to_a_terminal(env)


def _renderer(fmt: str, stream: TextIO) -> structlog.typing.Processor:
    if fmt == "auto":
        fmt = "console" if console_wanted(stream) else "json"
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback, colors=_is_terminal(stream)
        )
    return structlog.processors.JSONRenderer()


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging to one stream (stderr by default) through one
    set of processors. "auto" renders for a person at a terminal (also through honcho),
    JSON lines elsewhere."""
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
