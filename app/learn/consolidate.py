"""consolidate: the periodic tidy-up (every consolidation_interval_hours).

- counts what the turns recalled since the last count into each fact's and card's
  access_count (app/turn/records.py: the worker's reconcile sweep does it every minute
  too), so the rules below read real counts.
- merges duplicate facts: a current fact whose words another current fact of the same
  category covers is superseded by it (kept as history, logged). Solutions and
  preferences merge only when their text is the same; frequently read facts (recalled
  FREQUENTLY_READ times) are never merged away.
- folds level-0 cards older than 30 days into level-1 cards (folded_into).
- decays importance with a half-life, for items not read since the last decay; never
  below a floor: higher for read items, highest for solutions, preferences and
  frequently read facts. Nothing is ever deleted.
- re-summarises extractive cards and diary entries written while the model was down.
- merges the full-text indexes' segments, in small steps (each its own short write, so a
  chat's message waits for one step at most): a query reads every segment.

Every step is safe to repeat: merged and folded rows are no longer candidates, and the
decay is skipped when less than half an interval passed since `last_decay_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import apsw

from app.config import Config
from app.db import FTS_TABLES, merge_fts_segments
from app.learn import compact, extractive
from app.learn.diary_entry import rewrite_extractive_diary
from app.learn.model_output import InvalidOutput, ask_json
from app.learn.quoting import OUTSIDE_NOTE
from app.learn.reading import reading
from app.log import get_logger
from app.memory import (
    Fact,
    ImportanceFloors,
    NewCard,
    decay_unread_importance,
    fold_cards,
    is_outside,
    list_facts,
    merge_facts,
    replace_extractive_card,
    similar_facts,
)
from app.model.client import ModelClient
from app.model.errors import ModelError
from app.timeutil import parse_rfc3339, to_rfc3339
from app.turn.records import fold_recall_counts
from app.writer import Writer

__all__ = ["log", "WORKER", "PROTECTED_CATEGORIES", "FREQUENTLY_READ", "FOLD_AFTER_DAYS",
           "FOLD_GROUP", "HALF_LIFE_DAYS", "FLOOR_PROTECTED", "FLOOR_READ", "FLOOR_UNREAD",
           "RESUMMARISE_BATCH", "FLOORS", "FOLD_INSTRUCTIONS", "ConsolidationReport",
           "merge_duplicate_facts", "decay_importance", "OldCard", "fold_old_cards",
           "resummarise_extractive", "FTS_MERGE_PAGES", "FTS_MERGE_MAX_STEPS", "merge_fts_indexes",
           "consolidate"]

log = get_logger(__name__)

WORKER = "consolidate"
PROTECTED_CATEGORIES = ("solution", "preference")
FREQUENTLY_READ = 3  # access_count from which a fact is never merged away
FOLD_AFTER_DAYS = 30
FOLD_GROUP = 8  # level-0 cards per level-1 card
HALF_LIFE_DAYS = 60.0
FLOOR_PROTECTED = 0.5
FLOOR_READ = 0.2
FLOOR_UNREAD = 0.05
RESUMMARISE_BATCH = 20
FLOORS = ImportanceFloors(protected_categories=PROTECTED_CATEGORIES, frequently_read=FREQUENTLY_READ,
                          protected=FLOOR_PROTECTED, read=FLOOR_READ, unread=FLOOR_UNREAD)

FOLD_INSTRUCTIONS = """\
These notes summarise older parts of conversations. Merge them into one or two
sentences that keep the technical specifics, and add 3 to 5 keywords.

