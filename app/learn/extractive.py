"""Summaries made without the model: the fallback for cards and diary entries.

They quote the conversation rather than paraphrase it, so they are never wrong, only
long-winded; rows written from them are flagged is_extractive and re-summarised by
consolidate once the model answers again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from app.fts import terms

__all__ = ["SUMMARY_CHARS", "KEYWORDS", "first_sentence", "keywords", "quote_lines"]

SUMMARY_CHARS = 400
KEYWORDS = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def first_sentence(text: str, max_chars: int = 160) -> str:
    text = " ".join(text.split())
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""
    if len(sentence) > max_chars:
        sentence = sentence[: max_chars - 1].rstrip() + "…"
    return sentence


def keywords(texts: Iterable[str], limit: int = KEYWORDS) -> list[str]:
    """The most frequent search terms of the texts (4+ letters, no stop-words)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(terms(text, min_length=4))
    return [word for word, _ in counts.most_common(limit)]


def quote_lines(lines: Sequence[tuple[str, str]], max_chars: int = SUMMARY_CHARS) -> str:
    """ "role: first sentence" for each (role, text), joined, cut to max_chars."""
    parts = []
    used = 0
    for role, text in lines:
        sentence = first_sentence(text)
        if not sentence:
            continue
        part = f"{role}: {sentence}"
        if used + len(part) > max_chars and parts:
            break
        parts.append(part)
        used += len(part) + 3
    summary = " · ".join(parts)
    return summary if len(summary) <= max_chars else summary[: max_chars - 1] + "…"
