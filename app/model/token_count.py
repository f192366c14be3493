"""Token estimates, calibrated per model from what the model server reports.

Without a tokenizer we estimate from characters; every reply's `prompt_eval_count`
tells us how many tokens the prompt really was, and the ratio converges on the model's
own tokenizer. Estimates lean high on purpose: overshooting wastes a little context,
undershooting overflows it.
"""

from __future__ import annotations

import math
import threading

__all__ = ["DEFAULT_CHARS_PER_TOKEN", "MESSAGE_OVERHEAD_TOKENS", "estimate_tokens",
           "tokens_for_chars", "TokenCounter"]

# English prose is ~4 characters per token for Llama/Gemma tokenizers; code and
# Spanish run lower, so start conservatively.
DEFAULT_CHARS_PER_TOKEN = 3.5
# Per-message overhead of chat templates (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    return tokens_for_chars(len(text), chars_per_token)


def tokens_for_chars(chars: int, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """What a text of this many characters is reckoned to cost."""
    return math.ceil(chars / chars_per_token) if chars > 0 else 0


class TokenCounter:
    """Per-model estimates that learn from the server's prompt_eval_count."""

    # Weight of a new observation; high enough to converge in a handful of turns.
    LEARNING_RATE = 0.3
    # Never trust a ratio that would let the estimate undercount by much.
    MAX_CHARS_PER_TOKEN = 6.0
    MIN_CHARS_PER_TOKEN = 1.0

    def __init__(self) -> None:
        self._ratio: dict[str, float] = {}
        self._lock = threading.Lock()

    def chars_per_token(self, model: str) -> float:
        return self._ratio.get(model, DEFAULT_CHARS_PER_TOKEN)

    def count(self, model: str, text: str) -> int:
        return estimate_tokens(text, self.chars_per_token(model))

    def count_messages(self, model: str, messages: list[dict]) -> int:
        return sum(
            self.count(model, m.get("content") or "") + MESSAGE_OVERHEAD_TOKENS for m in messages
        )

    def observe(self, model: str, prompt_chars: int, prompt_eval_count: int | None) -> None:
        """Fold in one real measurement: the prompt had prompt_chars and this many tokens."""
        if not prompt_eval_count or prompt_chars <= 0:
            return
        measured = prompt_chars / prompt_eval_count
        measured = min(max(measured, self.MIN_CHARS_PER_TOKEN), self.MAX_CHARS_PER_TOKEN)
        with self._lock:
            current = self._ratio.get(model)
            self._ratio[model] = (
                measured if current is None
                else current + self.LEARNING_RATE * (measured - current)
            )
