"""What is stored is grounded in what was said: the rule a learned item must pass, and
the message that supports it.

A weak model invents (`allergy: Mentos` for "My daughter Ana is allergic to peanuts"),
copies the instruction's examples ("editor", "staging database"), cuts a sentence before
what it says (`ANA: My daughter Ana`) or takes the assistant's words for the user's. An
item the model extracted — a profile attribute or a fact, its key and its value — is
kept only when ONE source message (a USER line, a TOOL result; a scheduled task's RESULT)
supports its value:

1. most of its content words (stop-words and relation words such as "uses" or
   "prefers" left out) are in that message — at least MESSAGE_SHARE of them, a word
   matching its inflections ("allergic", "allergies"); of the rest, a paraphrase may
   bring in a word no message of the call says (the assistant's words count as unsaid
   when learning what the person said), but only one in four words of a value of
   four words or more (`90 days, required by legal` of "kept 90 days, legal wants that"),
   none in a shorter one (`Ana is allergic to walnuts` of "… allergic to peanuts"); a word
   of the item's own key counts as said (the key labels it);
2. each number of the key and the value is in that message exactly, each name (a
   capitalised word) in a message of the call;
3. at least one word found in the message is not a word of Hilo's own instructions;
4. the value says something: not only the words of its key, and not only the subject of
   a sentence the message goes on to say something about, under a key that only
   repeats part of it (`ANA: My daughter Ana`, of "My daughter Ana is allergic …").

The message that supports it best is the item's provenance (its source event). What
fails says why (`Dropped.reason`), and what the rules of app/learn/capture.py take from
the same messages is kept beside what the model gave, so a model that returns only junk
leaves memory as rule-based learning would: never worse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.fts import stems, terms
from app.learn.capture import capture_statements

__all__ = ["MESSAGE_SHARE", "COVER_SHARE", "RELATION_WORDS", "PREDICATE_STARTS", "STEM_CHARS",
           "Source", "Dropped", "Judged", "content_words", "unsaid_allowed", "support_of", "judge",
           "by_rule", "covers", "QUOTE_CHARS", "supporting_quote"]

# Of a value's content words, the share its supporting message must hold.
MESSAGE_SHARE = 0.5
# Of a rule's value's content words, the share a kept item must hold to say it already.
COVER_SHARE = 0.5
# Words a model adds to say how the user relates to a thing, not what the thing is.
RELATION_WORDS = frozenset("""
    user users uses use used using prefers prefer preferred likes like liked loves love
    wants want works work working lives live living called named name has have had
    usa usan prefiere prefieren gusta gustan vive trabaja llama llamo
""".split())
# A sentence goes on after its subject with one of these.
PREDICATE_STARTS = frozenset("""
    is are was were has have had will would can could should does did isn wasn s
    es está son era fue tiene tienen
