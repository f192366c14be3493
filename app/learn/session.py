"""learn: a session's turns → profile, facts and context cards, in as few model calls as
the work needs.

The distill and compact jobs both run this, once the conversation is idle
(workers/chat_activity.py), so a conversation's turns are learned together rather than
one model call per turn:

- the latest turns, those no chunk due for its card holds, get one call for their facts,
  first: what was said last is what a new conversation is likeliest to ask about;
- while the session has `compaction_threshold` un-compacted events, its oldest
  `chunk_size` are one chunk, and ONE call returns the chunk's profile attributes and
  facts (distill's rules: taken from the user's words, the assistant's are context) and
  its card (compact's summary and keywords) — a chunk already distilled gets its card
  alone.

So a conversation costs about one call per chunk (default 8 events: four turns), plus
one for its tail each time it goes idle. A chunk's facts, its events' distilled marks,
its card and its events' compacted marks commit in one transaction, which re-checks
that neither was done by another run (distill.store_extraction, compact.write_card).
A chunk that holds turns an earlier call already learned from (the tail of an earlier
idle gap) shows them as context only, so no turn's facts are asked for twice.

An answer with nothing usable is asked again once, at once; a second unusable answer
ends the run's model calls — the model is not writing usable JSON now — and what is left
of the session gets the fallback (learn_by_rules: explicit statements by rule, cards that
quote their chunk), so no later job asks the same again. A call cut at its own budget
(its output limit or its deadline: app/model/usage.py) ends them at once: asked again at
temperature 0.1, the model loops the same way, for the whole budget again.

A call the model client refuses because learning has used its share of the engine
(ShareSpent, app/learn/engine_time.py) ends the run's model calls too (LearnResult.held):
what is left waits for credit, and the worker learns by rule what has waited too long
(learn_by_rules with `said_before`).

Before each call, `go_on()` is asked whether to make it (the person may be back), and
a call in progress gives way the moment it says no: the run stops where it is, and what
is left is the next run's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import apsw

from app.config import Config
from app.learn.compact import (
    MAX_CHUNKS_PER_RUN,
    CardText,
    ChunkEvent,
    compact_session,
    next_chunk,
    summarise,
    write_card,
)
from app.learn.distill import (
    SYSTEM,
    WORKER,
    DistillResult,
    Extraction,
    capture_turn,
    distill_turn,
    keep_grounded,
    learned_from_outside,
    learning_prompt,
    needs_compaction,
    store_extraction,
    turn_events,
    undistilled_in_session,
    voices_of,
)
from app.learn.model_output import (
    ChunkOutput,
    InvalidOutput,
    ask_json,
    items_for,
    parse_output,
)
from app.learn.reading import reading
from app.model.client import ModelClient
from app.model.errors import ModelCallYielded, OverBudget, ShareSpent
from app.model.replies import SentChat
from app.timeutil import parse_rfc3339
from app.writer import Writer

__all__ = ["T", "CHUNK_JOB", "CARD_ALSO", "LearnResult", "waiting_since", "learn_session",
           "latest_undistilled", "learn_by_rules", "keep_said_by_rule"]

T = TypeVar("T")

# The job name a chunk's call is recorded under (its facts and its card at once).
CHUNK_JOB = "learn"
CARD_ALSO = """\
- "summary": this part of the conversation in one or two sentences, technical and specific
  (names, versions, commands, decisions, outcomes);
