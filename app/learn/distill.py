"""distill: after each reply, the turn's permanent profile attributes and dated facts.

The model gets the turn with a JSON schema in `format` at temperature 0.1. Facts about
the user come from user turns and tool results only: the assistant's text is shown as
context. An extracted item is kept only when one source message supports it, and that
message is its provenance (app/learn/grounding.py: the model's inventions, the
instruction's examples and the assistant's words are dropped, and what the rules take
from the same messages is kept beside). Output is parsed leniently and validated item
by item; nothing invalid is written.

A scheduled task's run (session `task:<id>`) is the other way round: its prompt,
stored as "system", is what the task was told to do, not the user speaking, so it is
the context; what the run found — the reply and the tool results — is the source.

What is learned from a turn any of whose messages shown to the model is content from
outside — a tool's result, a client's history, documents a client retrieved, a reply
written reading one, an import — is from outside itself, and such messages are shown
quoted, never as the user's line (app/learn/quoting.py).

Writes and the events' distilled_at mark share one transaction, and the write first
re-checks which events are still undistilled, so a second run does nothing.
`capture_turn` is the degraded path: rule-based capture of explicit statements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import apsw

from app.config import Config
from app.events import mark_distilled
from app.learn.grounding import Dropped, by_rule, covers, judge
from app.learn.model_output import DistillOutput, ask_json, items_for, parse_output
from app.learn.quoting import learning_line
from app.learn.reading import reading
from app.log import get_logger
from app.memory import InvalidMemory, is_outside, set_profile, store_fact
from app.model.client import ModelClient
from app.model.messages import message_text
from app.model.replies import SentChat
from app.model.tool_calls import text_with_tool_calls
from app.tasks.sessions import is_task_session
from app.writer import Writer

__all__ = ["log", "WORKER", "FALLBACK_WORKER", "MAX_EVENT_CHARS", "MAX_PROMPT_CHARS",
           "DISTILL_SCHEMA", "distill_schema", "SYSTEM", "WHAT_TO_LEARN", "INSTRUCTIONS",
           "TASK_INSTRUCTIONS", "Voices", "CONVERSATION", "TASK_RUN", "voices_of", "TurnEvent",
           "Extraction", "DistillResult", "undistilled_events", "turn_events",
           "undistilled_in_session", "needs_compaction", "LEARNED_LABEL", "LEARNED_NOTE",
           "build_prompt", "ANCHOR_WORDS", "Held", "Said", "held_by", "where_held",
           "referring_prompt", "learning_prompt", "parse_extraction", "keep_grounded",
           "learned_from_outside", "store_extraction", "distill_turn", "capture_turn"]

log = get_logger(__name__)

WORKER = "distill"
FALLBACK_WORKER = "distill-rules"
MAX_EVENT_CHARS = 4000
MAX_PROMPT_CHARS = 12_000

DISTILL_SCHEMA: dict[str, Any] = DistillOutput.format_schema()  # at its most: see distill_schema


def distill_schema(sources: int) -> dict[str, Any]:
    """The schema of a call that learns from `sources` source messages."""
    return DistillOutput.format_schema(items_for(sources))

SYSTEM = (
    "You keep the long-term memory of a chat assistant about its user. Answer with JSON "
    "only, matching the schema. Use empty lists when there is nothing worth remembering."
)

WHAT_TO_LEARN = """\
From the conversation below, extract what is worth remembering about the USER:
- "profile": permanent attributes of the user (name, location, language, job, ...), each a short key and its value;
- "facts": dated facts, each with a category (fact, decision, solution, preference, conversation),
  a short key naming what it is about (e.g. "editor", "staging database"), and the value.
"""
INSTRUCTIONS = WHAT_TO_LEARN + """\
Take facts only from USER and TOOL lines. ASSISTANT lines are context: never take a fact from them.

"""

TASK_INSTRUCTIONS = """\
Below is an unattended run of a scheduled task the user set up earlier. Extract what is worth
remembering from what the task found:
- "profile": permanent attributes of the user (name, location, language, job, ...), each a short key and its value;
- "facts": dated facts, each with a category (fact, decision, solution, preference, conversation),
  a short key naming what it is about (e.g. "backups", "weather in Lisbon"), and the value.
