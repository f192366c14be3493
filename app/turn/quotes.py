"""Past messages as a turn's prompt quotes them: which are worth quoting, and how many fit.

A message is quoted whole, or by the sentences that hold the question's words (its
part). Packing tells what was found: within the room left, the best-ranked messages
(the first QUOTE_FIRST) are each told whole while that leaves room for the shortest
forms of those after them, else in part, so that several short quotes come before one
long message; then the rest of what was found, as before. Messages are shown oldest
first under the day they were said, so a day's date is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import apsw

from app.recall.fusion import STREAM_DEPTH, Candidate, search
from app.recall.query import Query
from app.recall.sentences import WordsHeld, sentences

TRUNCATION_MARKER = " […]"
# A message quoted from the past is cut to this many characters: one pasted log must not
# take the room of a dozen messages (LoCoMo's turns: 99 % under 340 characters).
EVENT_LINE_CHARS = 500
# A message quoted in part keeps this many sentences after each that holds the
# question's words: "I adopted a dog last week. His name is Buddy."
QUOTE_AFTER = 1
# A message shorter than this is quoted whole or not at all: a sentence or two.
PART_FROM_CHARS = 160
# The shortest form of one of the best-ranked messages keeps this many sentences after
# each that holds the question's words.
SHORTEST_AFTER = 1
# The best-ranked messages that are told in their shortest form before any is told
# whole: the fusion's top 10, which is what "found" means in tests/bench/locomo.py.
QUOTE_FIRST = 10
# How deep the past messages are searched for quoting: first the fusion's own depth, so
# the search shares the BM25 and vector reads of the session stream; twice that only
# when everything found fills less than LOOK_DEEPER_BELOW of the room left (short
# messages).
QUOTE_DEPTHS = (STREAM_DEPTH, 2 * STREAM_DEPTH)
LOOK_DEEPER_BELOW = 0.75
# Less room than this many tokens holds no quoted line worth having (role and words).
MIN_EVENT_LINE_TOKENS = 10


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
        """The message as the prompt may quote it (Quote)."""
        return Quote(self, held)

    @property
    def day(self) -> str:
        return self.created_at[:10]


class Quote:
    """A past message as the prompt may quote it: whole (`line`), and, when some of its
    sentences hold the question's words and others do not, in part (`part`): those
    sentences (and QUOTE_AFTER after each) with "…" where the rest was. A message none
    of whose sentences holds a word (found by meaning, or beside a match) has no part:
    nothing says which part answers. The part is read only when asked for (a build
    considers a hundred messages and quotes a few)."""

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
    def shortest(self) -> str:
        """The shortest form worth quoting: the sentences that hold the question's words
        (SHORTEST_AFTER after each), or the line."""
        if SHORTEST_AFTER == QUOTE_AFTER:
            return self.part or self.line
        return self._quoted(self._sentences_kept(SHORTEST_AFTER)) or self.line

    def _sentences_kept(self, after_each: int) -> tuple[list[str], list[int]]:
        """The message's sentences, and which of them a part keeping `after_each` after
        each sentence holding the question's words shows."""
        said = sentences(self.event.content)
        if len(self.event.content) < PART_FROM_CHARS:
            return said, list(range(len(said)))
        kept = {i + after for i, sentence in enumerate(said) if self._held.words_in(sentence)
                for after in range(after_each + 1) if i + after < len(said)}
        return said, sorted(kept) if kept else list(range(len(said)))

    @cached_property
    def _kept(self) -> tuple[list[str], list[int]]:
        return self._sentences_kept(QUOTE_AFTER)

    @cached_property
    def part(self) -> str | None:
        """The sentences that hold the question's words; None when that is all or none."""
        return self._quoted(self._kept)

    def _quoted(self, sentences_kept: tuple[list[str], list[int]]) -> str | None:
        said, kept = sentences_kept
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
    return f"- {event.role}: {content}"


def day_line(day: str) -> str:
    """The line a day's quoted messages are shown under."""
    return f"[{day}]"


