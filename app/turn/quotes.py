"""Past messages as a turn's prompt quotes them: which are worth quoting, and how many fit.

A message is quoted whole, by the sentences that hold the question's words (its part),
or by the one that holds the most of them (its answering sentence). Packing, best-ranked
first (a long message placed for the room it takes): each message whole when it fits,
else its part when that fits, passing over what does not fit; a long one goes in by its
answering sentence first. Then the best-ranked ten not in are told by their answering
sentence in the room left, and the long ones grow while it fits. They are shown oldest first under the day they were said, a day's date
written once: on LoCoMo that leaves room for about one more message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import apsw

from app.memory.corrections import corrections_of
from app.model.token_count import tokens_for_chars
from app.recall.fusion import STREAM_DEPTH, Candidate, search
from app.recall.query import Query
from app.recall.sentences import WordsHeld, sentences

__all__ = ["TRUNCATION_MARKER", "EVENT_LINE_CHARS", "QUOTE_AFTER", "PART_FROM_CHARS",
           "QUOTE_DEPTHS", "LOOK_DEEPER_BELOW", "MIN_EVENT_LINE_TOKENS", "LONG_QUOTE_CHARS",
           "LONG_RANKED", "TOLD_RANKED", "SENTENCE_FIRST_CHARS", "PastEvent", "Quote",
           "OUTSIDE_SPEAKER", "day_line", "Packed", "pack_quotes", "quotable_events",
           "past_events"]

TRUNCATION_MARKER = " […]"
# A message quoted from the past is cut to this many characters: one pasted log must not
# take the room of a dozen messages (LoCoMo's turns: 99 % under 340 characters).
EVENT_LINE_CHARS = 500
# A message quoted in part keeps this many sentences after each that holds the
# question's words: "I adopted a dog last week. His name is Buddy."
QUOTE_AFTER = 1
# A message shorter than this is quoted whole or not at all: a sentence or two. LoCoMo
# development (tests/bench/locomo.py, the default budget): from 160 characters context
# recall 0.717, answer recall 0.720, found and not told 10.4 %; from 250 (as before)
# 0.716, 0.717, 11.1 %. Telling the ten best-ranked messages first, each in part, cost
# context recall (0.63-0.65 at 10.3-10.5 % not told; their single sentences: 0.39 at
# 5.2 %): LoCoMo's short messages are best told whole.
PART_FROM_CHARS = 160
# How deep the past messages are searched for quoting: first the fusion's own depth, so
# the search shares the BM25 and vector reads of the session stream; twice that only
# when everything found fills less than LOOK_DEEPER_BELOW of the room left (short
# messages). On LoCoMo (tests/bench/locomo.py, quick) context recall was 0.933 with one
# look, 0.935 with this, 0.938 looking 100 deep every time, which costs ~2 ms a turn at
# 10^5 events.
QUOTE_DEPTHS = (STREAM_DEPTH, 2 * STREAM_DEPTH)
LOOK_DEEPER_BELOW = 0.75
# Less room than this many tokens holds no quoted line worth having (role and words).
MIN_EVENT_LINE_TOKENS = 10
# A long message holds the room of several: among the LONG_RANKED best-ranked, a quote
# longer than LONG_QUOTE_CHARS is placed by its fused score over the square of its
# length in those units (800 characters: a quarter). Development halves, default
# budget: RealMem (long replies) context recall 0.103 -> 0.128, at 500 tokens/s and 3 s
# 0.176 -> 0.226; LoCoMo (99 % of turns under 340 characters) unchanged, 0.726. Over
# 340 characters, or the score over the length alone, cost LoCoMo 0.003-0.04.
LONG_QUOTE_CHARS = 400
LONG_RANKED = 20
# Of the TOLD_RANKED best-ranked messages, one that did not fit whole or in part is told
# by its answering sentence in the room the rest left (Quote.sentence). Only that room:
# a message counts as told whole only when quoted whole, and reserving room for a
# sentence of each of the ten cost LoCoMo development context recall 0.726 -> 0.687
# (found and not told 9.7 -> 5.1 %).
TOLD_RANKED = 10
# A quote longer than this goes in by its answering sentence first and grows to its
# whole (or part) once everything is placed: a long reply takes the room of several
# short messages. Development halves, default budget: RealMem context recall 0.128 ->
# 0.142, found and not told 25.0 -> 18.8 %; LoCoMo unchanged (0.726); from 400 or 420
# characters LoCoMo fell to 0.716-0.719. At 60 tokens/s RealMem fell 0.163 -> 0.142
# (two questions whose evidence, ranked 25th and 49th, had filled the gap these take).
SENTENCE_FIRST_CHARS = 450


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

    @property
    def day(self) -> str:
        return self.created_at[:10]


class Quote:
    """A past message as the prompt may quote it: whole (`line`), and, when some of its
    sentences hold the question's words and others do not, in part (`part`): those
    sentences (and QUOTE_AFTER after each) with "…" where the rest was. The part goes
    in when the whole would be cut (over EVENT_LINE_CHARS) or does not fit the room
    left: a long message then costs what its answer costs instead of being skipped. A
    message none of whose sentences holds a word (found by meaning, or beside a match)
    has no part: nothing says which part answers. The part is read only when asked for
    (a build considers a hundred messages and quotes a few)."""

    def __init__(self, event: PastEvent, held: WordsHeld) -> None:
        self.event, self._held = event, held
        # Its place in the search's ranking, best first (the offer may place it lower).
        self.rank: int | None = None
        content = " ".join(event.content.split())
        self.long = len(content) > EVENT_LINE_CHARS
        self._whole = _line(event, content)

    @property
    def line(self) -> str:
        """What the prompt shows when it has the room."""
        return (self.part or self._whole) if self.long else self._whole

    @cached_property
    def _said(self) -> list[str]:
        return sentences(self.event.content)

    @cached_property
    def _held_by(self) -> list[int]:
        """How many of the question's words each sentence holds."""
        return [len(self._held.words_in(sentence)) for sentence in self._said]

    @cached_property
    def _kept(self) -> tuple[list[str], list[int]]:
        """The message's sentences, and which of them its part shows."""
        said = self._said
        if len(self.event.content) < PART_FROM_CHARS:
            return said, list(range(len(said)))
        kept = {i + after for i, held in enumerate(self._held_by) if held
                for after in range(QUOTE_AFTER + 1) if i + after < len(said)}
        return said, sorted(kept) if kept else list(range(len(said)))

    @cached_property
    def part(self) -> str | None:
        """The sentences that hold the question's words; None when that is all or none."""
        said, kept = self._kept
        if len(kept) == len(said):
            return None
        return self._showing(said, kept)

    @cached_property
    def _answering(self) -> int | None:
        """Which one sentence holds the most of the question's words (the first of equals);
        None when the message is one sentence or none of them holds a word."""
        said = self._said
        held = self._held_by if len(said) > 1 else [0]
        if not any(held):
            return None
        return max(range(len(said)), key=lambda i: (held[i], -i))

    @cached_property
    def sentence(self) -> str | None:
        """The least of the message that tells what was found: its answering sentence,
        "…" where the rest was; None when nothing says which sentence answers."""
        if self._answering is None:
            return None
        return self._showing(self._said, [self._answering])

    def form(self, name: str) -> str:
        """The message as one of its forms shows it: "whole" (`line`), "part", "sentence"."""
        shown = self.line if name == "whole" else self.part if name == "part" else self.sentence
        return shown or ""

    def _showing(self, said: list[str], shown: list[int]) -> str:
        """The line showing the sentences `shown` of `said`, "…" where the rest was."""
        parts, last = [], -1
        for i in shown:
            if i > last + 1:
                parts.append("…")
            parts.append(said[i])
            last = i
        if last < len(said) - 1:
            parts.append("…")
        return _line(self.event, " ".join(parts))

    def explain(self, form: str = "whole") -> dict:
        """How much of the message the prompt shows, when not all of it."""
        said, kept = self._kept
        if form == "sentence":
            return {"quoted": f"1 of {len(said)} sentences"}
        if not (form == "part" or (self.long and self.part)):
            return {}
        return {"quoted": f"{len(kept)} of {len(said)} sentences"}


