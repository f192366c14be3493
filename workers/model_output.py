"""Asking the model for JSON and judging what comes back.

Local models wrap JSON in prose, cut it short, or fill fields with "none". Output is
parsed leniently (app.llm.parse_json_leniently), placeholder values are dropped, and
output with nothing usable raises InvalidOutput, which the task wrappers retry like a
model error and then degrade — never a silent loss.
"""

from __future__ import annotations

from typing import Any, Mapping

from app.llm import ModelClient, parse_json_leniently

# Values a model writes when it has nothing to say; never stored.
PLACEHOLDERS = frozenset({
    "", "none", "unknown", "n/a", "na", "null", "nil", "-", "—", "?", "not specified",
    "not mentioned", "not provided", "no", "desconocido", "ninguno", "ninguna", "nada",
})
EXCERPT_CHARS = 200


class InvalidOutput(ValueError):
    """The model answered, but with nothing usable; worth asking again."""

    retryable = True

    def __init__(self, job: str, detail: str, text: str) -> None:
        super().__init__(f"the model's {job} output is not usable ({detail}): "
                         f"{text[:EXCERPT_CHARS]!r}")
        self.text = text


def clean_text(value: Any, max_chars: int) -> str | None:
    """One line of text, or None for placeholders, non-text and over-long values."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    if text.casefold().strip(" .") in PLACEHOLDERS or len(text) > max_chars:
        return None
    return text


def ask_json(model: ModelClient, job: str, prompt: str, schema: Mapping[str, Any],
             system: str | None = None) -> tuple[dict | list, str]:
    """The parsed JSON value of the model's reply (and the raw text); InvalidOutput if none."""
    text = model.generate_json(prompt, schema, system=system, temperature=0.1)
    parsed = parse_json_leniently(text)
    if parsed is None:
        raise InvalidOutput(job, "no JSON object in the reply", text)
    return parsed, text