@dataclass
class Packed:
    """Which quotes went in (by their place in the offer, best first), which of them in
    part, and the tokens they take with their days' lines."""

    kept: list[int]
    shortened: set[int]
    tokens: int

    def text(self, quotes: list[Quote]) -> str:
        """The kept quotes, oldest first, each day's under its date."""
        order = sorted(self.kept, key=lambda i: (quotes[i].event.created_at, quotes[i].event.id))
        lines, day = [], None
        for i in order:
            if quotes[i].event.day != day:
                day = quotes[i].event.day
                lines.append(day_line(day))
            lines.append(quotes[i].shortest if i in self.shortened else quotes[i].line)
        return "".join(line + "\n" for line in lines)


def pack_quotes(quotes: list[Quote], room: int, cost: Callable[[str], int]) -> Packed:
    """As many of the quotes as fit in `room` tokens. The first QUOTE_FIRST, best first:
    each whole when that still leaves room for the shortest forms of those after it,
    else in its shortest form; then, best first, those in part told whole while the
    room lasts; then the others (whole, or in part when only that fits), passing over
    what does not fit."""
    kept: list[int] = []
    shortened: set[int] = set()
    days: set[str] = set()
    spent = 0

    def day_cost(i: int) -> int:
        day = quotes[i].event.day
        return 0 if day in days else cost(day_line(day) + "\n")

    def take(i: int, line: str, reserve: int = 0) -> bool:
        nonlocal spent
        extra = cost(line + "\n") + day_cost(i)
        if spent + extra + reserve > room:
            return False
        kept.append(i)
        days.add(quotes[i].event.day)
        spent += extra
        return True

    first = min(QUOTE_FIRST, len(quotes))
    # Which of the first can be told at all, best first, each in its shortest form.
    told, fits = [], 0
    for i in range(first):
        line_cost = cost(quotes[i].shortest + "\n")
        if fits + line_cost <= room:
            told.append((i, line_cost))
            fits += line_cost
    for n, (i, _) in enumerate(told):
        after = sum(c for _, c in told[n + 1:])  # the room those after it need at least
        if take(i, quotes[i].line, after):
            continue
        if take(i, quotes[i].shortest) and quotes[i].shortest != quotes[i].line:
            shortened.add(i)
    for i in sorted(shortened):
        extra = cost(quotes[i].line + "\n") - cost(quotes[i].shortest + "\n")
        if spent + extra <= room:
            shortened.discard(i)
            spent += extra
    for i in range(first, len(quotes)):
        if not take(i, quotes[i].line) and quotes[i].part and take(i, quotes[i].part):
            shortened.add(i)
    return Packed(kept, shortened, spent)


def quotable_events(con: apsw.Connection, query: Query, session_id: str, skip: set[int],
                    said: Callable[[str], bool], room: int,
                    cost: Callable[[str], int]) -> tuple[list[Candidate], list[Quote]]:
    """The best-ranked past events worth quoting, best first, as quoted (whole, or the
    sentences that hold the question's words): not among `skip` (the window), not the
    live part of this session (its un-compacted events: the window shows the recent
    ones, and the message being answered is among them), and not what the request's
    messages already say (`said`: a client resends its history, compacted or not)."""
    if room < MIN_EVENT_LINE_TOKENS:
        return [], []
    held = WordsHeld(con, query.searched)
    kept: list[Candidate] = []
    quotes: dict[int, Quote] = {}
    for depth in QUOTE_DEPTHS:
        candidates = search(con, query.user_id, query.text, "event", depth, query=query)
        found = past_events(con, query.user_id, [c.id for c in candidates])
        kept = [c for c in candidates if c.id in found and c.id not in skip
                and (found[c.id].session_id != session_id or found[c.id].compacted)
                and not said(found[c.id].content)]
        quotes = {c.id: quotes.get(c.id) or found[c.id].quote(held) for c in kept}
        wanted = sum(cost(q.line + "\n") for q in quotes.values())
        if len(candidates) < depth or wanted > LOOK_DEEPER_BELOW * room:
            break
    return kept, [quotes[c.id] for c in kept]


def past_events(con: apsw.Connection, user_id: str, ids: list[int]) -> dict[int, PastEvent]:
    if not ids:
        return {}
    rows = con.execute(
        "SELECT id, session_id, created_at, role, content, compacted, from_outside FROM events "
        f"WHERE +user_id = ? AND id IN ({','.join('?' * len(ids))})", (user_id, *ids))
    return {row[0]: PastEvent(*row[:5], bool(row[5]), bool(row[6])) for row in rows}