# Who said a past message from outside, as a quote shows it: never the user's words.
OUTSIDE_SPEAKER = "quoted from outside (not the user's words)"


def _line(event: PastEvent, content: str) -> str:
    if len(content) > EVENT_LINE_CHARS:
        content = content[:EVENT_LINE_CHARS] + TRUNCATION_MARKER
    speaker = event.role
    if event.from_outside:  # documents a client retrieved, a page, a client's history
        speaker = OUTSIDE_SPEAKER if event.role == "user" else f"{event.role}, from outside"
    corrected = f" [{event.correction}]" if event.correction else ""
    # No bullet: a quote is one line under its day, and "- " was a tenth of a short one.
    return f"{speaker}: {content}{corrected}"


def day_line(day: str) -> str:
    """The line a day's quoted messages are shown under."""
    return f"[{day}]"


@dataclass
class Packed:
    """Which quotes went in (by their place in the offer, best first), which of them in a
    shorter form ("part" or "sentence", Quote.form), and the tokens they take with their
    days' lines."""

    kept: list[int]
    shortened: dict[int, str]
    tokens: int

    def text(self, quotes: list[Quote]) -> str:
        """The kept quotes, oldest first, each day's under its date."""
        order = sorted(self.kept, key=lambda i: (quotes[i].event.created_at, quotes[i].event.id))
        lines, day = [], None
        for i in order:
            if quotes[i].event.day != day:
                day = quotes[i].event.day
                lines.append(day_line(day))
            lines.append(quotes[i].form(self.shortened.get(i, "whole")))
        return "".join(line + "\n" for line in lines)