- "keywords": 3 to 5 words someone would search for to find it again."""


@dataclass
class LearnResult:
    calls: int = 0  # model calls made
    cards: int = 0
    facts: int = 0  # facts written (inserted or updated)
    events: int = 0  # events marked distilled
    stopped: bool = False  # go_on() said no before the work was done
    unusable: list[str] = field(default_factory=list)  # why answers could not be used
    fell_back: bool = False  # two unusable answers in a row: the rest learned by rule
    held: bool = False  # learning's share of the engine is spent: the rest waits for credit


def waiting_since(con: apsw.Connection, config: Config, user_id: str,
                  session_id: str) -> float | None:
    """When the session's oldest unlearned event was stored (Unix time); None when
    nothing is left to learn."""
    (oldest,) = con.execute(
        "SELECT min(created_at) FROM events WHERE user_id = ? AND session_id = ? "
        "AND distilled_at IS NULL", (user_id, session_id)).fetchone()
    if oldest is None and needs_compaction(con, config, user_id, session_id):
        (oldest,) = con.execute(
            "SELECT min(created_at) FROM events WHERE user_id = ? AND session_id = ? "
            "AND compacted = 0", (user_id, session_id)).fetchone()
    return None if oldest is None else parse_rfc3339(oldest).timestamp()


def learn_session(writer: Writer, model: ModelClient, config: Config, user_id: str,
                  session_id: str, *, go_on: Callable[[], bool] | None = None,
                  interrupted: Callable[[], bool] | None = None,
                  after: SentChat | None = None) -> LearnResult:
    """Learn what the session has not: its latest turns' facts, then its chunks (facts and
    card in one call each), then anything still undistilled. Raises ModelError to be
    retried; what was written before stays written; unusable answers: see the module.
    With `after` (the session's last chat, still in the model server's cache), each
    question is asked as the next message of that chat: the model reads only the question
    anew, and the chat's cache is still there for the person.

    `go_on()`, when given, is asked before each call; `interrupted()` (by default: not
    go_on()) is watched during it, and a call in progress when it says yes gives way at
    once (the server stops working on it)."""
    result = LearnResult()
    steps = _Steps(model, go_on, interrupted, after, result)
    try:
        _learn(writer, config, user_id, session_id, steps)
    except ModelCallYielded:
        result.stopped = True
    except ShareSpent:
        result.held = True
    if result.fell_back:
        fallback = learn_by_rules(writer, config, user_id, session_id)
        result.cards += fallback.cards
        result.events += fallback.events
        result.facts += fallback.facts
    return result


@dataclass
class _Steps:
    """How a run asks the model, and whether it may."""

    model: ModelClient
    go_on: Callable[[], bool] | None
    interrupted: Callable[[], bool] | None
    after: SentChat | None
    result: LearnResult

    def may_go_on(self) -> bool:
        if self.go_on is None or self.go_on():
            return True
        self.result.stopped = True
        return False

    def yield_to(self) -> Callable[[], bool] | None:
        go_on = self.go_on
        if self.interrupted is not None or go_on is None:
            return self.interrupted
        return lambda: not go_on()

    def answer(self, ask: Callable[[], T]) -> T | None:
        """ask() the model, and once more if its answer is unusable; None after a second
        unusable one, or after a call cut at its budget, when the run falls back
        (LearnResult.fell_back)."""
        for _ in range(2):
            try:
                answered = ask()
            except InvalidOutput as exc:
                self.result.calls += 1
                self.result.unusable.append(str(exc))
                continue
            except OverBudget as exc:
                self.result.calls += 1
                self.result.unusable.append(str(exc))
                break
            self.result.calls += 1  # calls answered; one given way is not counted
            return answered
        self.result.fell_back = True
        return None


def _learn(writer: Writer, config: Config, user_id: str, session_id: str, steps: _Steps) -> None:
    # The latest turns first: what was said last is what a new conversation asks about.
    with reading(writer) as con:
        latest = latest_undistilled(con, config, user_id, session_id)
    if latest and not _distill(writer, config, user_id, session_id, latest, steps):
        return
    for _ in range(MAX_CHUNKS_PER_RUN):
        with reading(writer) as con:
            chunk = next_chunk(con, config, user_id, session_id)
        if chunk is None:
            break
        if not steps.may_go_on():
            return
        _learn_chunk(writer, config, user_id, session_id, chunk, steps)
        if steps.result.fell_back:
            return
    with reading(writer) as con:
        rest = undistilled_in_session(con, user_id, session_id)
    if rest:
        _distill(writer, config, user_id, session_id, rest, steps)


def latest_undistilled(con: apsw.Connection, config: Config, user_id: str,
                       session_id: str) -> list[int]:
    """The undistilled events no chunk due for its card holds: the session's latest."""
    uncompacted = [row[0] for row in con.execute(
        "SELECT id FROM events WHERE user_id = ? AND session_id = ? AND compacted = 0 "
        "ORDER BY id", (user_id, session_id))]
    threshold, size = config.memory.compaction_threshold, config.memory.chunk_size
    chunked = 0
    while len(uncompacted) - chunked >= threshold:
        chunked += size
    latest = set(uncompacted[chunked:])
    return [i for i in undistilled_in_session(con, user_id, session_id) if i in latest]


