"""The turn inspector's data, below the front-ends that render it (/memory/turns/{id} as
JSON, app/api/turn_records.py; /ui/turns/{id} as a page, app/ui/turns.py): one stored
turn, its record (app/turn/records.py) with every id looked up as the memory is now, and
the background jobs the turn caused.

A recalled item forgotten or corrected since shows as such, never with its old words as
current: a past message or card that said a fact the person has corrected since shows
with what the fact says now (app/memory/corrections.py), as the next prompt quotes it.
The jobs are read from where their work lands — an event distilled, summarised into a
card, embedded — and, for work not done yet, from the queue: pending, or failed with
its error (retried from the queue page).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apsw

from app.config import Config
from app.errors import NotFound
from app.events import Event, events_by_ids
from app.log import get_logger
from app.memory import cards_by_ids, get_fact
from app.memory.corrections import Correction, corrections_of
from app.turn.corrected import noted
from app.turn.records import TurnRecord, get_turn_record
from workers.inspection import QueueError, QueueView

__all__ = ["log", "Recalled", "TurnJob", "TurnView", "recalled_now", "turn_jobs", "turn_view",
           "inspect_turn"]

log = get_logger(__name__)


@dataclass
class Recalled:
    """One item recalled into the prompt, as the memory holds it now."""

    kind: str  # "fact", "card" or "event"
    id: int
    where: str  # "layers" (the system prompt), "stretch" (an earlier turn's), "note"
    why: str
    ranks: dict[str, int]
    score: float | None
    text: str | None  # None when it is gone
    # "current", "corrected since", "forgotten", "replaced" (a regenerated reply), "gone"
    state: str


@dataclass
class TurnJob:
    """A background job the turn caused, and how far it got."""

    name: str  # "distill", "compact", "embed"
    state: str  # "done", "pending", "failed", "not queued"
    detail: str
    job_id: str | None = None  # a failed job's, to retry it


@dataclass
class TurnView:
    record: TurnRecord
    message: Event | None
    reply: Event | None
    window: list[Event]
    recalled: list[Recalled]
    jobs: list[TurnJob] = field(default_factory=list)
    # Of the window's messages, those that said a fact corrected or forgotten since: how
    # a prompt shows them now (app/turn/corrected.py).
    corrected: dict[int, str] = field(default_factory=dict)

    @property
    def layers(self) -> list[dict]:
        return self.record.record["layers"]

    def to_dict(self) -> dict[str, Any]:
        def event(e: Event | None) -> dict | None:
            return None if e is None else {"id": e.id, "role": e.role, "content": e.content,
                                           "created_at": e.created_at,
                                           "corrected": self.corrected.get(e.id)}
        return {**self.record.to_dict(), "message": event(self.message),
                "reply": event(self.reply), "window": [event(e) for e in self.window],
                "recalled": [r.__dict__ for r in self.recalled],
                "jobs": [j.__dict__ for j in self.jobs]}


def _fact_now(con: apsw.Connection, user_id: str, fact_id: int) -> tuple[str | None, str]:
    fact = get_fact(con, user_id, fact_id)
    if fact is None or fact.deleted_at is not None:
        return None, "forgotten"
    text = f"({fact.category}) {fact.key}: {fact.value}"
    return text, "corrected since" if fact.superseded_at else "current"


def recalled_now(con: apsw.Connection, user_id: str, record: TurnRecord) -> list[Recalled]:
    """The record's recalled items, each looked up as the memory holds it now."""
    items = record.record.get("recalled", [])
    cards = {c.id: c for c in cards_by_ids(con, user_id, [i["id"] for i in items
                                                          if i["kind"] == "card"])}
    events = {e.id: e for e in events_by_ids(con, user_id, [i["id"] for i in items
                                                             if i["kind"] == "event"])}
    marked = {kind: corrections_of(con, user_id, kind, [i["id"] for i in items
                                                        if i["kind"] == kind])
              for kind in ("card", "event")}
    found = []
    for item in items:
        kind, item_id = item["kind"], item["id"]
        if kind == "fact":
            text, state = _fact_now(con, user_id, item_id)
        elif kind == "card":
            card = cards.get(item_id)
            text, state = (_marked(card.summary, marked["card"].get(item_id)) if card
                           else (None, "gone"))
        else:
            past = events.get(item_id)
            if past is None:
                text, state = None, "gone"
            elif past.superseded_by is not None:
                text, state = None, "replaced"
            else:
                text, state = _marked(f"{past.role}: {past.content}",
                                      marked["event"].get(item_id))
        found.append(Recalled(kind, item_id, item["where"], item["why"], item["ranks"],
                              item.get("score"), text, state))
    return found