def pack_quotes(quotes: list[Quote], room: int, chars_per_token: float) -> Packed:
    """As many of the quotes as fit in `room` tokens, best first: each whole when it
    fits, else in part when that fits, passing over what does not fit (one longer than
    SENTENCE_FIRST_CHARS by its answering sentence first); then, in the room left, the
    answering sentence of each of the TOLD_RANKED best-ranked that is not in; last, the
    ones told by a sentence first grown whole (or to their part) while that fits. The
    block is reckoned as one text (its lines in any order cost the same), not line by
    line: a count rounded up per line wasted half a token a line."""
    forms: dict[int, str] = {}  # by place in the offer: the form it goes in
    days: set[str] = set()
    chars = 0  # of the kept lines and their days' lines

    def put(i: int, form: str) -> bool:
        nonlocal chars
        line = quotes[i].form(form)
        if not line:
            return False
        day = quotes[i].event.day
        was = len(quotes[i].form(forms[i])) + 1 if i in forms else 0
        dated = 0 if day in days else len(day_line(day)) + 1
        after = chars + dated + len(line) + 1 - was
        if tokens_for_chars(after, chars_per_token) > room:
            return False
        forms[i], chars = form, after
        days.add(day)
        return True

    grown: list[int] = []  # told by a sentence first, to grow while room is left
    for i, quote in enumerate(quotes):
        if (quote.long or len(quote.line) > SENTENCE_FIRST_CHARS) and put(i, "sentence"):
            grown.append(i)
        elif i not in forms:
            any(put(i, form) for form in ("whole", "part"))
    ranked = sorted(range(len(quotes)), key=lambda i: i if quotes[i].rank is None else quotes[i].rank)
    for i in ranked[:TOLD_RANKED]:
        if i not in forms:
            put(i, "sentence")
    for i in grown:
        any(put(i, form) for form in ("whole", "part"))
    return Packed(sorted(forms), {i: form for i, form in forms.items() if form != "whole"},
                  tokens_for_chars(chars, chars_per_token))


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
    for rank, candidate in enumerate(kept):
        quotes[candidate.id].rank = rank
    return _by_room(kept, [quotes[c.id] for c in kept])


def _by_room(kept: list[Candidate], quotes: list[Quote]) -> tuple[list[Candidate], list[Quote]]:
    """The offer best first, a long quote among the first LONG_RANKED placed by its score
    for the room it takes (LONG_QUOTE_CHARS)."""
    def placed(i: int) -> float:
        return -kept[i].score / max(1.0, len(quotes[i].line) / LONG_QUOTE_CHARS) ** 2

    order = sorted(range(min(LONG_RANKED, len(kept))), key=placed)
    order += range(len(order), len(kept))
    return [kept[i] for i in order], [quotes[i] for i in order]


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
