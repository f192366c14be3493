"""Past messages as a turn's prompt quotes them: whole, or, when that does not fit, by
the sentences that hold the question's words (app/turn/context.py chooses which)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import apsw

from app.memory.corrections import corrections_of
from app.recall.sentences import WordsHeld, sentences

TRUNCATION_MARKER = " […]"
# A message quoted from the past is cut to this many characters: one pasted log must not
# take the room of a dozen messages (LoCoMo's turns: 99 % under 340 characters).
EVENT_LINE_CHARS = 500
# A message quoted in part keeps this many sentences after each that holds the
# question's words: "I adopted a dog last week. His name is Buddy."
QUOTE_AFTER = 1
# A message shorter than this (~60 tokens) is quoted whole or not at all. LoCoMo
# development (tests/bench/locomo.py, answer recall at the default budget; its turns
# are short, 99 % under 340 characters): whole only 0.695; in part from 0, 250 and 400
# characters 0.693, 0.694, 0.695 (keeping no sentence after each match: 0.694 and
# 0.696). Quoting every message by its matching sentences alone costs a third of it:
# the answer is often the sentence after the words asked about.
PART_FROM_CHARS = 250


@dataclass(frozen=True)
class PastEvent:
    id: int
    session_id: str
    created_at: str
    role: str
    content: str
    compacted: bool
    from_outside: bool = False
    # It said a fact the person corrected since: what the fact says now, quoted with it.
    correction: str | None = None

    def quote(self, held: WordsHeld) -> Quote:
        """The message as the prompt may quote it (Quote)."""
        return Quote(self, held)


class Quote:
    """A past message as the prompt may quote it: whole (`line`), and, when some of its
    sentences hold the question's words and others do not, in part (`part`): those
    sentences (and QUOTE_AFTER after each) with "…" where the rest was. The part goes
    in when the whole would be cut (over EVENT_LINE_CHARS) or does not fit the room
    left: a long message then costs what its answer costs instead of being skipped. A
    message none of whose sentences holds a word (found by meaning, or beside a match)
    has no part: nothing says which part answers. Whole is preferred otherwise: on
    LoCoMo the answer is often in a sentence beside the words asked about. The part is
    read only when asked for (a build considers a hundred messages and cuts a few)."""

    def __init__(self, event: PastEvent, held: WordsHeld) -> None:
        self.event, self._held = event, held
        content = " ".join(event.content.split())
        self.long = len(content) > EVENT_LINE_CHARS
        self._whole = _line(event, content)

    @property
    def line(self) -> str:
        """What the prompt shows when it has the room."""
        return (self.part or self._whole) if self.long else self._whole

    @cached_property
    def _kept(self) -> tuple[list[str], list[int]]:
        """The message's sentences, and which of them its part shows."""
        said = sentences(self.event.content)
        if len(self.event.content) < PART_FROM_CHARS:
            return said, list(range(len(said)))
        kept = {i + after for i, sentence in enumerate(said) if self._held.words_in(sentence)
                for after in range(QUOTE_AFTER + 1) if i + after < len(said)}
        return said, sorted(kept) if kept else list(range(len(said)))

    @cached_property
    def part(self) -> str | None:
        """The sentences that hold the question's words; None when that is all or none."""
        said, kept = self._kept
        if len(kept) == len(said):
            return None
        parts, last = [], -1
        for i in kept:
            if i > last + 1:
                parts.append("…")
            parts.append(said[i])
            last = i
        if last < len(said) - 1:
            parts.append("…")
        return _line(self.event, " ".join(parts))

    def explain(self, shortened: bool) -> dict:
        """How much of the message the prompt shows, when not all of it."""
        if not (shortened or (self.long and self.part)):
            return {}
        said, kept = self._kept
        return {"quoted": f"{len(kept)} of {len(said)} sentences"}


def _line(event: PastEvent, content: str) -> str:
    if len(content) > EVENT_LINE_CHARS:
        content = content[:EVENT_LINE_CHARS] + TRUNCATION_MARKER
    corrected = f" [{event.correction}]" if event.correction else ""
    return f"- [{event.created_at[:10]}] {event.role}: {content}{corrected}"


def past_events(con: apsw.Connection, user_id: str, ids: list[int]) -> dict[int, PastEvent]:
    """The user's events `ids`, as quotable: with the correction of any fact they said
    that the person has corrected since (app/memory/corrections.py)."""
    if not ids:
        return {}
    rows = con.execute(
        "SELECT id, session_id, created_at, role, content, compacted, from_outside FROM events "
        f"WHERE +user_id = ? AND id IN ({','.join('?' * len(ids))})", (user_id, *ids))
    found = {row[0]: PastEvent(*row[:5], bool(row[5]), bool(row[6])) for row in rows}
    for event_id, correction in corrections_of(con, user_id, "event", list(found)).items():
        if correction.note:
            found[event_id] = replace(found[event_id], correction=correction.note)
    return found