Take facts only from RESULT and TOOL lines. The TASK line is what the task was told to do, not
something the user said: never take a fact from it.

"""


@dataclass(frozen=True)
class Voices:
    """Which roles of a turn facts may come from, which are context only, and how the
    prompt labels each role."""

    sources: tuple[str, ...]
    context: tuple[str, ...]
    labels: dict[str, str]
    instructions: str


CONVERSATION = Voices(
    sources=("user", "tool"), context=("assistant",),
    labels={"user": "USER", "tool": "TOOL", "assistant": "ASSISTANT (context only)"},
    instructions=INSTRUCTIONS)
TASK_RUN = Voices(
    sources=("assistant", "tool"), context=("system",),
    labels={"system": "TASK (instructions, context only)", "tool": "TOOL", "assistant": "RESULT"},
    instructions=TASK_INSTRUCTIONS)


def voices_of(session_id: str) -> Voices:
    """A scheduled task's session learns from its results; any other from the user."""
    return TASK_RUN if is_task_session(session_id) else CONVERSATION


@dataclass(frozen=True)
class TurnEvent:
    id: int
    role: str
    content: str
    tool_name: str | None = None
    tool_calls_json: str | None = None  # an assistant's tool calls (app.model.messages' shape)
    from_outside: bool = False
    replaced: bool = False  # a reply the client regenerated: never learned from

    @property
    def text(self) -> str:
        """The content, and what tools the assistant called with what: evidence of what
        happened, as the results that follow are."""
        return text_with_tool_calls(self.content, self.tool_calls_json)


@dataclass
class Extraction:
    profile: dict[str, str] = field(default_factory=dict)
    facts: list[tuple[str, str, str]] = field(default_factory=list)  # (category, key, value)
    # Each item's supporting message: ("profile", key) or (category, key) → event id.
    support: dict[tuple[str, str], int] = field(default_factory=dict)
    by_rule: set[tuple[str, str]] = field(default_factory=set)  # items the rules found

    def __bool__(self) -> bool:
        return bool(self.profile or self.facts)


@dataclass
class DistillResult:
    events: int = 0  # events this run marked distilled; 0 when another run had done it
    profile: dict[str, str] = field(default_factory=dict)  # key -> write action
    facts: list[tuple[str, str, str]] = field(default_factory=list)  # (category, key, action)
    dropped: int = 0  # items refused by validation or grounding


# -- reading -----------------------------------------------------------------------------


def undistilled_events(con: apsw.Connection, user_id: str, session_id: str,
                       event_ids: list[int]) -> list[TurnEvent]:
    return turn_events(con, user_id, session_id, event_ids, undistilled_only=True)


def turn_events(con: apsw.Connection, user_id: str, session_id: str, event_ids: list[int],
                *, undistilled_only: bool = False) -> list[TurnEvent]:
    """The session's events among `event_ids`, oldest first."""
    if not event_ids:
        return []
    marks = ",".join("?" * len(event_ids))
    pending = "AND distilled_at IS NULL " if undistilled_only else ""
    return [TurnEvent(*row[:5], from_outside=bool(row[5]), replaced=bool(row[6]))
            for row in con.execute(
        f"SELECT id, role, content, tool_name, tool_calls_json, from_outside, "
        f"superseded_by IS NOT NULL FROM events "
        f"WHERE user_id = ? AND session_id = ? {pending}AND id IN ({marks}) ORDER BY id",
        (user_id, session_id, *event_ids))]


def undistilled_in_session(con: apsw.Connection, user_id: str, session_id: str) -> list[int]:
    """Ids of the session's events not distilled yet, oldest first."""
    return [row[0] for row in con.execute(
        "SELECT id FROM events WHERE user_id = ? AND session_id = ? AND distilled_at IS NULL "
        "ORDER BY id", (user_id, session_id))]


