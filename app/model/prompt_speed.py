"""How fast the model server reads a prompt, from its own counters on every reply.

Ollama reports `prompt_eval_count` and `prompt_eval_duration`, llama.cpp's server
`timings.prompt_n` and `timings.prompt_ms`: the tokens it read anew (past its prompt
cache) and the time it took, read with the engine's other counters in one place
(app/model/usage.py: `EngineTime.prompt_read`). The first message of a conversation gets
as much memory as the engine reads in `[memory] first_message_extra_seconds`
(app/turn/context.py), so a GPU gets the filled budget and a CPU about the default.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["MIN_READ_TOKENS", "RECENT_READS", "PromptSpeed"]

# Short reads are mostly the engine's fixed cost per request, not its reading speed.
MIN_READ_TOKENS = 32
# The speed is that of the last this many reads, summed (tokens over time).
RECENT_READS = 8


class PromptSpeed:
    """Per model: the prompt tokens a second its server reads, from recent replies."""

    def __init__(self) -> None:
        self._reads: dict[str, deque[tuple[int, float]]] = {}
        self._lock = threading.Lock()

    def observe(self, model: str, read: tuple[int, float] | None) -> None:
        """Fold in one reply's read (EngineTime.prompt_read); short or missing reads are ignored."""
        if read is None or read[0] < MIN_READ_TOKENS:
            return
        with self._lock:
            self._reads.setdefault(model, deque(maxlen=RECENT_READS)).append(read)

    def tokens_per_second(self, model: str) -> float | None:
        """The model's reading speed, or None before any read worth counting."""
        with self._lock:
            reads = list(self._reads.get(model, ()))
        if not reads:
            return None
        return 1000.0 * sum(t for t, _ in reads) / sum(ms for _, ms in reads)
