"""Reading the question: what a turn's question asks the memory, as every stream reads it.

`make_query` makes the `Query` of one turn: the words worth searching for, what the
question says about when and by whom (labels: app/recall/event_labels.py), and, with an
embedder, the searched words' vector, made once for every kind searched (or on a thread
beside the keyword streams: `ahead`). Before searching, the question is read against the
memory (`focus_question`): the user's own name and the words in a large share of the
stored events are not searched for, and what it says about when and by whom becomes
labels. A query carries the process's Recall (app/recall/state.py), through which the
streams reach the vector index and the cached word counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import apsw

from app.errors import EmbedderUnavailable
from app.fts import build_match_query, terms
from app.log import get_logger
from app.recall.bm25 import rows_holding
from app.recall.event_labels import LabelQuery, month_first, read_question
from app.recall.speakers import names_in
from app.sanitize import redact_secrets

if TYPE_CHECKING:
    from concurrent.futures import Future

    import numpy as np

    from app.model.embedders import Embedder
    from app.recall.state import Recall

__all__ = ["log", "Query", "make_query", "embed_ahead", "COMMON_SHARE", "COMMON_MIN_ROWS",
           "focus_question"]

log = get_logger(__name__)


@dataclass
class Query:
    """What a stream needs: the user, the text, the words searched for (`searched`: the
    text less the words that would mislead, see make_query), their FTS5 form (None if
    no terms), what the text says about when and by whom (`labels`) and, when an
    embedder is configured, the searched words' vector and the model that made it
    (`vector`, or `embedding` while it is still being made: read it with vector_now);
    and the Recall the streams search through (its vector index and word counts)."""

    user_id: str
    text: str
    recall: Recall = field(kw_only=True, repr=False, compare=False)
    match: str | None = field(init=False)
    vector: np.ndarray | None = None
    model: str | None = None
    searched: str = None  # type: ignore[assignment]  # the text, unless make_query focused it
    labels: LabelQuery | None = None
    # The vector being made beside the keyword streams (make_query's `ahead`).
    embedding: Future[np.ndarray | None] | None = field(default=None, repr=False,
                                                         compare=False)
    # Stream results already computed for this query: the session stream reads the
    # same BM25 and vector ranks that are fused beside it.
    _ranked: dict[tuple, list[int]] = field(default_factory=dict, repr=False, compare=False)
    _depths: dict[tuple, int] = field(default_factory=dict, repr=False, compare=False)
    # Vector searches started ahead (search_ahead): kind -> (depth, hits when done).
    vectors_ahead: dict[str, tuple[int, Callable[[], list[tuple[int, float]]]]] = field(
        default_factory=dict, repr=False, compare=False)
    # Vector searches made: kind -> (depth, (owner, cosine) best first); see nearest().
    vectors_found: dict[str, tuple[int, list[tuple[int, float]]]] = field(
        default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.searched is None:
            self.searched = self.text
        self.match = build_match_query(self.searched)

    @property
    def searches_vectors(self) -> bool:
        """A vector is here or on its way, from a known model."""
        return self.model is not None and (self.vector is not None or self.embedding is not None)

    def vector_now(self) -> np.ndarray | None:
        """The vector (None: no embedder, or it failed), once made."""
        return self.embedding.result() if self.embedding is not None else self.vector

    def ranked(self, key: tuple, compute: Callable[[], list[int]]) -> list[int]:
        if key not in self._ranked:
            self._ranked[key] = compute()
        return self._ranked[key]

    def ranked_to(self, key: tuple, depth: int, compute: Callable[[int], list[int]]) -> list[int]:
        """A ranking cut to `depth`, computed once at the deepest depth asked for first
        (the fusion reads a stream deeper than the session stream does)."""
        known = self._ranked.get(key)
        if known is None or (len(known) < depth and self._depths.get(key, 0) < depth):
            known = self._ranked[key] = compute(depth)
            self._depths[key] = depth
        return known[:depth]


def make_query(user_id: str, text: str, embedder: Embedder | None = None, *, recall: Recall,
               con: apsw.Connection | None = None, now: datetime | None = None,
               ahead: bool = False,
               on_embedding: Callable[[Future], None] | None = None) -> Query:
    """The query for one turn, embedded once and shared by every kind searched, searched
    through `recall` (the process's: app/recall/state.py).

    With `con`, the question is read against what the memory knows (focus_question):
    the times it names and whether it names the user become labels, and the words
    that would mislead keyword and vector search are left out of both. `now` is when
    the question is asked (relative times such as "yesterday" count from it).

    `ahead`: the question is embedded on a thread of recall's and the query returned at
    once, so the keyword streams run while the model server embeds it (milliseconds to
    tens of them); the vector searches wait for it. When embed_ahead already began
    embedding the same words, the query takes that vector instead; `on_embedding` is
    called with each embedding begun here.

    If the embedder fails (model server down), the query goes on without a vector:
    keyword, importance and recency streams still answer.
    """
    searched, labels = _searched(text, con, user_id, now, recall)
    query = Query(user_id, text, recall=recall, searched=searched, labels=labels)
    if embedder is None or not searched.strip():
        return query
    if ahead:
        query.model = embedder.model
        query.embedding = (recall.started.take((embedder.model, searched))
                           or _embedding(recall, embedder, searched, on_embedding))
    else:
        query.vector = _embedded(embedder, searched)
        query.model = embedder.model if query.vector is not None else None
    return query


def embed_ahead(user_id: str, text: str, embedder: Embedder, *, recall: Recall,
                con: apsw.Connection, now: datetime | None = None,
                on_embedding: Callable[[Future], None] | None = None) -> None:
    """Begin embedding what `text` will be searched for before its turn asks: a front-end
    calls it the moment a message's text is known, so the embedding runs while the
    message is stored and its session found, not after. make_query(ahead=True) then
    takes this vector for the same words. The words are read against the memory as
    make_query reads them (focus_question); should the turn read other words (the
    memory changed in between), it embeds those, and this vector is never used."""
    searched, _ = _searched(text, con, user_id, now, recall)
    if searched.strip():
        recall.started.start((embedder.model, searched),
                             lambda: _embedding(recall, embedder, searched, on_embedding))


def _searched(text: str, con: apsw.Connection | None, user_id: str, now: datetime | None,
              recall: Recall) -> tuple[str, LabelQuery | None]:
    """The words `text` is searched for, and its labels (focus_question, with `con`). The
    secrets are redacted first, as storing the message would: the embedder may be a
    server, and focusing can cut the shape a secret is recognised by (a PGP block whose
    BEGIN line holds words the memory says all the time)."""
    redacted = redact_secrets(text).text
    if con is None:
        return redacted, None
    return focus_question(con, user_id, redacted, now, recall=recall)


def _embedding(recall: Recall, embedder: Embedder, searched: str,
               on_embedding: Callable[[Future], None] | None) -> Future[np.ndarray | None]:
    """The searched words' vector, begun on one of recall's threads."""
    future = recall.embedding_threads.submit(_embedded, embedder, searched)
    if on_embedding is not None:
        on_embedding(future)
    return future


def _embedded(embedder: Embedder, searched: str) -> np.ndarray | None:
    """The searched words' vector; None when the embedder fails."""
    try:
        return embedder.embed([searched])[0]  # redacted already (_searched)
    except EmbedderUnavailable:
        return None  # the embedder has said so, once
    except Exception as exc:  # noqa: BLE001 - any embedder failure degrades to keywords
        log.warning("query_embedding_failed", model=embedder.model, error=str(exc))
        return None


# -- focus_question: the words worth searching for, and the labels ------------------------
# Names mislead both keyword and vector search in a conversation. The user's own name:
# the user seldom says it, the assistant says it all the time ("Thanks, Caroline!"), so
# it finds the assistant's pleasantries; it becomes the label "said by the user"
# instead. And a name in a large share of the stored events — the other person's, which
# the user says in greetings and thanks — is left out of the words searched and of the
# text embedded (unless nothing else is left). Only words written as names: a topic
# that fills a small memory ("the garden project") must still be searched for. On
# LoCoMo's development conversations (tests/bench/locomo.py, the product's stored
# form), fusion recall@10 of events went from 0.654 without either to 0.762 with both
# and the labels stream (leaving out every common word, not only names: 0.761). A
# name is common from COMMON_SHARE of the events: 0.05: 0.743, 0.075: 0.744, 0.1:
# 0.749, 0.15: 0.736, 0.2: 0.736 (measured before the rule on naming someone else).
COMMON_SHARE = 0.1
# ... and never a word in fewer events than this: a small memory has no common words.
COMMON_MIN_ROWS = 50

# The profile keys that say how the user writes: their name, and their locale (numeric
# dates month first in a US one: app/recall/event_labels.py, month_first).
_PROFILE_SQL = ("SELECT key, value FROM profile WHERE user_id = ? AND key IN ('name', 'locale') "
                "AND deleted_at IS NULL")


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    kept, at = [], 0
    for start, end in sorted(spans):
        kept.append(text[at:start])
        at = max(at, end)
    kept.append(text[at:])
    return " ".join("".join(kept).split())


# Between two names, what joins them into one subject: "Jon and Gina", "Jon & Gina's".
_TOGETHER = re.compile(r"\s*(?:,|and|&|or)\s*", re.IGNORECASE)


def _asked_about(text: str, user: tuple[tuple[int, int], ...],
                 assistant: list[tuple[int, int]]) -> str | None:
    """The speaker a question naming both is asked about: the one it names first ("What
    did Jon say to Gina?", "What does Gina think of Jon's studio?"), unless it names the
    two together ("What do Jon and Gina both like?": either may have said it). LoCoMo
    development: 51 of the 76 questions naming both speakers name one first, and 61 of
    their 73 evidence turns were said by that one."""
    if not user or not assistant:
        return None
    named = sorted([(*span, "user") for span in user] + [(*span, "assistant")
                                                         for span in assistant])
    first_end, first = named[0][1:]
    second_start = next(start for start, _, role in named if role != first)
    return None if _TOGETHER.fullmatch(text[first_end:second_start]) else first


def _speaker_labels(labels: LabelQuery | None, assistant: bool, others: bool,
                    asked_about: str | None) -> LabelQuery | None:
    """The labels of a question that names the assistant (by the name the user calls it)
    or someone common in the memory besides the user: the assistant's words when it names
    only the assistant; when it names both speakers, the words of the one it is asked
    about (`asked_about`, None: either); no speaker when it names someone else."""
    times = labels.times if labels is not None else ()
    role = labels.role if labels is not None else None
    if assistant and role is None and not others:
        return LabelQuery(times, "assistant")
    if asked_about is not None and not others:
        return LabelQuery(times, asked_about)
    # Someone the user talks with or about: a question naming them as well as the user
    # is about both, not only what the user said.
    return LabelQuery(times) if times else None


def focus_question(con: apsw.Connection, user_id: str, text: str,
                   now: datetime | None = None, *,
                   recall: Recall) -> tuple[str, LabelQuery | None]:
    """The words of the question worth searching for, and its labels (the words' counts
    cached in `recall`)."""
    profile = dict(con.execute(_PROFILE_SQL, (user_id,)).fetchall())
    read = read_question(text, now or datetime.now(UTC),
                         [profile["name"]] if "name" in profile else [],
                         month_first=month_first(profile.get("locale")))
    labels = read.labels
    # The assistant's name, as the user's: said all the time, it would find greetings.
    candidates = [m for m in names_in(text)
                  if not any(start <= m.start() < end for start, end in read.name_spans)]
    rows = rows_holding(con, recall.term_counts, "event", [])[0] if candidates else 0
    assistant = [m.span() for m in candidates
                 if recall.address_book.names_the_assistant(con, user_id, m.group(), rows)]
    spans = [*read.name_spans, *assistant]
    searched = _without(text, spans) if spans else text
    words = terms(searched)
    common: list[str] = []
    names: list[re.Match] = []
    if words:
        rows, counts = rows_holding(con, recall.term_counts, "event", words)
        floor = max(COMMON_MIN_ROWS, COMMON_SHARE * rows)
        common = [w for w in words if counts[w] >= floor]
    if common:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, common)) + r")\b",
                             re.IGNORECASE)
        names = [m for m in pattern.finditer(searched)
                 if m.group()[0].isupper() and m.start() > 0]
        searched = _without(searched, [m.span() for m in names])
    if assistant or names:
        labels = _speaker_labels(labels, bool(assistant), bool(names),
                                 _asked_about(text, read.name_spans, assistant))
    if not terms(searched):  # nothing left to search for: better the words than none
        searched = text
    return searched, labels
