"""Sentences, and which of the searched words each one holds, read as the full-text index
reads them (FTS5's porter tokenizer: "adopted" holds "adopt"). A long message recalled
for a question is quoted by its sentences that hold the question's words
(app/turn/context.py), and a search says which words a hit matched (app/recall/fusion.py).
"""

from __future__ import annotations

import re

import apsw

from app.fts import terms
from app.recall.bm25 import TOKENIZER

__all__ = ["SENTENCE_END", "sentences", "WordsHeld"]

# A sentence ends at . ! ? or … followed by white space.
SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def sentences(text: str) -> list[str]:
    """The text's sentences, white space squashed: joined by one space they are the text."""
    return [s for s in SENTENCE_END.split(" ".join(text.split())) if s]


class WordsHeld:
    """Which of a question's words (its search terms) a text holds, by their indexed form."""

    def __init__(self, con: apsw.Connection, searched: str) -> None:
        tokenizer = con.fts5_tokenizer(*TOKENIZER)

        def tokens(text: str) -> list[str]:
            return tokenizer(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                             include_offsets=False, include_colocated=False)

        self._tokens = tokens
        # A word's tokens: one for most, several for "e-mail" (all must be held).
        self._words = [(word, frozenset(found)) for word in terms(searched)
                       if (found := tokens(word))]

    def __bool__(self) -> bool:
        return bool(self._words)

    def words_in(self, text: str) -> list[str]:
        """The searched words the text holds, in the question's order."""
        if not self._words:
            return []
        held = set(self._tokens(text))
        return [word for word, wanted in self._words if wanted <= held]
