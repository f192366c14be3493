"""Storing imported records in one user's memory, idempotently; and `import_path`.

Every reader (markdown.py, jsonl.py, kinder_agent.py) turns its input into records; the
`RecordImporter` here stores them. What is already there is recognised by a natural
key (an event's uuid; a card's session, time and summary; a fact's category, key, time
and value; a profile key; a session's diary entry), so importing twice adds nothing.
Events go through `prepare_event` like every event and their marks through app/events.py;
every other write goes through app/memory, and all imported text is sanitised the same
way (secrets redacted). Scheduled tasks arrive untrusted, whatever the input says: the
report names the ones that were trusted there, for the owner to trust again here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw

from app.config import Config
from app.datadir import DataDir
from app.db import Durability
from app.events import InvalidEvent, insert_event, link_to_card, prepare_event, restore_marks
from app.memory import (
    CATEGORIES,
    SOURCES,
    FactRecord,
    InvalidMemory,
    NewCard,
    add_card,
    import_diary_entry,
    import_fact,
    import_profile,
    link_folded_card,
    link_superseded_fact,
)
from app.memory.sessions import merge_imported_session
from app.ops.transfer.jsonl import read_jsonl
from app.ops.transfer.markdown import (
    CARDS_DIR,
    DIARY_DIR,
    FACTS_DIR,
    PROFILE_FILE,
    looks_like_markdown_export,
    read_markdown,
)
from app.ops.transfer.memory_md import keep_imported_memory_md
from app.ops.transfer.records import (
    RECORD_TYPES,
    VALUE_LIMIT,
    ImportReport,
    Problem,
    TransferError,
    check_user,
    clean_text,
    memory_key,
    record_time,
    unit_interval,
)
from app.tasks.schedule import ScheduleError
from app.tasks.store import TaskRecord, import_task
from app.timeutil import utc_now
from app.writer import Writer

__all__ = ["IMPORT_BATCH", "IMPORT_NAMESPACE", "WORKER", "OUTCOMES", "RECORD_ERRORS",
           "RecordImporter", "store_records", "import_path"]

# Records per writer transaction: big enough to amortise the commit, small enough that
# the front-end never waits long for the write lock during an import.
IMPORT_BATCH = 500
# Deterministic uuids for events that arrive without one (kinder-agent messages, or a
# record shared with another user in the same database).
IMPORT_NAMESPACE = uuidlib.UUID("3f0b6a52-9c1e-4f7e-8d1a-6b2f5e8c4a10")
# How the importer signs its changes in memory_log.
WORKER = "import"
# What a memory write did, as the import report counts it.
OUTCOMES = {"insert": "added", "update": "updated", "supersede": "updated"}
# What a bad record can raise while it is stored: the record is rolled back alone and
# reported, the import goes on. (OverflowError: a number too large for SQLite.)
# What forget_fact keeps of a value (app.memory.facts.value_hash): a SHA-256 in hex.
_VALUE_HASH = re.compile(r"[0-9a-f]{64}")
RECORD_ERRORS = (InvalidEvent, InvalidMemory, ValueError, TypeError, KeyError, OverflowError,
                 RecursionError, apsw.ConstraintError, apsw.TooBigError, apsw.MismatchError)


def _forgotten_hash(r: dict, name: str) -> str | None:
    """The value hash of a forgotten fact's record; None for any other fact."""
    given = r.get("forgotten_hash")
    if given is None:
        return None
    if not isinstance(given, str) or not _VALUE_HASH.fullmatch(given):
        raise InvalidMemory(f"fact {name}: forgotten_hash must be 64 hex digits, got {given!r}")
    if record_time(r.get("deleted_at")) is None:
        raise InvalidMemory(f"fact {name} is forgotten but has no deleted_at")
    return given


