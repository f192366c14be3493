"""compact: a session's oldest events folded into context cards.

While a session has at least `compaction_threshold` un-compacted events, its oldest
`chunk_size` become one card — a one–two sentence technical summary plus keywords,
from the model as JSON — indexed by FTS5 (triggers), and those events are marked
compacted with the card's id, all in one transaction. That transaction re-checks the
chunk is still un-compacted (and the unique index cards_one_per_chunk backs it), so
two workers on one session never make two cards of one chunk. The task wrapper adds
a per-session lock so they rarely even try.

Degraded path (`extractive=True`): the card quotes the chunk instead (is_extractive=1),
and consolidate re-summarises it when the model is back.

A card of a chunk holding content from outside (a tool's result, a reply that read one)
is itself from outside, and the summariser is shown that content quoted
(app/learn/quoting.py).

"system" events are instructions (a scheduled task's prompt), not the user speaking: the
model is told so, and a quoted card leaves them out, so a task's card says what its
runs found, not "the user said: check in briefly".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw

from app.config import Config
from app.events import mark_compacted
from app.learn import extractive
from app.learn.distill import held_by, where_held
from app.learn.model_output import CardOutput, ask_json, parse_output
from app.learn.quoting import learning_line
from app.learn.reading import reading
from app.memory import NewCard, add_card, is_outside
from app.model.client import ModelClient
from app.model.replies import SentChat
from app.model.tool_calls import text_with_tool_calls
from app.writer import Writer

__all__ = ["WORKER", "MAX_EVENT_CHARS", "MAX_CHUNKS_PER_RUN", "CARD_SCHEMA", "SYSTEM",
           "INSTRUCTIONS", "REFERRING_INSTRUCTIONS", "LABELS", "ChunkEvent", "CardText",
           "next_chunk", "summarise", "parse_card", "extractive_card", "write_card",
           "compact_session"]

WORKER = "compact"
MAX_EVENT_CHARS = 3000
# A session cannot need more chunks than this in one run; a guard against a loop.
MAX_CHUNKS_PER_RUN = 10_000

CARD_SCHEMA: dict[str, Any] = CardOutput.format_schema()

SYSTEM = "You compress chat history into short technical notes. Answer with JSON only."
INSTRUCTIONS = """\
Summarise this part of a conversation in one or two sentences: technical and specific
(names, versions, commands, decisions, outcomes). Add 3 to 5 keywords someone would
search for to find it again. INSTRUCTIONS lines (a scheduled task's prompt) say what the
assistant was asked to do; they are not the user speaking: summarise what was found.

"""
REFERRING_INSTRUCTIONS = """\
Summarise a part of the conversation above in one or two sentences: technical and specific
(names, versions, commands, decisions, outcomes). Add 3 to 5 keywords someone would search
for to find it again. The part to summarise is {where}."""
# How each role's lines are labelled for the model.
LABELS = {"user": "USER", "assistant": "ASSISTANT", "tool": "TOOL",
          "system": "INSTRUCTIONS (not the user speaking)"}


@dataclass(frozen=True)
class ChunkEvent:
    id: int
    role: str
    content: str
    importance: float
    tool_name: str | None = None
    tool_calls_json: str | None = None
    from_outside: bool = False
    replaced: bool = False  # a reply the client regenerated: never summarised

    @property
    def line(self) -> str:
        """The event as the summariser reads it: a tool result names its tool, an
        assistant's tool calls say what was called."""
        label = LABELS.get(self.role, self.role.upper())
        if self.role == "tool" and self.tool_name:
            label = f"{label} ({self.tool_name})"
        text = text_with_tool_calls(self.content, self.tool_calls_json)[:MAX_EVENT_CHARS]
        return learning_line(label, self.role, text, self.from_outside)


@dataclass(frozen=True)
class CardText:
    summary: str
    keywords: str
    is_extractive: bool = False


def next_chunk(con: apsw.Connection, config: Config, user_id: str,
               session_id: str) -> list[ChunkEvent] | None:
    """The oldest chunk_size un-compacted events, when the session is over the threshold."""
    threshold, size = config.memory.compaction_threshold, config.memory.chunk_size
    rows = [ChunkEvent(*row[:6], from_outside=bool(row[6]), replaced=bool(row[7]))
            for row in con.execute(
        "SELECT id, role, content, importance, tool_name, tool_calls_json, from_outside, "
        "superseded_by IS NOT NULL FROM events "
        "WHERE user_id = ? AND session_id = ? "
        "AND compacted = 0 ORDER BY id LIMIT ?", (user_id, session_id, threshold))]
    return rows[:size] if len(rows) >= threshold else None


def summarise(model: ModelClient, events: list[ChunkEvent], after: SentChat | None = None,
              yield_to: Callable[[], bool] | None = None) -> CardText:
    """The chunk's card; after a chat that holds the chunk, the question says where it is
    rather than quoting it again (distill.held_by). A replaced reply is never summarised."""
    held = held_by(after, events)
    if held is not None:
        prompt = REFERRING_INSTRUCTIONS.format(where=where_held(events, held))
    else:
        prompt = INSTRUCTIONS + "\n".join(e.line for e in events if not e.replaced)
    raw, text = ask_json(model, WORKER, prompt, CARD_SCHEMA, SYSTEM, after, yield_to)
    return parse_card(raw, text)


def parse_card(raw: dict | list, text: str = "") -> CardText:
    card = parse_output(CardOutput, WORKER, raw, text)
    return CardText(card.summary, ", ".join(card.keywords))


def extractive_card(events: list[ChunkEvent]) -> CardText:
    # What the chunk says, without the instructions it answered (unless that is all of it).
    events = [e for e in events if not e.replaced] or events
    said = [e for e in events if e.role != "system"] or events
    texts = [(e.role if not (e.from_outside and e.role == "user") else "quoted from outside",
              text_with_tool_calls(e.content, e.tool_calls_json)) for e in said]
    return CardText(extractive.quote_lines(texts), ", ".join(extractive.keywords(t for _, t in texts)),
                    is_extractive=True)


def write_card(con: apsw.Connection, user_id: str, session_id: str, events: list[ChunkEvent],
               card: CardText) -> int | None:
    """Store the card and mark its events, unless another run already compacted them."""
    ids = [e.id for e in events]
    marks = ",".join("?" * len(ids))
    (still_open,) = con.execute(
        f"SELECT count(*) FROM events WHERE user_id = ? AND session_id = ? AND compacted = 0 "
        f"AND id IN ({marks})", (user_id, session_id, *ids)).fetchone()
    if still_open != len(ids):
        return None
    new_card = NewCard(session_id=session_id, summary=card.summary, keywords=card.keywords,
                       first_event_id=ids[0], last_event_id=ids[-1], event_count=len(ids),
                       is_extractive=card.is_extractive,
                       importance=max(e.importance for e in events),
                       from_outside=is_outside("hilo", reading=(e.from_outside for e in events)))
    card_id = add_card(con, user_id, new_card, worker=WORKER, source_event_id=ids[-1])
    if card_id is None:  # cards_one_per_chunk: this chunk already has its card
        return None
    mark_compacted(con, ids, card_id)
    return card_id


def compact_session(writer: Writer, model: ModelClient | None, config: Config, user_id: str,
                    session_id: str, *, extractive: bool = False,
                    said_before: str | None = None) -> list[int]:
    """Cards until the session is below the threshold (with `said_before`, RFC 3339: of
    the chunks whose every event was stored before then); returns the new cards' ids.

    Raises ModelError / InvalidOutput (to be retried) unless `extractive`.
    """
    written: list[int] = []
    for _ in range(MAX_CHUNKS_PER_RUN):
        with reading(writer) as con:
            events = next_chunk(con, config, user_id, session_id)
            if events is not None and said_before is not None:
                (last_at,) = con.execute("SELECT created_at FROM events WHERE id = ?",
                                         (events[-1].id,)).fetchone()
                events = events if last_at < said_before else None
        if events is None:
            break
        card = extractive_card(events) if extractive or model is None else summarise(model, events)
        card_id = writer.submit(lambda con: write_card(con, user_id, session_id, events, card))  # noqa: B023 — submit() waits for it
        if card_id is not None:
            written.append(card_id)
    return written