def needs_compaction(con: apsw.Connection, config: Config, user_id: str, session_id: str) -> bool:
    threshold = config.memory.compaction_threshold
    (count,) = con.execute(
        "SELECT count(*) FROM (SELECT 1 FROM events WHERE user_id = ? AND session_id = ? "
        "AND compacted = 0 LIMIT ?)", (user_id, session_id, threshold)).fetchone()
    return count >= threshold


# -- the model's part ----------------------------------------------------------------------


# How an event already learned from is shown beside new ones: as context, never a source.
LEARNED_LABEL = "EARLIER (already learned, context only)"
LEARNED_NOTE = "EARLIER lines were learned from before: never take a fact from them.\n"


def build_prompt(events: list[TurnEvent], voices: Voices = CONVERSATION, also: str = "",
                 learned: frozenset[int] = frozenset()) -> str:
    """The instructions (with `also` asked besides), then the turns, one labelled line each;
    the `learned` events' sources are labelled as context (their facts are stored)."""
    lines = []
    budget = MAX_PROMPT_CHARS
    for event in events:
        label = voices.labels.get(event.role)
        if label is None or event.replaced:
            continue
        if event.role == "tool" and event.tool_name:
            label = f"{label} ({event.tool_name})"
        if event.id in learned and event.role in voices.sources:
            label = f"{LEARNED_LABEL} {label}"
        text = event.text[:MAX_EVENT_CHARS]
        if len(text) > budget:
            text = text[:budget]
        lines.append(learning_line(label, event.role, text, event.from_outside))
        budget -= len(text)
        if budget <= 0:
            break
    instructions = voices.instructions
    if any(e.id in learned and e.role in voices.sources for e in events):
        also = LEARNED_NOTE + also
    if also:
        instructions = instructions.rstrip("\n") + "\n" + also.rstrip("\n") + "\n\n"
    return instructions + "\n".join(lines)


# The start of the first message a referring prompt points at, so a model finds it.
ANCHOR_WORDS = 8


@dataclass(frozen=True)
class Held:
    """Where the messages a learning call is about sit in the chat it continues: `count`
    messages, one after another, followed by `after` more."""

    count: int
    after: int


class Said(Protocol):
    """A stored message as a prompt shows it (TurnEvent, compact.ChunkEvent)."""

    role: str
    content: str
    from_outside: bool
    replaced: bool


def held_by(chat: SentChat | None, events: Sequence[Said],
            voices: Voices = CONVERSATION) -> Held | None:
    """Where all the events a prompt would show are in `chat` (its messages, then its
    reply), in order and one after another; None when some are not, or when one is
    content from outside (shown quoted, never as the user's words)."""
    shown = [e for e in events if e.role in voices.labels and not e.replaced]
    if (chat is None or voices is not CONVERSATION or not shown
            or any(e.from_outside for e in shown)):
        return None
    messages = [*chat.body.get("messages", []), {"role": "assistant", "content": chat.reply}]
    said = [(m.get("role"), " ".join(message_text(m).split())) for m in messages
            if isinstance(m, Mapping)]
    wanted = [(e.role, " ".join(e.content.split())) for e in shown]
    for start in range(len(said) - len(wanted), -1, -1):  # the latest place first
        if all(role == said[start + i][0] and text and said[start + i][1].endswith(text)
               for i, (role, text) in enumerate(wanted)):  # a memory note may go before
            return Held(len(wanted), len(said) - start - len(wanted))
    return None


def where_held(events: Sequence[Said], held: Held) -> str:
    """Where held messages are in the chat above, in words a model can follow: how many,
    how far from its end, and how the first of them begins."""
    first = next(e for e in events if e.role in CONVERSATION.labels and not e.replaced)
    anchor = " ".join(first.content.split()[:ANCHOR_WORDS])
    whose = {"user": "the user's message", "assistant": "the assistant's reply",
             "tool": "the tool result"}.get(first.role, "the message")
    where = (f"the last {held.count} messages above" if not held.after else
             f"{held.count} messages above, ending {held.after} messages before the last one")
    return f'{where}, from {whose} that begins "{anchor}"'