def _distill(writer: Writer, config: Config, user_id: str, session_id: str,
             event_ids: list[int], steps: _Steps) -> bool:
    """Facts of these events in one call; False when the run may not go on."""
    if not steps.may_go_on():
        return False
    with reading(writer) as con:
        sources = [e for e in turn_events(con, user_id, session_id, event_ids)
                   if e.role in voices_of(session_id).sources]

    def ask() -> DistillResult:
        return distill_turn(writer, steps.model, config, user_id, session_id, event_ids,
                            steps.after, steps.yield_to())

    learned = steps.answer(ask) if sources else ask()  # no source: marked, no call
    if learned is None:
        return False
    _count(steps.result, learned)
    return True


def _learn_chunk(writer: Writer, config: Config, user_id: str, session_id: str,
                 chunk: list[ChunkEvent], steps: _Steps) -> None:
    model, after, result = steps.model, steps.after, steps.result
    ids = [e.id for e in chunk]
    with reading(writer) as con:
        undistilled = {e.id for e in turn_events(con, user_id, session_id, ids,
                                                 undistilled_only=True)}
        events = turn_events(con, user_id, session_id, ids)
    voices = voices_of(session_id)
    # Turns an earlier call learned from are context: their facts are stored already.
    known = frozenset(e.id for e in events if e.id not in undistilled)
    extraction, dropped = Extraction(), 0
    sourced = [e for e in events if e.role in voices.sources and e.id in undistilled]
    if sourced:
        prompt = learning_prompt(events, voices, also=CARD_ALSO, learned=known, chat=after)
        schema = ChunkOutput.format_schema(items_for(len(sourced)))

        def ask() -> ChunkOutput:
            raw, text = ask_json(model, CHUNK_JOB, prompt, schema, SYSTEM, after,
                                 steps.yield_to())
            return parse_output(ChunkOutput, WORKER, raw, text)

        output = steps.answer(ask)
        if output is None:
            return
        extraction, refused = keep_grounded(
            Extraction(profile=output.profile,
                       facts=[(f.category, f.key, f.value) for f in output.facts]),
            events, voices, known, also=CARD_ALSO)
        dropped = len(refused)
        card = CardText(output.summary, ", ".join(output.keywords))
    else:
        answered = steps.answer(lambda: summarise(model, chunk, after, steps.yield_to()))
        if answered is None:
            return
        card = answered
    sources = [e.id for e in events if e.role in voices.sources]
    source_event_id = sources[-1] if sources else None
    similarity = config.memory.dedupe_similarity
    pending = sorted(undistilled)
    outside = learned_from_outside(events, session_id)

    def write(con: apsw.Connection) -> tuple[DistillResult, int | None]:
        learned = store_extraction(con, user_id, session_id, pending, extraction, WORKER,
                                   source_event_id, similarity, from_outside=outside)
        return learned, write_card(con, user_id, session_id, chunk, card)

    learned, card_id = writer.submit(write)
    learned.dropped += dropped
    _count(result, learned)
    result.cards += card_id is not None


def _count(result: LearnResult, learned: DistillResult) -> None:
    result.events += learned.events
    result.facts += sum(1 for _, _, action in learned.facts if action in ("insert", "update"))


def keep_said_by_rule(writer: Writer, config: Config, user_id: str, session_id: str) -> int:
    """While the session's turns wait for learning's share of the engine: their explicit
    statements ("remember that …", "my name is …") kept by rule at once, the turns left
    for the model (its run keeps the same items again, unchanged); the items written."""
    with reading(writer) as con:
        rest = undistilled_in_session(con, user_id, session_id)
    kept = capture_turn(writer, config, user_id, session_id, rest, mark=False)
    return len(kept.profile) + sum(1 for *_, action in kept.facts if action in ("insert", "update"))


def learn_by_rules(writer: Writer, config: Config, user_id: str, session_id: str,
                   said_before: str | None = None) -> LearnResult:
    """The fallback: explicit statements captured by rule, cards that quote their chunk;
    with `said_before` (RFC 3339), only of the events stored before then (those that have
    waited too long for learning's share of the engine)."""
    with reading(writer) as con:
        rest = undistilled_in_session(con, user_id, session_id)
        if said_before is not None and rest:
            marks = ",".join("?" * len(rest))
            rest = [row[0] for row in con.execute(
                f"SELECT id FROM events WHERE id IN ({marks}) AND created_at < ? ORDER BY id",
                (*rest, said_before))]
    result = LearnResult()
    _count(result, capture_turn(writer, config, user_id, session_id, rest))
    result.cards = len(compact_session(writer, None, config, user_id, session_id,
                                       extractive=True, said_before=said_before))
    return result
