"""Logging, configured in one place.

structlog renders readable console lines for a person and JSON lines for a machine; the
standard library's loggers (Huey's, uvicorn's) go through the same processors, so
every line of every process has one shape. Tracebacks never carry local variables,
and every value of a line, a traceback's included, has its secrets redacted as the
database's text does: they are what we keep out of the database.

`[logging] format = "auto"` decides who reads: console lines when stderr is a terminal,
or when the process runs under honcho (`make run`) and honcho itself writes to a
terminal — honcho hands its processes a pipe and prints what they write, so a pipe
there still ends on a person's screen. Anywhere else (systemd, Docker, a file) JSON.

structlog is loaded here only, when a process first logs: importing it costs ~30 ms
(it imports asyncio), more than a `hilo` command that logs nothing takes to run. So
loggers come from `get_logger`, and `configure_logging` finishes its work when the
first line is logged, through either kind of logger; the line is the same either way.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from structlog.typing import Processor

__all__ = ["Logger", "get_logger", "honcho_writes_to_a_terminal", "console_wanted",
           "configure_logging"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}

_loading = threading.RLock()
# The handler configure_logging installed, while structlog is not configured for it yet.
_unconfigured: _RootHandler | None = None


def _structlog() -> ModuleType:
    """structlog, loaded (without rich) and configured as `configure_logging` asked."""
    global _unconfigured
    with _loading:
        if "structlog" not in sys.modules:
            # structlog loads rich, when installed, for pretty tracebacks and locals that
            # Hilo does not use (its tracebacks are plain and never show locals): ~45 ms,
            # and ~50 ms for rich's tracebacks and reprs where rich itself is loaded
            # already (the REPL). Hide them while structlog loads; what prints with rich
            # imports it itself.
            hidden = ["rich"] if "rich" not in sys.modules else [
                name for name in ("rich.traceback", "rich.pretty") if name not in sys.modules]
            sys.modules.update(dict.fromkeys(hidden))
            try:
                import structlog
            finally:
                for name in hidden:
                    del sys.modules[name]
        import structlog

        if _unconfigured is not None:
            _configure(structlog, _unconfigured)
            _unconfigured = None
        return structlog


class Logger:
    """structlog's logger for a name, made when it is first used (`get_logger`)."""

    __slots__ = ("_name", "_logger")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            self._logger = _structlog().get_logger(self._name)
        return getattr(self._logger, attr)


def get_logger(name: str | None = None) -> Logger:
    """A structlog logger (`log.info("event", key=value)`); structlog loads at its first
    line."""
    return Logger(name)


class _RootHandler(logging.StreamHandler):
    """The root logger's handler: its formatter, structlog's, is made at the first record."""

    def __init__(self, stream: TextIO, fmt: str) -> None:
        super().__init__(stream)
        self.fmt = fmt  # "console" or "json"

    def format(self, record: logging.LogRecord) -> str:
        if self.formatter is None:
            _structlog()  # configures structlog, and gives this handler its formatter
        return super().format(record)


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


def _renderer(structlog: ModuleType, fmt: str, stream: TextIO) -> Processor:
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback, colors=_is_terminal(stream)
        )
    return structlog.processors.JSONRenderer()


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging to one stream (stderr by default) through one
    set of processors. "auto" renders for a person at a terminal (also through honcho),
    JSON lines elsewhere. structlog is configured now if it is loaded, else when the
    process first logs."""
    global _unconfigured
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if console_wanted(stream) else "json"
    handler = _RootHandler(stream, fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # httpx logs every request at INFO; that is noise next to our own request logs.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with _loading:
        _unconfigured = handler
    if "structlog" in sys.modules:
        _structlog()


def _configure(structlog: ModuleType, handler: _RootHandler) -> None:
    """What `configure_logging` asked for `handler`, done with structlog loaded."""
    stream = handler.stream
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = _renderer(structlog, handler.fmt, stream)
    # Tracebacks become values before the secrets are taken out of every value.
    exceptions: list[Processor] = [structlog.processors.format_exc_info]
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
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *exceptions, _without_secrets, renderer],
    ))


def _without_secrets(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """The line's values with their secrets redacted, as the database stores text: an
    error can quote what a user or a model server sent (app/sanitize.py)."""
    # Lazy for start-up time: the rules compile when the first line is logged.
    from app.sanitize import redact_json

    return redact_json(event)