def _marked(text: str, correction: Correction | None) -> tuple[str | None, str]:
    """An item's text and state, as the person's corrections leave it."""
    if correction is None:
        return text, "current"
    if correction.withheld:
        return None, "forgotten"
    return noted(text, correction), "corrected since"


def _queued(config: Config, event_ids: set[int]) -> tuple[list[TurnJob], bool]:
    """The queue's jobs about these events: pending, scheduled or failed; and whether
    the queue could be read."""
    try:
        view = QueueView(config)
        if not view.exists:
            return [], True
        kv = view.key_values()
        jobs, failures = [*view.pending(kv), *view.scheduled(kv)], kv.failures
    except QueueError as exc:
        log.warning("inspector.queue_unreadable", error=str(exc))
        return [], False

    def about(args: tuple) -> bool:
        return any(isinstance(a, list) and event_ids & set(a) for a in args)

    found = [TurnJob(job.name, "pending", f"queued as {job.id}") for job in jobs
             if about(job.args)]
    found += [TurnJob(f.name, "failed", f.error, f.id) for f in failures if about(f.args)]
    return found, True


def turn_jobs(con: apsw.Connection, config: Config, record: TurnRecord) -> list[TurnJob]:
    """What the turn's events set off, from the database first and the queue after."""
    ids = [i for i in (record.event_id, record.reply_event_id) if i is not None]
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = list(con.execute(f"SELECT id, distilled_at, card_id FROM events WHERE id IN ({marks})",
                            ids))
    jobs: list[TurnJob] = []
    distilled = [at for _, at, _ in rows if at]
    queued, readable = _queued(config, set(ids))
    if rows and len(distilled) == len(rows):
        learned = con.execute(
            f"SELECT count(*) FROM memory_log WHERE source_event_id IN ({marks})",
            ids).fetchone()[0]
        jobs.append(TurnJob("distill", "done", f"at {max(distilled)}; {learned} change(s) "
                                               "to the memory learned from this turn"))
    elif not any(j.name == "distill" for j in queued):
        jobs.append(TurnJob("distill", "not queued",
                            "the worker's reconcile sweep will pick it up" if readable
                            else "the queue could not be read"))
    jobs += queued
    cards = sorted({card for _, _, card in rows if card})
    if cards:
        jobs.append(TurnJob("compact", "done",
                            "summarised into card " + ", ".join(f"#{c}" for c in cards)))
    embedded = con.execute(
        f"SELECT count(DISTINCT owner_id) FROM embeddings WHERE owner_kind = 'event' "
        f"AND owner_id IN ({marks})", ids).fetchone()[0]
    if embedded:
        jobs.append(TurnJob("embed", "done", f"{embedded} of {len(rows)} message(s) embedded"))
    return jobs


def turn_view(con: apsw.Connection, config: Config, user_id: str, record_id: int) -> TurnView:
    """The user's turn `record_id` as the inspector shows it (the JSON route and the page
    both render this); NotFound (404) when there is no such turn of theirs."""
    record = get_turn_record(con, user_id, record_id)
    if record is None:
        raise NotFound(f"no turn {record_id}")
    return inspect_turn(con, config, user_id, record)


def inspect_turn(con: apsw.Connection, config: Config, user_id: str,
                 record: TurnRecord) -> TurnView:
    ids = [record.event_id, *([record.reply_event_id] if record.reply_event_id else []),
           *record.record.get("window", [])]
    events = {e.id: e for e in events_by_ids(con, user_id, ids)}
    window = [events[i] for i in record.record.get("window", []) if i in events]
    corrected = {event_id: noted(events[event_id].content, correction)
                 for event_id, correction in corrections_of(con, user_id, "event", events).items()}
    return TurnView(record, events.get(record.event_id),
                    events.get(record.reply_event_id) if record.reply_event_id else None,
                    window, recalled_now(con, user_id, record), turn_jobs(con, config, record),
                    corrected)
