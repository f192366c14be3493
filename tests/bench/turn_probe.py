"""`hilo serve` with a stopwatch on the steps of a chat turn: run as a script in place
of `hilo serve` (tests/bench/serve_turn.py --probe NAME does), it wraps the functions a
turn goes through and, at exit, writes each call (name, thread, start, end; the
monotonic clock, which the bench's client reads too) to $TURN_PROBE_OUT as JSON lines.

What it wraps is looked up by name; a name a checkout lacks is skipped, so one probe
measures the code before and after a change alike. Nothing here changes what a turn
does.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import json
import os
import sys
import threading
import time

EVENTS: list[tuple[str, str, float, float]] = []
_lock = threading.Lock()
clock = time.monotonic

# (module, attribute path, name shown). A function is patched where the caller looks it
# up: the module that imported it by name.
WRAPPED = [
    ("app.api.ollama", "answer_chat", "route.answer_chat"),  # before the Starlette routes
    ("app.api.turns", "answer_chat", "route.answer_chat"),
    ("app.api.turns", "read_conversation", "read_conversation"),
    ("app.api.turns", "continued_session", "continued_session"),
    ("app.api.turns", "unstored_messages", "unstored_messages"),
    ("app.api.turns", "store_messages", "store_messages"),
    ("app.api.turns", "is_housekeeping", "is_housekeeping"),
    ("app.api.turns", "relayed_response", "relayed_response"),
    ("app.http.deps", "identify", "identify"),  # before app/http/callers.py
    ("app.http.callers", "identify", "identify"),
    ("app.turn.chat", "ChatService.answer", "service.answer"),
    ("app.turn.chat", "ChatService.build_context", "service.build_context"),
    ("app.turn.chat", "ChatService._query", "service.query"),
    ("app.turn.chat", "ChatService.append_all", "service.append_all"),
    ("app.turn.chat", "build_context", "context.build"),
    ("app.turn.chat", "record_turn", "record_turn"),
    ("app.turn.chat", "Turn._finish", "turn.finish"),
    ("app.turn.chat", "Turn.__init__", "turn.init"),
    ("app.turn.chat", "TurnOutcome.__init__", "turn.outcome"),
    ("app.turn.chat", "BuiltContext.reading", "context.reading"),
    ("app.turn.chat", "read_bootstrap", "read_bootstrap"),
    ("app.turn.chat", "WorkingMemory.window", "working.window"),
    ("app.recall.query", "focus_question", "query.focus"),
    ("app.recall.query", "_embedded", "query.embed"),
    ("app.recall.query", "Query.vector_now", "query.vector_now"),
    ("app.turn.context", "search", "fusion.search"),
    ("app.turn.context", "matching", "fusion.matching"),
    ("app.turn.context", "_relevant", "context.relevant"),
    ("app.turn.context", "_quotable_events", "context.quotable"),
    ("app.turn.context", "saying_more", "context.saying_more"),
    ("app.turn.context", "memory_generation", "context.generation"),
    ("app.recall.fusion", "search_ahead", "fusion.search_ahead"),
    ("app.model.client", "ModelClient.relay_chat", "model.relay_chat"),
    ("app.model.stream", "ChatStream.__init__", "model.stream_open"),
    ("app.model.transport", "Transport.start_work", "activity.start_work"),
    ("app.model.relay", "relayed_chat", None),  # a generator: not timed
    ("workers.chat_activity", "ChatActivity.begin", "activity.begin"),
    ("workers.chat_activity", "ChatActivity.end", "activity.end"),
    ("workers.chat_activity", "ChatActivity.served", "activity.served"),
    ("workers.handoff", "QueueHandoff.after_reply", "handoff.after_reply"),
]


def _timed(name: str, fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            end = clock()
            with _lock:
                EVENTS.append((name, threading.current_thread().name, start, end))
    return timed


def mark(name: str, start: float, end: float | None = None) -> None:
    with _lock:
        EVENTS.append((name, threading.current_thread().name, start, end or start))


def _patch() -> None:
    for module_name, path, name in WRAPPED:
        if name is None:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner, _, attr = path.rpartition(".")
        target = getattr(module, owner) if owner else module
        fn = inspect.getattr_static(target, attr, None) if owner else getattr(module, attr, None)
        if fn is None or not callable(fn):
            continue
        setattr(target, attr, _timed(name, fn))
    _patch_gate()
    _patch_logs()


class _TimedLog:
    """A module's logger, its lines timed ("log.<module>")."""

    def __init__(self, name: str, log) -> None:
        self._name, self._log = name, log

    def __getattr__(self, level: str):
        return _timed(self._name, getattr(self._log, level))


def _patch_logs() -> None:
    for module_name in ("app.api.turns", "app.turn.chat", "app.turn.context"):
        module = importlib.import_module(module_name)
        if hasattr(module, "log"):
            module.log = _TimedLog("log." + module_name.rpartition(".")[2], module.log)


def _patch_gate() -> None:
    """The request as the ASGI app sees it: its arrival, and its reply's first bytes."""
    from app.http import gate

    call = gate.Gate.__call__

    async def timed_call(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") not in ("/api/chat",
                                                                     "/v1/chat/completions"):
            return await call(self, scope, receive, send)
        start = clock()
        state = {"body": False}

        async def timed_receive():
            message = await receive()
            if message.get("type") == "http.request" and not message.get("more_body"):
                mark("asgi.body_received", clock())
            return message

        async def timed_send(message):
            kind = message.get("type")
            if kind == "http.response.start":
                mark("asgi.response_start", clock())
            elif kind == "http.response.body" and message.get("body") and not state["body"]:
                state["body"] = True
                mark("asgi.first_body", clock())
            await send(message)
        try:
            await call(self, scope, timed_receive, timed_send)
        finally:
            mark("asgi.request", start, clock())

    gate.Gate.__call__ = timed_call


def _write() -> None:
    out = os.environ.get("TURN_PROBE_OUT")
    if not out:
        return
    with _lock, open(out, "w", encoding="utf-8") as f:
        for name, thread, start, end in EVENTS:
            f.write(json.dumps({"name": name, "thread": thread, "start": start,
                                "end": end}) + "\n")


def main() -> int:
    # Run as a script, its own folder comes first on the path: its workers.py would
    # hide the package of that name.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    _patch()
    atexit.register(_write)
    from app.cli import run_and_exit

    sys.argv[0] = "hilo"
    try:
        return run_and_exit()
    finally:
        _write()


if __name__ == "__main__":
    sys.exit(main())