def referring_prompt(events: list[TurnEvent], held: Held, also: str = "",
                     learned: frozenset[int] = frozenset()) -> str:
    """The instructions for messages the chat above already holds: where they are, not
    their text again (the server's cache holds them; only this is read anew)."""
    earlier = sum(1 for e in events if e.id in learned and e.role in CONVERSATION.sources)
    return (WHAT_TO_LEARN.replace("the conversation below", "the conversation above")
            + (also.rstrip("\n") + "\n" if also else "")
            + f"\nThe conversation to learn from is {where_held(events, held)}. Take facts "
            "only from the user's messages and tool results among them; the assistant's are "
            "context: never take a fact from them."
            + (f" {earlier} of the user's messages among them were learned from before: take "
               "no facts from them." if earlier else ""))


def learning_prompt(events: list[TurnEvent], voices: Voices = CONVERSATION, also: str = "",
                    learned: frozenset[int] = frozenset(), chat: SentChat | None = None) -> str:
    """The prompt of a learning call about `events`: one that points at them when the
    chat it continues (`chat`) holds them all, else one that quotes them (build_prompt)."""
    held = held_by(chat, events, voices)
    if held is not None:
        return referring_prompt(events, held, also, learned)
    return build_prompt(events, voices, also, learned)


def parse_extraction(raw: dict | list, text: str = "") -> Extraction:
    """The model's JSON, validated item by item; InvalidOutput if it is not an extraction."""
    output = parse_output(DistillOutput, WORKER, raw, text)
    return Extraction(profile=output.profile,
                      facts=[(fact.category, fact.key, fact.value) for fact in output.facts])


def keep_grounded(extraction: Extraction, events: list[TurnEvent],
                  voices: Voices = CONVERSATION, learned: frozenset[int] = frozenset(),
                  also: str = "") -> tuple[Extraction, list[Dropped]]:
    """What of the model's extraction a source message supports, each item with that
    message (app/learn/grounding.py), and what the rules take from the same messages
    besides; an event in `learned` is context (what it said is stored already). `also`:
    what the prompt asked besides the instructions (its words are no support either)."""
    events = [e for e in events if not e.replaced]
    sources = [e for e in events if e.role in voices.sources and e.id not in learned]
    context = [e for e in events if e.role in voices.context or e.id in learned]
    items = [(("profile", k), k, v) for k, v in extraction.profile.items()]
    items += [((c, k), k, v) for c, k, v in extraction.facts]
    judged = judge(items, sources, context, f"{SYSTEM}\n{voices.instructions}\n{also}")
    kept = Extraction(
        profile={k: v for k, v in extraction.profile.items() if ("profile", k) in judged.supported_by},
        facts=[f for f in extraction.facts if (f[0], f[1]) in judged.supported_by],
        support=dict(judged.supported_by))
    if judged.dropped:
        log.info("learn.not_grounded", dropped=[f"{d.key}: {d.value} ({d.reason})"
                                                for d in judged.dropped])
    _add_rules(kept, sources)
    return kept, judged.dropped


def _add_rules(kept: Extraction, sources: list[TurnEvent]) -> None:
    """What the rules take from `sources` that the kept items do not say already."""
    for kind, category, key, value, event_id in by_rule(sources):
        said = [f"{k} {v}" for k, v in kept.profile.items()] + [f"{k} {v}" for _, k, v in kept.facts]
        if covers(said, value) or (kind == "profile" and key in kept.profile):
            continue  # ("city: Madrid" says what the rule's "location: Madrid" does)
        if kind == "profile":
            kept.profile[key] = value
            item = ("profile", key)
        else:
            kept.facts.append((category, key, value))
            item = (category, key)
        kept.support[item] = event_id
        kept.by_rule.add(item)


# -- writing -------------------------------------------------------------------------------


def learned_from_outside(events: list[TurnEvent], session_id: str) -> bool:
    """Whether what is learned from `events` comes from outside: one of the messages the
    model is shown (a source or context) is."""
    shown = voices_of(session_id).labels
    return is_outside("hilo", reading=(e.from_outside for e in events if e.role in shown))