""".split())
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_WORD = re.compile(r"\w+", re.UNICODE)
STEM_CHARS = 5  # words sharing their first five letters are one word's inflections


class Source(Protocol):
    """A message an item may be learned from (distill.TurnEvent)."""

    id: int
    role: str
    content: str


@dataclass(frozen=True)
class Dropped:
    """An item the rule refused, and why, in words a person reads."""

    key: str
    value: str
    reason: str


@dataclass
class Judged:
    """The items kept, each with the message that supports it, and those dropped."""

    supported_by: dict[tuple[str, str], int] = field(default_factory=dict)  # item → event id
    dropped: list[Dropped] = field(default_factory=list)


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    short = min(len(a), len(b))
    return short >= 4 and (bool(stems(a) & stems(b)) or a.startswith(b) or b.startswith(a)
                           or (short >= STEM_CHARS and a[:STEM_CHARS] == b[:STEM_CHARS]))


def _found(word: str, words: set[str]) -> bool:
    return word in words or any(_same_word(word, other) for other in words)


def content_words(text: str) -> list[str]:
    return [w for w in terms(text) if w not in RELATION_WORDS]


def _names(value: str) -> list[str]:
    """Capitalised words of the value, lower-cased; the first only when it is the whole
    value (a model capitalises the start of anything)."""
    words = _WORD.findall(value)
    return [w.lower() for i, w in enumerate(words)
            if w[:1].isupper() and (i > 0 or len(words) == 1) and w.lower() in terms(w)]


def _only_the_subject(value: str, text: str) -> bool:
    """Whether the value, of two words or more, is said in `text` only as a sentence's
    subject, the predicate cut off: "My daughter Ana" of "My daughter Ana is allergic"."""
    said = " ".join(_WORD.findall(value.lower()))
    if len(said.split()) < 2:
        return False
    words = _WORD.findall(text.lower())
    spoken = " ".join(words)
    at = spoken.find(said)
    while at >= 0:
        following = spoken[at + len(said):].split(maxsplit=1)
        if (at == 0 or spoken[at - 1] == " ") and following and following[0] in PREDICATE_STARTS:
            return True
        at = spoken.find(said, at + 1)
    return False


def unsaid_allowed(words: int) -> int:
    """Words of a value of `words` content words that may be said by no message: one in
    four, none in a value of fewer than four."""
    return max(0, (words - 2) // 2)


def support_of(key: str, value: str, sources: Sequence[Source], context: Sequence[Source],
               instruction_words: frozenset[str]) -> tuple[int | None, str]:
    """The id of the source message that best supports `value` under `key`, or None with
    the reason none does (module docstring)."""
    words = content_words(value)
    key_words = set(content_words(key))
    if not words:
        return None, "no value: nothing but stop-words"
    if all(_found(w, key_words) for w in words):
        return None, "says nothing beyond its key"
    best: tuple[float, int] | None = None
    exact = _NUMBER.findall(f"{key} {value}")
    heard = set().union(*(terms(m.content) for m in [*sources, *context]))
    if any(name not in heard for name in _names(value) + _names(key)):
        return None, "a name no message says"
    # A paraphrase's extra words are said by a voice the call learns from (the person, a
    # tool), never by the context's (the assistant's reply, whose chatter a weak model
    # copies after the user's few words).
    voices = {m.role for m in sources}
    spoken = set().union(*(terms(m.content) for m in [*sources, *context] if m.role in voices))
    for source in sources:
        said = set(terms(source.content))
        in_message = [w for w in words if _found(w, said)]
        unsaid = [w for w in words if not (_found(w, said) or _found(w, key_words)
                                           or _found(w, spoken))]
        share = len(in_message) / len(words)
        if (share < MESSAGE_SHARE or len(unsaid) > unsaid_allowed(len(words))
                or any(n not in _NUMBER.findall(source.content) for n in exact)
                or all(w in instruction_words for w in in_message)):
            continue
        if key_words <= set(words) and _only_the_subject(value, source.content):
            continue
        if best is None or share >= best[0]:
            best = (share, source.id)
    if best is not None:
        return best[1], ""
    if all(w in instruction_words for w in words):
        return None, "copied from Hilo's instructions"
    if any(_only_the_subject(value, s.content) for s in sources):
        return None, "only the subject of what was said"
    assistant = set().union(*(terms(c.content) for c in context)) if context else set()
    if assistant and sum(_found(w, assistant) for w in words) / len(words) >= MESSAGE_SHARE:
        return None, "only the assistant said it"
    return None, "no message says it"


def judge(items: Iterable[tuple[tuple[str, str], str, str]], sources: Sequence[Source],
          context: Sequence[Source], instructions: str) -> Judged:
    """Judge each (item id, key, value): its supporting message, or why it is dropped."""
    instruction_words = frozenset(terms(instructions))
    judged = Judged()
    for item, key, value in items:
        event_id, reason = support_of(key, value, sources, context, instruction_words)
        if event_id is None:
            judged.dropped.append(Dropped(key, value, reason))
        else:
            judged.supported_by[item] = event_id
    return judged


def by_rule(sources: Sequence[Source]) -> list[tuple[str, str, str, str, int]]:
    """What rule-based learning takes from the user's messages among `sources`:
    (kind, category, key, value, event id), kind "profile" or "fact"."""
    found = []
    for source in sources:
        if source.role != "user":
            continue
        captured = capture_statements(source.content)
        found += [("profile", "", key, value, source.id) for key, value in captured.profile.items()]
        found += [("fact", category, key, value, source.id)
                  for category, key, value in captured.facts]
    return found


def covers(kept_texts: Iterable[str], value: str) -> bool:
    """Whether an item already kept says what a rule found in `value`: at least
    COVER_SHARE of its content words within one kept item's key and value."""
    words = content_words(value)
    return bool(words) and any(
        sum(_found(w, set(terms(text))) for w in words) / len(words) >= COVER_SHARE
        for text in kept_texts)


QUOTE_CHARS = 240
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def supporting_quote(key: str, value: str, text: str) -> str:
    """The sentence of `text` that says the item best (most of its words), cut to
    QUOTE_CHARS: what the memory page quotes as its support."""
    words = content_words(f"{key} {value}")
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()] or [text.strip()]
    best = max(sentences, key=lambda s: sum(_found(w, set(terms(s))) for w in words))
    return best if len(best) <= QUOTE_CHARS else best[:QUOTE_CHARS - 1].rstrip() + "…"
