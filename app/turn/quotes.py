"""Past messages as a turn's prompt quotes them: whole, or, when that does not fit, by
the sentences that hold the question's words (app/turn/context.py chooses which)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from app.recall.sentences import WordsHeld, sentences

TRUNCATION_MARKER = " […]"
# A message quoted from the past is cut to this many characters: one pasted log must not
# take the room of a dozen messages (LoCoMo's turns: 99 % under 340 characters).
EVENT_LINE_CHARS = 500
# A message quoted in part keeps this many sentences after each that holds the
# question's words: "I adopted a dog last week. His name is Buddy."
QUOTE_AFTER = 1
# A message shorter than this is quoted whole or not at all.
PART_FROM_CHARS = 0


@dataclass(frozen=True)
class PastEvent:
    id: int
    session_id: str
    created_at: str
    role: str
    content: str
    compacted: bool
    from_outside: bool = False

    def quote(self, held: WordsHeld) -> Quote:
        """The message as the prompt may quote it: whole, and, when some of its sentences
        hold the question's words and others do not, in part: those sentences (and
        QUOTE_AFTER after each) with "…" where the rest was. The part goes in when the
        whole would be cut (over EVENT_LINE_CHARS) or does not fit the room left: a long
        message then costs what its answer costs instead of being skipped. A message
        none of whose sentences holds a word (found by meaning, or beside a match) has
        no part: nothing says which part answers. Whole is preferred otherwise: on
        LoCoMo the answer is often in a sentence beside the words asked about."""
        said = sentences(self.content)
        kept = {i + after for i, sentence in enumerate(said) if held.words_in(sentence)
                for after in range(QUOTE_AFTER + 1) if i + after < len(said)}
        whole = self._line(" ".join(said))
        if not kept or len(kept) == len(said) or len(self.content) < PART_FROM_CHARS:
            return Quote(self, whole, None, len(said), len(said))
        parts, last = [], -1
        for i in sorted(kept):
            if i > last + 1:
                parts.append("…")
            parts.append(said[i])
            last = i
        if last < len(said) - 1:
            parts.append("…")
        part = self._line(" ".join(parts))
        if len(" ".join(said)) > EVENT_LINE_CHARS:
            return Quote(self, part, None, len(kept), len(said))
        return Quote(self, whole, part, len(kept), len(said))

    def _line(self, content: str) -> str:
        if len(content) > EVENT_LINE_CHARS:
            content = content[:EVENT_LINE_CHARS] + TRUNCATION_MARKER
        return f"- [{self.created_at[:10]}] {self.role}: {content}"


@dataclass(frozen=True)
class Quote:
    """A past message as the prompt quotes it: `line`, or `part` (`sentences` of its
    `of`) when the line does not fit."""

    event: PastEvent
    line: str
    part: str | None
    sentences: int
    of: int

    def explain(self, shortened: bool) -> dict:
        in_part = shortened or (self.part is None and self.sentences < self.of)
        return {"quoted": f"{self.sentences} of {self.of} sentences"} if in_part else {}


def past_events(con: apsw.Connection, user_id: str, ids: list[int]) -> dict[int, PastEvent]:
    if not ids:
        return {}
    rows = con.execute(
        "SELECT id, session_id, created_at, role, content, compacted, from_outside FROM events "
        f"WHERE +user_id = ? AND id IN ({','.join('?' * len(ids))})", (user_id, *ids))
    return {row[0]: PastEvent(*row[:5], bool(row[5]), bool(row[6])) for row in rows}
