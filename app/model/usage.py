"""What a model call cost the engine, as each server reports it, and the budget of a
learning call.

`EngineTime` is the engine's own counters for one call: Ollama's done frame
(`prompt_eval_count`, `prompt_eval_duration`, `eval_duration`, `total_duration`, in
nanoseconds), llama.cpp's `timings` (`prompt_n`, `prompt_ms`, `predicted_ms`), or, from a
server that reports neither, the wall time Hilo saw. `engine_time` is the one parser of
those counters: the engine time of chat turns and learning calls, and the prompt reading
speed of the first message (`EngineTime.prompt_read`, app/model/prompt_speed.py), read it.
`JsonCall` is one learning call as it ended — its job, tokens, engine
time, wall time and outcome — told to the client's `on_json_call` (the worker records
it: app/learn/engine_time.py).

`CallBudget` is a learning call's own limits, never a client's: at most `max_tokens`
generated (told to the engine as Ollama's `num_predict` or OpenAI's `max_tokens`, and
counted on the stream for a server that ignores it) and an answer within
`deadline_seconds` of the request, after which the streamed read stops and the
connection closes, so the server stops generating.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ANSWERED", "TOO_LONG", "PAST_DEADLINE", "GAVE_WAY", "FAILED", "OUTCOMES", "EngineTime",
           "engine_time", "wall_time", "CallBudget", "JsonCall"]

# How a learning call ended (JsonCall.outcome).
ANSWERED = "answered"  # the whole reply came (usable or not: the caller judges it)
TOO_LONG = "too_long"  # it reached its output limit
PAST_DEADLINE = "past_deadline"  # it reached its deadline
GAVE_WAY = "gave_way"  # it gave way to a person
FAILED = "failed"  # the server failed (unreachable, an HTTP error, a broken stream)
OUTCOMES = (ANSWERED, TOO_LONG, PAST_DEADLINE, GAVE_WAY, FAILED)


@dataclass(frozen=True)
class EngineTime:
    """One call's time in the engine, in milliseconds; `clock` "engine" when the server
    reported it, "wall" when Hilo measured it from outside (queueing and network in).
    `prompt_tokens` is the prompt the engine read anew (past its cache), when it says."""

    prompt_ms: float | None
    reply_ms: float | None
    total_ms: float
    clock: str = "engine"
    prompt_tokens: int | None = None

    @property
    def prompt_read(self) -> tuple[int, float] | None:
        """(tokens, milliseconds) of prompt read anew, for the reading speed
        (app/model/prompt_speed.py); None when either is unreported or nothing was read."""
        tokens, ms = self.prompt_tokens, self.prompt_ms
        if not isinstance(tokens, int) or tokens <= 0 or ms is None or ms <= 0:
            return None
        return tokens, ms


def engine_time(frame: Mapping[str, Any]) -> EngineTime | None:
    """The engine's own counters from a reply's last frame (or whole reply), in either API —
    the one place they are read, for engine time and for the prompt reading speed; None
    when the server reports none (the caller then uses the wall time)."""
    total, prompt, reply = (frame.get(key) for key in
                            ("total_duration", "prompt_eval_duration", "eval_duration"))
    if _number(total) or _number(prompt):  # Ollama, in nanoseconds
        prompt_ms = prompt / 1e6 if _number(prompt) else None
        reply_ms = reply / 1e6 if _number(reply) else None
        total_ms = total / 1e6 if _number(total) else (prompt_ms or 0.0) + (reply_ms or 0.0)
        return EngineTime(prompt_ms, reply_ms, total_ms,
                          prompt_tokens=_count(frame.get("prompt_eval_count")))
    timings = frame.get("timings")  # llama.cpp's server, in milliseconds
    if isinstance(timings, Mapping) and (_number(timings.get("prompt_ms"))
                                         or _number(timings.get("predicted_ms"))):
        prompt, reply = timings.get("prompt_ms"), timings.get("predicted_ms")
        prompt = float(prompt) if _number(prompt) else None
        reply = float(reply) if _number(reply) else None
        return EngineTime(prompt, reply, (prompt or 0.0) + (reply or 0.0),
                          prompt_tokens=_count(timings.get("prompt_n")))
    return None


def wall_time(seconds: float) -> EngineTime:
    return EngineTime(None, None, seconds * 1000, "wall")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CallBudget:
    """A learning call's own limits (module docstring)."""

    max_tokens: int | None
    deadline_seconds: float


@dataclass(frozen=True)
class JsonCall:
    """One learning call, as it ended."""

    job: str  # what asked: distill, learn (a chunk's facts and card), compact, diary, consolidate
    url: str
    model: str
    started_at: float  # Unix time
    wall_ms: float
    outcome: str  # one of OUTCOMES
    budget: CallBudget
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    reply_tokens: int | None = None
    engine: EngineTime | None = None
    detail: str = ""  # what went wrong, for an outcome other than answered

    @property
    def engine_ms(self) -> float:
        """The engine's time, or the wall time when the server reported none."""
        return self.engine.total_ms if self.engine is not None else self.wall_ms