def store_extraction(con: apsw.Connection, user_id: str, session_id: str, event_ids: list[int],
                     extraction: Extraction, worker: str, source_event_id: int | None,
                     similarity: float, from_outside: bool = True,
                     mark: bool = True) -> DistillResult:
    """Write what was extracted from `event_ids` and mark the ones still undistilled;
    nothing when another run marked them all first. `from_outside`: learned_from_outside.
    `mark=False`: the events stay for a later run to learn (their rules' items kept now)."""
    pending = [e.id for e in undistilled_events(con, user_id, session_id, event_ids)]
    if not pending:
        return DistillResult()  # another run got here first
    result = DistillResult(events=len(pending) if mark else 0)

    def provenance(item: tuple[str, str]) -> dict:
        """Who learned the item, and the message that supports it."""
        return {"worker": FALLBACK_WORKER if item in extraction.by_rule else worker,
                "source_event_id": extraction.support.get(item, source_event_id)}

    for key, value in extraction.profile.items():
        try:
            result.profile[key] = set_profile(con, user_id, key, value, source="agent",
                                              from_outside=from_outside,
                                              **provenance(("profile", key)))
        except InvalidMemory:
            result.dropped += 1
    for category, key, value in extraction.facts:
        try:
            action = store_fact(con, user_id, category, key, value, source="agent",
                                similarity=similarity, from_outside=from_outside,
                                **provenance((category, key))).action
        except InvalidMemory:
            result.dropped += 1
            continue
        result.facts.append((category, key, action))
    if mark:
        mark_distilled(con, pending)
    return result


def _write(writer: Writer, config: Config, user_id: str, session_id: str,
           events: list[TurnEvent], extraction: Extraction, worker: str,
           dropped: int = 0, mark: bool = True) -> DistillResult:
    sources = [e.id for e in events if e.role in voices_of(session_id).sources]
    source_event_id = sources[-1] if sources else None
    ids = [e.id for e in events]
    similarity = config.memory.dedupe_similarity
    outside = learned_from_outside(events, session_id)
    result = writer.submit(lambda con: store_extraction(con, user_id, session_id, ids, extraction,
                                                        worker, source_event_id, similarity,
                                                        from_outside=outside, mark=mark))
    result.dropped += dropped
    return result


def distill_turn(writer: Writer, model: ModelClient, config: Config, user_id: str,
                 session_id: str, event_ids: list[int], after: SentChat | None = None,
                 yield_to: Callable[[], bool] | None = None) -> DistillResult:
    """Extract and store the turn's memory; raises ModelError / InvalidOutput to be retried.
    `after`, `yield_to`: as model_output.ask_json takes them."""
    with reading(writer) as con:
        events = undistilled_events(con, user_id, session_id, event_ids)
    if not events:
        return DistillResult()
    extraction, dropped = Extraction(), []
    voices = voices_of(session_id)
    sources = sum(1 for e in events if e.role in voices.sources)
    if sources:
        raw, text = ask_json(model, WORKER, learning_prompt(events, voices, chat=after),
                             distill_schema(sources), SYSTEM, after, yield_to)
        extraction, dropped = keep_grounded(parse_extraction(raw, text), events, voices)
    return _write(writer, config, user_id, session_id, events, extraction, WORKER, len(dropped))


def capture_turn(writer: Writer, config: Config, user_id: str, session_id: str,
                 event_ids: list[int], mark: bool = True) -> DistillResult:
    """The fallback: explicit statements in the user's messages, by rule, no model.
    `mark=False`: kept now, the turns left for the model to learn later (store_extraction)."""
    with reading(writer) as con:
        events = undistilled_events(con, user_id, session_id, event_ids)
    if not events:
        return DistillResult()
    extraction = Extraction()
    for kind, category, key, value, event_id in by_rule(events):
        if kind == "profile":
            extraction.profile[key] = value
        else:
            extraction.facts.append((category, key, value))
        extraction.support[("profile", key) if kind == "profile" else (category, key)] = event_id
    return _write(writer, config, user_id, session_id, events, extraction, FALLBACK_WORKER,
                  mark=mark)