"""


@dataclass
class ConsolidationReport:
    counted_turns: int = 0  # turn records folded into the recall counts
    merged_facts: int = 0
    folded_cards: int = 0
    new_cards: list[int] = field(default_factory=list)
    decayed: int = 0
    decayed_at: str | None = None  # when decay ran; pass back as last_decay_at next time
    resummarised: int = 0
    fts_merge_steps: int = 0


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


# -- duplicate facts ----------------------------------------------------------------------


def _merge_plan(con: apsw.Connection, user_id: str) -> list[tuple[int, list[int]]]:
    """(survivor id, duplicate ids) for one user."""
    plan = []
    by_category: dict[str, list[Fact]] = {}
    for fact in list_facts(con, user_id):
        by_category.setdefault(fact.category, []).append(fact)
    for category, facts in by_category.items():
        # Survivors first: the most read, then the most recent.
        facts.sort(key=lambda f: (f.access_count, f.updated_at), reverse=True)
        taken: set[int] = set()
        for survivor in facts:
            if survivor.id in taken:
                continue
            dupes = [f.id for f in facts if f.id != survivor.id and f.id not in taken
                     and f.access_count < FREQUENTLY_READ
                     and _normalised(f.value) == _normalised(survivor.value)]
            if category not in PROTECTED_CATEGORIES:
                for fact, _ in similar_facts(con, user_id, category,
                                             f"{survivor.key} {survivor.value}", exclude=survivor.id):
                    if (fact.id not in taken and fact.id not in dupes and fact.deleted_at is None
                            and fact.access_count < FREQUENTLY_READ):
                        dupes.append(fact.id)
            if dupes:
                taken.add(survivor.id)
                taken.update(dupes)
                plan.append((survivor.id, dupes))
    return plan


def _users(con: apsw.Connection) -> list[str]:
    return [u for (u,) in con.execute(
        "SELECT user_id FROM facts UNION SELECT user_id FROM context_cards")]


def merge_duplicate_facts(writer: Writer) -> int:
    merged = 0
    with reading(writer) as con:
        plans = [(user, plan) for user in _users(con) for plan in _merge_plan(con, user)]
    for user, (survivor, dupes) in plans:
        merged += writer.submit(lambda con: merge_facts(con, user, survivor, dupes,  # noqa: B023 — submit() waits for it
                                                        worker=WORKER))
    return merged


# -- decay --------------------------------------------------------------------------------


def decay_importance(writer: Writer, config: Config, *, now: datetime,
                     last_decay_at: str | None) -> tuple[int, str | None]:
    """Decay by the time since last_decay_at (one interval if never); (rows, decayed_at)."""
    interval = timedelta(hours=config.memory.consolidation_interval_hours)
    since = parse_rfc3339(last_decay_at) if last_decay_at else now - interval
    if now - since < interval / 2:
        return 0, None
    factor = 0.5 ** ((now - since).total_seconds() / 86400 / HALF_LIFE_DAYS)
    rows = writer.submit(lambda con: decay_unread_importance(
        con, factor=factor, since=to_rfc3339(since), floors=FLOORS))
    return rows, to_rfc3339(now)


# -- folding old cards -----------------------------------------------------------------------


@dataclass(frozen=True)
class OldCard:
    id: int
    session_id: str | None
    summary: str
    keywords: str
    first_event_id: int | None
    last_event_id: int | None
    event_count: int
    importance: float
    from_outside: bool = False


def _fold_groups(con: apsw.Connection, cutoff: str) -> list[tuple[str, list[OldCard]]]:
    groups = []
    for user in _users(con):
        cards = [OldCard(*row[:8], from_outside=bool(row[8])) for row in con.execute(
            "SELECT id, session_id, summary, keywords, first_event_id, last_event_id, event_count, "
            "importance, from_outside FROM context_cards WHERE user_id = ? AND level = 0 "
            "AND folded_into IS NULL "
            "AND created_at < ? ORDER BY created_at, id", (user, cutoff))]
        for start in range(0, len(cards), FOLD_GROUP):
            group = cards[start:start + FOLD_GROUP]
            if len(group) >= 2:  # a lone leftover waits for company
                groups.append((user, group))
    return groups


def _fold_text(model: ModelClient | None, cards: list[OldCard]) -> compact.CardText:
    if model is None:
        texts = [("earlier", c.summary) for c in cards]
        words = extractive.keywords([c.summary + " " + c.keywords for c in cards])
        return compact.CardText(extractive.quote_lines(texts, 600), ", ".join(words), True)
    notes = "\n".join(f"- {c.summary} ({c.keywords})" if not c.from_outside
                      else f"- {OUTSIDE_NOTE}: \"{c.summary}\" ({c.keywords})" for c in cards)
    raw, text = ask_json(model, WORKER, FOLD_INSTRUCTIONS + notes, compact.CARD_SCHEMA, compact.SYSTEM)
    return compact.parse_card(raw, text)


def _folded_card(cards: list[OldCard], card: compact.CardText) -> NewCard:
    sessions = {c.session_id for c in cards}
    firsts = [c.first_event_id for c in cards if c.first_event_id is not None]
    lasts = [c.last_event_id for c in cards if c.last_event_id is not None]
    return NewCard(session_id=sessions.pop() if len(sessions) == 1 else None,
                   summary=card.summary, keywords=card.keywords,
                   first_event_id=min(firsts, default=None), last_event_id=max(lasts, default=None),
                   event_count=sum(c.event_count for c in cards), level=1,
                   is_extractive=card.is_extractive, importance=max(c.importance for c in cards),
                   from_outside=is_outside("hilo", reading=(c.from_outside for c in cards)))


def fold_old_cards(writer: Writer, model: ModelClient | None, *, now: datetime,
                   extractive: bool = False) -> tuple[int, list[int]]:
    """(cards folded, new level-1 card ids). Raises model errors unless extractive."""
    cutoff = to_rfc3339(now - timedelta(days=FOLD_AFTER_DAYS))
    with reading(writer) as con:
        groups = _fold_groups(con, cutoff)
    folded, new = 0, []
    for user, cards in groups:
        card = _fold_text(None if extractive else model, cards)
        level_one = _folded_card(cards, card)
        card_id = writer.submit(lambda con: fold_cards(con, user, level_one,  # noqa: B023 — submit() waits for it
                                                       [c.id for c in cards], worker=WORKER))  # noqa: B023 — submit() waits for it
        if card_id is not None:
            folded += len(cards)
            new.append(card_id)
    return folded, new


# -- re-summarising what was written without the model ------------------------------------------


def resummarise_extractive(writer: Writer, model: ModelClient, limit: int = RESUMMARISE_BATCH) -> int:
    """Best effort: stops quietly at the first model failure (the next run tries again)."""
    done = 0
    with reading(writer) as con:
        cards = list(con.execute("SELECT id, level FROM context_cards WHERE is_extractive = 1 "
                                 "AND folded_into IS NULL ORDER BY id LIMIT ?", (limit,)))
        chunks = {card_id: [compact.ChunkEvent(*r) for r in con.execute(
            "SELECT id, role, content, importance, tool_name, tool_calls_json FROM events "
            "WHERE card_id = ? ORDER BY id",
            (card_id,))] for card_id, level in cards if level == 0}
        children = {card_id: [OldCard(*r) for r in con.execute(
            "SELECT id, session_id, summary, keywords, first_event_id, last_event_id, event_count, "
            "importance FROM context_cards WHERE folded_into = ? ORDER BY id", (card_id,))]
            for card_id, level in cards if level > 0}
        diaries = list(con.execute("SELECT user_id, session_id FROM diary WHERE is_extractive = 1 "
                                   "ORDER BY id LIMIT ?", (limit,)))
    try:
        for card_id, level in cards:
            source = chunks.get(card_id) or children.get(card_id)
            if not source:
                continue
            card = (compact.summarise(model, source) if level == 0 else _fold_text(model, source))
            done += writer.submit(lambda con: replace_extractive_card(
                con, card_id, card.summary, card.keywords, worker=WORKER))  # noqa: B023 — submit() waits for it
        for user_id, session_id in diaries:
            done += rewrite_extractive_diary(writer, model, user_id, session_id)
    except (ModelError, InvalidOutput) as exc:
        log.info("consolidate.resummarise_later", error=str(exc), done=done)
    return done


# -- the job ------------------------------------------------------------------------------


# -- full-text index segments ---------------------------------------------------------------

# Pages of merging per write: at 10^6 events a step takes some tens of milliseconds.
FTS_MERGE_PAGES = 100
# Enough for a first merge of a 10^6-event index; the next runs only meet the new segments.
FTS_MERGE_MAX_STEPS = 5_000


def merge_fts_indexes(writer: Writer) -> int:
    """Merge each full-text index's segments, one short write per step; the steps taken."""
    steps = 0
    for table in FTS_TABLES:
        while steps < FTS_MERGE_MAX_STEPS and writer.submit(
                lambda con, table=table: merge_fts_segments(con, table, FTS_MERGE_PAGES)):
            steps += 1
    return steps


def consolidate(writer: Writer, model: ModelClient | None, config: Config, *,
                now: datetime | None = None, last_decay_at: str | None = None,
                record_decay: Callable[[str], None] | None = None,
                extractive: bool = False) -> ConsolidationReport:
    """All of the above, model-free steps first. Raises model errors from folding unless extractive.

    `record_decay(decayed_at)` is called as soon as the decay is committed, so a retry
    after a failed fold does not decay twice.
    """
    now = now or datetime.now(UTC)
    report = ConsolidationReport()
    report.counted_turns = fold_recall_counts(writer)
    report.merged_facts = merge_duplicate_facts(writer)
    report.decayed, report.decayed_at = decay_importance(writer, config, now=now,
                                                         last_decay_at=last_decay_at)
    if report.decayed_at and record_decay is not None:
        record_decay(report.decayed_at)
    report.folded_cards, report.new_cards = fold_old_cards(
        writer, model, now=now, extractive=extractive or model is None)
    if model is not None and not extractive:
        report.resummarised = resummarise_extractive(writer, model)
    report.fts_merge_steps = merge_fts_indexes(writer)
    return report