def _link_id(value: Any) -> int | str | None:
    """An id another record links to (an exported row id); None for anything else."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


class RecordImporter:
    """Stores records for one user, skipping what is already there.

    Runs on the writer thread, one batch of records per call; the maps it keeps link
    records across batches (exported ids → ids in this database).
    """

    def __init__(self, config: Config, user_id: str, report: ImportReport,
                 now: datetime | None = None) -> None:
        self.config = config
        self.now = now  # when imported tasks are scheduled from; None: the current time
        self.user_id = user_id
        self.report = report
        self.event_ids: dict[str, int] = {}  # uuid in the input → events.id here
        self.card_ids: dict[Any, int] = {}
        self.fact_ids: dict[Any, int] = {}
        self.sessions: dict[str, dict] = {}
        self.card_links: dict[Any, list[int]] = defaultdict(list)  # input card id → events
        self.folds: list[tuple[int, Any]] = []
        self.supersessions: list[tuple[int, Any]] = []

    def apply(self, con: apsw.Connection, records: list[dict | Problem]) -> None:
        for record in records:
            if isinstance(record, Problem):
                self.report.problems.append(f"{record.where}: {record.detail}")
                continue
            kind = record.get("type")
            store = getattr(self, f"_{kind}", None) if kind in RECORD_TYPES else None
            where = record.get("_where", kind)
            if store is None:
                self.report.problems.append(f"{where}: unknown record type {kind!r}, skipped")
                continue
            try:
                with con:  # a savepoint: one bad record is rolled back alone
                    outcome = store(con, record)
            except RECORD_ERRORS as exc:
                detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                if isinstance(exc, ScheduleError):
                    detail = exc.problem  # one line: not the grammar's examples
                self.report.problems.append(f"{where}: {kind} skipped: {detail}")
                continue
            if outcome:
                getattr(self.report, outcome)[kind] += 1

    # -- sessions and events

    def _session(self, con: apsw.Connection, r: dict) -> None:
        # Stored (and counted) at the end: inserting its events reopens a session.
        session_id = str(r["id"])
        existed = con.execute("SELECT 1 FROM sessions WHERE user_id = ? AND id = ?",
                              (self.user_id, session_id)).fetchone() is not None
        self.sessions[session_id] = {
            "existed": existed, "title": clean_text(r.get("title")) or None,
            "started_at": record_time(r.get("started_at")),
            "last_event_at": record_time(r.get("last_event_at")),
            "ended_at": record_time(r.get("ended_at")),
        }

    def _event_uuid(self, con: apsw.Connection, r: dict) -> tuple[str, int | None]:
        given = r.get("uuid") or str(uuidlib.uuid5(IMPORT_NAMESPACE, "\x1f".join(
            str(r.get(k)) for k in ("session_id", "created_at", "role", "content"))))
        for candidate in (given, str(uuidlib.uuid5(IMPORT_NAMESPACE, f"{self.user_id}\x1f{given}"))):
            row = con.execute("SELECT id, user_id FROM events WHERE uuid = ?", (candidate,)).fetchone()
            if row is None:
                return candidate, None
            if row[1] == self.user_id:
                return candidate, row[0]
            # The same event already belongs to another user here: this user gets a copy
            # under a uuid derived from both, stable across imports.
        raise ValueError(f"event uuid {given} is taken")

    def _event(self, con: apsw.Connection, r: dict) -> str:
        uuid, existing = self._event_uuid(con, r)
        key = r.get("uuid") or uuid
        if existing is not None:
            self.event_ids[key] = existing
            return "unchanged"
        tool_calls = json.loads(r["tool_calls_json"]) if r.get("tool_calls_json") else None
        prepared = prepare_event(
            self.config, self.user_id, str(r["session_id"]), r["role"], r["content"],
            tool_call_id=r.get("tool_call_id"), tool_name=r.get("tool_name"), tool_calls=tool_calls,
            created_at=record_time(r.get("created_at")),
            importance=None if r.get("importance") is None else unit_interval(r["importance"]),
            origin="import",  # whatever it was where it came from: outside content here
        )
        prepared = dataclasses.replace(
            prepared, uuid=uuid, original_length=r.get("original_length") or prepared.original_length)
        event = insert_event(con, prepared)
        card = self.card_ids.get(r.get("card")) if r.get("card") is not None else None
        restore_marks(con, event.id, compacted=bool(r.get("compacted")), card_id=card,
                      distilled_at=record_time(r.get("distilled_at")),
                      consolidated_at=record_time(r.get("consolidated_at")))
        if r.get("card") is not None and card is None:
            self.card_links[r["card"]].append(event.id)
        self.event_ids[key] = event.id
        return "added"

    def _event_id(self, con: apsw.Connection, uuid: str | None) -> int | None:
        if not uuid:
            return None
        if uuid in self.event_ids:
            return self.event_ids[uuid]
        row = con.execute("SELECT id FROM events WHERE uuid = ? AND user_id = ?",
                          (uuid, self.user_id)).fetchone()
        return row[0] if row else None

    # -- cards

    def _card(self, con: apsw.Connection, r: dict) -> str:
        summary = clean_text(r["summary"], VALUE_LIMIT * 2)
        if not summary:
            raise InvalidMemory("a card needs a summary")
        session_id = None if r.get("session_id") is None else str(r["session_id"])
        created_at = record_time(r.get("created_at")) or utc_now()
        linked = self.card_links.pop(r.get("id"), [])
        row = con.execute("SELECT id FROM context_cards WHERE user_id = ? AND session_id IS ? "
                          "AND created_at = ? AND summary = ?",
                          (self.user_id, session_id, created_at, summary)).fetchone()
        outcome = "unchanged"
        if row is None:
            first = self._event_id(con, r.get("first_event_uuid"))
            last = self._event_id(con, r.get("last_event_uuid"))
            if first is None and linked:
                first, last = min(linked), max(linked)
            card_id = add_card(con, self.user_id, NewCard(
                session_id=session_id, summary=summary,
                keywords=clean_text(r.get("keywords"), 1000),
                first_event_id=first, last_event_id=last,
                event_count=int(r.get("event_count") or len(linked)),
                level=int(r.get("level") or 0), is_extractive=bool(r.get("is_extractive")),
                importance=unit_interval(r.get("importance")),
                access_count=int(r.get("access_count") or 0),
                last_accessed_at=record_time(r.get("last_accessed_at")), created_at=created_at,
                updated_at=record_time(r.get("updated_at")) or created_at, from_outside=True),
                worker=WORKER)
            if card_id is not None:
                outcome = "added"
            else:
                # cards_one_per_chunk: this chunk of events already has its card here.
                card_id = con.execute("SELECT id FROM context_cards WHERE user_id = ? AND "
                                      "session_id IS ? AND first_event_id = ? AND level = 0",
                                      (self.user_id, session_id, first)).fetchone()[0]
            if _link_id(r.get("folded_into")) is not None:
                self.folds.append((card_id, r["folded_into"]))
        else:
            card_id = row[0]
        if linked:
            link_to_card(con, self.user_id, linked, card_id)
        if r.get("id") is not None:
            self.card_ids[r["id"]] = card_id
        return outcome

    # -- profile and facts

    def _profile(self, con: apsw.Connection, r: dict) -> str:
        key = memory_key(r["key"], "profile")
        value = clean_text(r["value"], VALUE_LIMIT)
        if not value:
            raise InvalidMemory(f"profile key {key!r} has no value")
        source = r.get("source") if r.get("source") in SOURCES else "user"
        updated_at = record_time(r.get("updated_at")) or record_time(r.get("created_at")) or utc_now()
        created_at = record_time(r.get("created_at")) or updated_at
        deleted_at = record_time(r.get("deleted_at"))
        action = import_profile(
            con, self.user_id, key, value, source=source,
            source_event_id=self._event_id(con, r.get("source_event_uuid")),
            created_at=created_at, updated_at=updated_at, deleted_at=deleted_at, worker=WORKER)
        return OUTCOMES.get(action, "unchanged")

    def _fact(self, con: apsw.Connection, r: dict) -> str:
        category = str(r["category"]).strip().casefold()
        if category not in CATEGORIES:
            raise InvalidMemory(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        key = memory_key(r["key"], "fact")
        forgotten_hash = _forgotten_hash(r, f"{category}/{key}")
        # A forgotten fact keeps no value, only its hash: what stops it being learned again.
        value = "" if forgotten_hash else clean_text(r.get("value"), VALUE_LIMIT)
        if not value and not forgotten_hash:
            raise InvalidMemory(f"fact {category}/{key} has no value")
        source = r.get("source") if r.get("source") in SOURCES else "user"
        created_at = record_time(r.get("created_at")) or utc_now()
        updated_at = record_time(r.get("updated_at")) or created_at
        written = import_fact(con, self.user_id, FactRecord(
            category=category, key=key, value=value, source=source,
            source_event_id=self._event_id(con, r.get("source_event_uuid")),
            created_at=created_at, updated_at=updated_at,
            superseded_at=record_time(r.get("superseded_at")),
            deleted_at=record_time(r.get("deleted_at")),
            importance=unit_interval(r.get("importance")),
            access_count=int(r.get("access_count") or 0),
            last_accessed_at=record_time(r.get("last_accessed_at")),
            forgotten_hash=forgotten_hash), worker=WORKER)
        if written.fact_id is not None and r.get("id") is not None:
            self.fact_ids[r["id"]] = written.fact_id
        if written.action == "insert" and _link_id(r.get("superseded_by")) is not None:
            # Linked once every record is in (a row superseded here is linked already).
            self.supersessions.append((written.fact_id, r["superseded_by"]))
        return OUTCOMES.get(written.action, "unchanged")

    # -- diary

    def _diary(self, con: apsw.Connection, r: dict) -> str:
        session_id = r.get("session_id")
        if session_id is None or not str(session_id).strip():
            raise InvalidMemory("a diary entry needs a session_id")
        session_id = str(session_id)
        entry = clean_text(r["entry"], VALUE_LIMIT * 2)
        if not entry:
            raise InvalidMemory(f"the diary entry of session {session_id} is empty")
        created_at = record_time(r.get("created_at")) or utc_now()
        action = import_diary_entry(con, self.user_id, session_id, entry,
                                    is_extractive=bool(r.get("is_extractive")),
                                    created_at=created_at, worker=WORKER)
        return OUTCOMES.get(action, "unchanged")

    # -- scheduled tasks

    def _task(self, con: apsw.Connection, r: dict) -> str:
        oneshot = bool(r.get("is_oneshot"))
        task_id = _link_id(r.get("id"))
        action, task = import_task(con, self.config, self.user_id, TaskRecord(
            prompt=clean_text(r["prompt"]), schedule=str(r.get("schedule") or r.get("cron_expr") or ""),
            name=None if r.get("name") is None else str(r["name"]),
            cron_expr=str(r["cron_expr"]) if r.get("cron_expr") else None, oneshot=oneshot,
            paused=bool(r.get("is_paused")), source=str(r.get("source") or "tool"),
            task_id=task_id if isinstance(task_id, int) else None,
            run_once_at=record_time(r.get("next_run_at")) if oneshot else None,
            created_at=record_time(r.get("created_at")),
            updated_at=record_time(r.get("updated_at")),
            last_run_at=record_time(r.get("last_run_at")),
            timezone=str(r["timezone"]) if r.get("timezone") else None), now=self.now)
        if action == "insert" and r.get("is_trusted"):
            # Trust is the owner's to give at this machine, never a file's.
            self.report.untrusted_tasks.append(f"#{task.id} {task.name}")
        return OUTCOMES.get(action, "unchanged")

    # -- MEMORY.md

    def _memory_md(self, con: apsw.Connection, r: dict) -> str:
        text = r["text"]
        if not isinstance(text, str):
            raise ValueError("MEMORY.md must be text")
        outcome, beside = keep_imported_memory_md(self.config, text)
        # MEMORY.md is every conversation's, as the owner's own words: theirs to accept.
        if outcome == "pending":
            self.report.notes.append(
                f"MEMORY.md: the imported one is kept beside it at {beside}, which no "
                "conversation reads; to use it, read it and run `hilo memory accept-import`.")
            return "added"
        return "unchanged"

    # -- links across records

    def finish(self, con: apsw.Connection) -> None:
        for card_id, folded_into in self.folds:
            if folded_into in self.card_ids:
                link_folded_card(con, card_id, self.card_ids[folded_into])
        for fact_id, superseded_by in self.supersessions:
            if superseded_by in self.fact_ids:
                link_superseded_fact(con, fact_id, self.fact_ids[superseded_by])
        for session_id, s in self.sessions.items():
            self._store_session(con, session_id, s)
        # Events whose card never arrived stay compacted, with no card (card_links left).

    def _store_session(self, con: apsw.Connection, session_id: str, s: dict) -> None:
        first = s["started_at"] or s["last_event_at"] or s["ended_at"] or utc_now()
        last = s["last_event_at"] or first
        before = con.execute("SELECT title, started_at, last_event_at, ended_at FROM sessions "
                             "WHERE user_id = ? AND id = ?", (self.user_id, session_id)).fetchone()
        merge_imported_session(con, self.user_id, session_id, s["title"], first, last,
                               s["ended_at"])
        after = con.execute("SELECT title, started_at, last_event_at, ended_at FROM sessions "
                            "WHERE user_id = ? AND id = ?", (self.user_id, session_id)).fetchone()
        if not s["existed"]:
            outcome = "added"  # (its events, stored before this, created the row)
        else:
            outcome = "unchanged" if before == after else "updated"
        getattr(self.report, outcome)["session"] += 1


def _batches(records: Iterable[dict | Problem], size: int) -> Iterator[list[dict | Problem]]:
    batch: list[dict | Problem] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def store_records(config: Config, user_id: str, records: Iterable[dict | Problem],
                  report: ImportReport, *, now: datetime | None = None) -> ImportReport:
    """Store every record in user_id's memory through one writer; the report counts them.
    `now` fixes the moment imported tasks are scheduled from (a test's)."""
    path = DataDir.of(config).memory_db
    if not path.exists():
        raise TransferError(f"no memory database at {path}: run `hilo init` first "
                            "(or pass the right --data-dir)")
    importer = RecordImporter(config, user_id, report, now)
    # The user's own words are the source of truth: FULL, like the front-end's writer.
    with Writer(path, Durability.FULL, name="hilo-import") as writer:
        for batch in _batches(records, IMPORT_BATCH):
            writer.submit(lambda con, batch=batch: importer.apply(con, batch))
        writer.submit(importer.finish)
    return report


def import_path(config: Config, path: Path, user_id: str, *,
                now: datetime | None = None) -> ImportReport:
    """Import a Hilo export — a markdown folder or a .jsonl file — into user_id's memory.

    Idempotent: what is already there is recognised and left alone, so importing the same
    export twice adds nothing. Where both sides hold a different value for the same
    profile key, fact or diary entry, the more recent one is current (a fact's older
    value is kept as its history); a key the user deleted here is never brought back.
    """
    check_user(user_id)
    path = Path(path).expanduser()
    if path.is_dir():
        if not looks_like_markdown_export(path):
            raise TransferError(f"{path} is not a Hilo markdown export (no {PROFILE_FILE}, "
                                f"{FACTS_DIR}/, {CARDS_DIR}/ or {DIARY_DIR}/)")
        report = ImportReport(path, user_id, "markdown")
        return store_records(config, user_id, read_markdown(path), report, now=now)
    if path.is_file():
        report = ImportReport(path, user_id, "jsonl")
        return store_records(config, user_id, read_jsonl(path), report, now=now)
    raise TransferError(f"{path} does not exist: pass a folder from `hilo export --format md` "
                        "or a .jsonl file from `hilo export --format jsonl`")
