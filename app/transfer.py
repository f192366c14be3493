"""Export and import of one user's memory.

Two export formats. `export_markdown` writes a folder a person can read, grep, keep in
git or open in Obsidian: `profile.md` (MEMORY.md-style `- key: value` lines), one file
per current fact and per context card with YAML front-matter, and the diary by day.
`export_jsonl` writes one JSON object per line with a "type" (session, event, card,
profile, fact, diary) — everything, including the events (the source of truth), fact
history and tombstones — for machines and for moving a memory between databases.

`import_path` reads either back; `import_kinder_agent` reads the memory database of
the Bash REPL Hilo grew out of. Every importer turns its input into the same records
(the JSONL shapes) and one `_Importer` stores them, idempotently: what is already there
is recognised by a natural key (an event's uuid; a card's session, time and summary; a
fact's category, key, time and value; a profile key; a session's diary entry), so
importing twice adds nothing. Events go through `prepare_event` like every event, and
all other imported text is sanitised the same way (secrets redacted) before it is
stored. Dates are kept. Embeddings are not exported: the worker recomputes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid as uuidlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import apsw
import yaml

from app.backup import snapshot
from app.config import Config
from app.db import Durability, connect_readonly, memory_db_path, schema_version
from app.errors import InvalidInput
from app.events import InvalidEvent, insert_event, normalize_text, prepare_event, truncate
from app.fts import terms
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
from app.sanitize import redact_secrets
from app.timeutil import parse_rfc3339, to_rfc3339, utc_now
from app.writer import Writer

FORMAT = "hilo-export"
FORMAT_VERSION = 1
RECORD_TYPES = ("session", "event", "card", "profile", "fact", "diary")
PROFILE_FILE = "profile.md"
FACTS_DIR, CARDS_DIR, DIARY_DIR = "facts", "cards", "diary"
# Records per writer transaction: big enough to amortise the commit, small enough that
# the front-end never waits long for the write lock during an import.
IMPORT_BATCH = 500
KEY_LIMIT = {"profile": 100, "fact": 200}
VALUE_LIMIT = 2000
# Deterministic uuids for events that arrive without one (kinder-agent messages, or a
# record shared with another user in the same database).
IMPORT_NAMESPACE = uuidlib.UUID("3f0b6a52-9c1e-4f7e-8d1a-6b2f5e8c4a10")
# How the importer signs its changes in memory_log.
WORKER = "import"
# What a memory write did, as the import report counts it.
OUTCOMES = {"insert": "added", "update": "updated", "supersede": "updated"}

_DIARY_MARKER = re.compile(r"^<!-- hilo-diary (\{.*\}) -->$")
_SLUG = re.compile(r"[^\w]+", re.UNICODE)
_PLAIN_KEY = re.compile(r'^[^\s"`:][^:\n]*$')


class TransferError(InvalidInput):
    """An export or import that cannot be done; str() says what to do."""


@dataclass(frozen=True)
class ExportReport:
    path: Path
    user_id: str
    written: dict[str, int]
    removed_stale: int = 0

    def to_dict(self) -> dict:
        return {"path": str(self.path), "user_id": self.user_id, "written": self.written,
                "removed_stale": self.removed_stale}


@dataclass
class ImportReport:
    source: Path
    user_id: str
    format: str  # "markdown", "jsonl" or "kinder-agent"
    added: Counter = field(default_factory=Counter)
    updated: Counter = field(default_factory=Counter)
    unchanged: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"source": str(self.source), "user_id": self.user_id, "format": self.format,
                "added": dict(self.added), "updated": dict(self.updated),
                "unchanged": dict(self.unchanged), "problems": self.problems}


@dataclass(frozen=True)
class Problem:
    """A part of the input that could not be read; reported, never fatal."""

    where: str
    detail: str


# -- shared helpers -----------------------------------------------------------------------


def _check_user(user_id: str) -> str:
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 200:
        raise TransferError(f"user id must be 1 to 200 characters, got {user_id!r}")
    return user_id


def _time(value: Any) -> str | None:
    """Any time an input may hold, as Hilo's RFC 3339 UTC text; None stays None.

    Naive times are UTC (SQLite's datetime('now') writes them); integers are epoch
    seconds (or milliseconds); YAML dates and datetimes are accepted as they load.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit()):
        seconds = float(value)
        moment = datetime.fromtimestamp(seconds / 1000 if seconds > 1e11 else seconds, timezone.utc)
    elif isinstance(value, str):
        try:
            moment = parse_rfc3339(value.strip())
        except ValueError:
            raise ValueError(f"not a time: {value!r}") from None
    else:
        raise ValueError(f"not a time: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return to_rfc3339(moment)


def _clean(text: Any, limit: int | None = None) -> str:
    """Text as Hilo stores it: valid UTF-8, no NUL, secrets redacted, capped with a marker."""
    if text is None:
        return ""
    cleaned = redact_secrets(normalize_text(text if isinstance(text, (str, bytes)) else str(text))).text
    cleaned = cleaned.strip()
    if limit is not None and len(cleaned) > limit:
        cleaned = truncate(cleaned, limit, len(cleaned))
    return cleaned


def _key(text: Any, kind: str) -> str:
    key = " ".join(_clean(text).split()).casefold()
    if not key:
        raise InvalidMemory(f"{kind} key must be non-empty text")
    return key[: KEY_LIMIT[kind]]


def _unit(value: Any, default: float = 0.5) -> float:
    try:
        return min(1.0, max(0.0, float(value)))
    except (TypeError, ValueError):
        return default


# -- reading one user's memory as records ---------------------------------------------------


def _rows(con: apsw.Connection, sql: str, params: tuple) -> Iterator[dict]:
    cursor = con.execute(sql, params)
    names = None
    for row in cursor:
        if names is None:
            names = [d[0] for d in cursor.getdescription()]
        yield dict(zip(names, row))


def _session_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in _rows(con, "SELECT id, title, started_at, last_event_at, ended_at FROM sessions "
                     "WHERE user_id = ? ORDER BY started_at, id", (user_id,)):
        yield {"type": "session", **row}


def _event_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in _rows(con, "SELECT uuid, session_id, role, content, original_length, tool_call_id, "
                     "tool_name, tool_calls_json, created_at, importance, compacted, "
                     "card_id AS card, distilled_at, consolidated_at FROM events "
                     "WHERE user_id = ? ORDER BY id", (user_id,)):
        yield {"type": "event", **row}


def _card_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in _rows(con, "SELECT c.id, c.session_id, c.summary, c.keywords, "
                     "f.uuid AS first_event_uuid, l.uuid AS last_event_uuid, c.event_count, c.level, "
                     "c.folded_into, c.is_extractive, c.importance, c.access_count, "
                     "c.last_accessed_at, c.created_at, c.updated_at FROM context_cards c "
                     "LEFT JOIN events f ON f.id = c.first_event_id "
                     "LEFT JOIN events l ON l.id = c.last_event_id "
                     "WHERE c.user_id = ? ORDER BY c.id", (user_id,)):
        yield {"type": "card", **row}


def _profile_records(con: apsw.Connection, user_id: str, *, live_only: bool) -> Iterator[dict]:
    where = " AND p.deleted_at IS NULL" if live_only else ""
    for row in _rows(con, "SELECT p.key, p.value, p.source, e.uuid AS source_event_uuid, "
                     "p.created_at, p.updated_at, p.deleted_at FROM profile p "
                     "LEFT JOIN events e ON e.id = p.source_event_id "
                     f"WHERE p.user_id = ?{where} ORDER BY p.key", (user_id,)):
        yield {"type": "profile", **row}


def _fact_records(con: apsw.Connection, user_id: str, *, current_only: bool) -> Iterator[dict]:
    where = " AND f.superseded_at IS NULL AND f.deleted_at IS NULL" if current_only else ""
    for row in _rows(con, "SELECT f.id, f.category, f.key, f.value, f.source, "
                     "e.uuid AS source_event_uuid, f.created_at, f.updated_at, f.superseded_at, "
                     "f.superseded_by, f.deleted_at, f.importance, f.access_count, "
                     "f.last_accessed_at FROM facts f LEFT JOIN events e ON e.id = f.source_event_id "
                     f"WHERE f.user_id = ?{where} ORDER BY f.id", (user_id,)):
        yield {"type": "fact", **row}


def _diary_records(con: apsw.Connection, user_id: str) -> Iterator[dict]:
    for row in _rows(con, "SELECT session_id, entry, is_extractive, created_at FROM diary "
                     "WHERE user_id = ? ORDER BY created_at, id", (user_id,)):
        yield {"type": "diary", **row}


# -- JSONL --------------------------------------------------------------------------------


def export_jsonl(config: Config, user_id: str, out_path: Path) -> ExportReport:
    """Everything of one user, one JSON object per line, written atomically to out_path.

    The first line is a header ({"type": "header", "format": "hilo-export", ...}); then
    sessions, events, cards, profile keys (tombstones too), facts (with their history
    and tombstones) and diary entries. Row ids appear only to link records to each other
    (event → card, card → folded_into, fact → superseded_by); events are linked by uuid.
    """
    _check_user(user_id)
    out_path = Path(out_path).expanduser()
    if not out_path.parent.is_dir():
        raise TransferError(f"directory {out_path.parent} does not exist: create it first")
    written: Counter = Counter()
    partial = out_path.with_name(f".{out_path.name}.partial")
    try:
        with snapshot(memory_db_path(config.data_dir)) as con, \
                partial.open("w", encoding="utf-8") as out:
            header = {"type": "header", "format": FORMAT, "version": FORMAT_VERSION,
                      "user_id": user_id, "exported_at": utc_now(),
                      "schema_version": schema_version(con)}
            out.write(json.dumps(header, ensure_ascii=False) + "\n")
            for records in (_session_records(con, user_id), _event_records(con, user_id),
                            _card_records(con, user_id),
                            _profile_records(con, user_id, live_only=False),
                            _fact_records(con, user_id, current_only=False),
                            _diary_records(con, user_id)):
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    written[record["type"]] += 1
        partial.replace(out_path)
    finally:
        partial.unlink(missing_ok=True)
    return ExportReport(out_path, user_id, dict(written))


def read_jsonl(path: Path) -> Iterator[dict | Problem]:
    with Path(path).open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{Path(path).name} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Problem(where, f"not JSON: {exc.msg}")
                continue
            if not isinstance(record, dict) or "type" not in record:
                yield Problem(where, 'not a record: expected an object with a "type"')
                continue
            if record["type"] == "header":
                if record.get("format") != FORMAT:
                    raise TransferError(f"{path} is not a Hilo export (format "
                                        f"{record.get('format')!r}): pass a file from `hilo export`")
                if int(record.get("version", 0)) > FORMAT_VERSION:
                    raise TransferError(f"{path} was written by a newer Hilo (format version "
                                        f"{record['version']}): upgrade Hilo to import it")
                continue
            record["_where"] = where
            yield record


# -- markdown -----------------------------------------------------------------------------


def _front_matter(data: dict, body: str) -> str:
    head = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1_000_000)
    return f"---\n{head}---\n\n{body.strip()}\n"


def _split_front_matter(text: str) -> tuple[dict, str]:
    """(front-matter, body) of a markdown file; ({}, text) when it has none."""
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            data = yaml.safe_load("\n".join(lines[1:end])) or {}
            if not isinstance(data, dict):
                raise ValueError("the front-matter is not a mapping of keys to values")
            return data, "\n".join(lines[end + 1:])
    raise ValueError("the front-matter has no closing ---")


def _slug(text: str, fallback: str) -> str:
    return _SLUG.sub("-", text.casefold()).strip("-_")[:60].strip("-_") or fallback


def _unique_name(directory: str, stem: str, taken: set[str], row_id: Any) -> str:
    name = f"{directory}/{stem}.md"
    if name in taken:
        name = f"{directory}/{stem}-{row_id}.md"
    taken.add(name)
    return name


def _profile_markdown(user_id: str, entries: list[dict]) -> str:
    lines = ["# Profile", ""]
    meta = {}
    for entry in entries:
        key = entry["key"]
        shown = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
        first, *rest = entry["value"].split("\n")
        lines.append(f"- {shown}: {first}")
        lines.extend(f"  {line}" if line else "" for line in rest)
        meta[key] = {"source": entry["source"], "created_at": entry["created_at"],
                     "updated_at": entry["updated_at"]}
    head = {"hilo": "profile", "user_id": user_id, "keys": meta}
    return _front_matter(head, "\n".join(lines))


def _diary_markdown(day: str, entries: list[dict]) -> str:
    parts = [f"# Diary — {day}", ""]
    for entry in entries:
        meta = {"session_id": entry["session_id"], "created_at": entry["created_at"],
                "is_extractive": bool(entry["is_extractive"])}
        session = " ".join(str(entry["session_id"]).split())
        parts += [f"## {entry['created_at'][11:16]} UTC · session {session}",
                  "<!-- hilo-diary " + json.dumps(meta, ensure_ascii=False).replace("-->", "--\\u003e")
                  + " -->", "", entry["entry"].strip(), ""]
    return "\n".join(parts)


def _markdown_files(con: apsw.Connection, user_id: str) -> tuple[dict[str, str], Counter]:
    """Relative path → content of every file of the export."""
    files: dict[str, str] = {}
    written: Counter = Counter()
    profile = list(_profile_records(con, user_id, live_only=True))
    files[PROFILE_FILE] = _profile_markdown(user_id, profile)
    written["profile"] = len(profile)

    taken: set[str] = set()
    for fact in _fact_records(con, user_id, current_only=True):
        stem = f"{fact['created_at'][:10]}-{fact['category']}-{_slug(fact['key'], 'fact')}"
        head = {k: fact[k] for k in ("id", "category", "key", "source", "created_at",
                                     "updated_at", "importance")}
        files[_unique_name(FACTS_DIR, stem, taken, fact["id"])] = _front_matter(head, fact["value"])
        written["fact"] += 1

    for card in _card_records(con, user_id):
        topic = card["keywords"].split(",")[0] if card["keywords"] else card["summary"][:40]
        stem = f"{card['created_at'][:10]}-{_slug(topic, 'card')}"
        head = {k: card[k] for k in ("id", "session_id", "keywords", "level", "is_extractive",
                                     "importance", "event_count", "folded_into", "created_at",
                                     "updated_at")}
        head["is_extractive"] = bool(head["is_extractive"])
        files[_unique_name(CARDS_DIR, stem, taken, card["id"])] = _front_matter(head, card["summary"])
        written["card"] += 1

    by_day: dict[str, list[dict]] = defaultdict(list)
    for entry in _diary_records(con, user_id):
        by_day[entry["created_at"][:10]].append(entry)
        written["diary"] += 1
    for day, entries in by_day.items():
        files[f"{DIARY_DIR}/{day}.md"] = _diary_markdown(day, entries)
    return files, written


def _written_by_hilo(path: Path) -> bool:
    """Files an earlier export wrote (and so may remove): never a person's own notes."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.parent.name == DIARY_DIR:
            return any(_DIARY_MARKER.match(line) for line in text.split("\n"))
        data, _ = _split_front_matter(text)
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return "id" in data


def export_markdown(config: Config, user_id: str, out_dir: Path) -> ExportReport:
    """One user's profile, current facts, cards and diary as a folder of markdown.

    Exporting again into the same folder updates it in place: files whose content is
    unchanged are not rewritten (clean git diffs), and files an earlier export wrote for
    facts or cards that are gone are removed. Notes a person added are left alone.
    """
    _check_user(user_id)
    out_dir = Path(out_dir).expanduser()
    profile = out_dir / PROFILE_FILE
    if profile.exists():
        try:
            head, _ = _split_front_matter(profile.read_text(encoding="utf-8"))
        except (ValueError, yaml.YAMLError):
            head = {}
        if head.get("hilo") != "profile":
            raise TransferError(f"{out_dir} has a {PROFILE_FILE} that Hilo did not write: "
                                "export into an empty folder or an earlier Hilo export")
    with snapshot(memory_db_path(config.data_dir)) as con:
        files, written = _markdown_files(con, user_id)

    for directory in (FACTS_DIR, CARDS_DIR, DIARY_DIR):
        (out_dir / directory).mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        target = out_dir / relative
        if target.exists() and target.read_text(encoding="utf-8") == content:
            continue
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(content, encoding="utf-8")
        partial.replace(target)
    removed = 0
    for directory in (FACTS_DIR, CARDS_DIR, DIARY_DIR):
        for stale in (out_dir / directory).glob("*.md"):
            relative = f"{directory}/{stale.name}"
            if relative not in files and _written_by_hilo(stale):
                stale.unlink()
                removed += 1
    return ExportReport(out_dir, user_id, dict(written), removed)


def _parse_profile(text: str, where: str) -> Iterator[dict | Problem]:
    head, body = _split_front_matter(text)
    meta = head.get("keys") if isinstance(head.get("keys"), dict) else {}
    entries: list[list[str]] = []  # [key, first line, more lines...]
    blank_run = 0
    open_entry = False
    for number, line in enumerate(body.split("\n"), 1):
        if line.startswith("- "):
            item = line[2:]
            if item.startswith('"'):
                try:
                    key, end = json.JSONDecoder().raw_decode(item)
                    rest = item[end:]
                except json.JSONDecodeError:
                    yield Problem(where, f"line {number}: unreadable quoted key")
                    continue
                if not rest.startswith(":"):
                    yield Problem(where, f'line {number}: expected "- key: value"')
                    continue
                value = rest[1:].strip()
            else:
                key, colon, value = item.partition(":")
                if not colon:
                    yield Problem(where, f'line {number}: expected "- key: value"')
                    continue
            entries.append([str(key), value.strip()])
            blank_run, open_entry = 0, True
        elif open_entry and line.startswith("  "):
            entries[-1].extend([""] * blank_run + [line[2:]])
            blank_run = 0
        elif open_entry and not line.strip():
            blank_run += 1
        else:
            blank_run, open_entry = 0, False  # a heading or prose ends the entry
    for key, *lines in entries:
        info = meta.get(" ".join(key.split()).casefold()) or meta.get(key) or {}
        # A line a person wrote by hand, without export metadata, is the user's own edit.
        yield {"type": "profile", "key": key, "value": "\n".join(lines).strip(),
               "source": info.get("source", "user"), "created_at": info.get("created_at"),
               "updated_at": info.get("updated_at"), "_where": where}


def _parse_diary(text: str, where: str) -> Iterator[dict | Problem]:
    lines = text.split("\n")
    markers = [i for i, line in enumerate(lines) if _DIARY_MARKER.match(line)]
    for n, start in enumerate(markers):
        try:
            meta = json.loads(_DIARY_MARKER.match(lines[start]).group(1))
        except json.JSONDecodeError:
            yield Problem(where, f"line {start + 1}: unreadable hilo-diary marker")
            continue
        end = markers[n + 1] if n + 1 < len(markers) else len(lines)
        if n + 1 < len(markers):
            # The next entry's "## time · session" heading sits just above its marker.
            j = end - 1
            while j > start and not lines[j].strip():
                j -= 1
            if lines[j].startswith("#"):
                end = j
        yield {"type": "diary", "session_id": meta.get("session_id"),
               "created_at": meta.get("created_at"), "is_extractive": meta.get("is_extractive", False),
               "entry": "\n".join(lines[start + 1:end]).strip(), "_where": where}


def read_markdown(folder: Path) -> Iterator[dict | Problem]:
    """Records from a folder written by export_markdown (or edited by a person).

    A fact or card file a person wrote needs only front-matter with category and key
    (facts) and a body; it is dated by the file's modification time and counts as the
    user's own.
    """
    folder = Path(folder)
    for directory, kind in ((CARDS_DIR, "card"), (FACTS_DIR, "fact")):
        for path in sorted((folder / directory).glob("*.md")):
            where = f"{directory}/{path.name}"
            try:
                head, body = _split_front_matter(path.read_text(encoding="utf-8", errors="replace"))
            except (ValueError, yaml.YAMLError) as exc:
                yield Problem(where, f"unreadable front-matter: {exc}")
                continue
            modified = to_rfc3339(datetime.fromtimestamp(path.stat().st_mtime, timezone.utc))
            record = {"source": "user", "created_at": modified, **head, "type": kind,
                      "_where": where}
            record.setdefault("updated_at", record["created_at"])
            record["value" if kind == "fact" else "summary"] = body.strip()
            yield record
    profile = folder / PROFILE_FILE
    if profile.exists():
        try:
            yield from _parse_profile(profile.read_text(encoding="utf-8", errors="replace"),
                                      PROFILE_FILE)
        except (ValueError, yaml.YAMLError) as exc:
            yield Problem(PROFILE_FILE, f"unreadable: {exc}")
    for path in sorted((folder / DIARY_DIR).glob("*.md")):
        yield from _parse_diary(path.read_text(encoding="utf-8", errors="replace"),
                                f"{DIARY_DIR}/{path.name}")


# -- storing records ----------------------------------------------------------------------


class _Importer:
    """Stores records for one user, skipping what is already there.

    Runs on the writer thread, one batch of records per call; the maps it keeps link
    records across batches (exported ids → ids in this database).
    """

    def __init__(self, config: Config, user_id: str, report: ImportReport) -> None:
        self.config = config
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
            except (InvalidEvent, InvalidMemory, ValueError, TypeError, KeyError,
                    apsw.ConstraintError) as exc:
                detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
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
            "existed": existed, "title": _clean(r.get("title")) or None,
            "started_at": _time(r.get("started_at")), "last_event_at": _time(r.get("last_event_at")),
            "ended_at": _time(r.get("ended_at")),
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
            created_at=_time(r.get("created_at")),
            importance=None if r.get("importance") is None else _unit(r["importance"]),
        )
        prepared = dataclasses.replace(
            prepared, uuid=uuid, original_length=r.get("original_length") or prepared.original_length)
        event = insert_event(con, prepared)
        card = self.card_ids.get(r.get("card")) if r.get("card") is not None else None
        con.execute("UPDATE events SET compacted = ?, card_id = ?, distilled_at = ?, "
                    "consolidated_at = ? WHERE id = ?",
                    (1 if r.get("compacted") else 0, card, _time(r.get("distilled_at")),
                     _time(r.get("consolidated_at")), event.id))
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
        summary = _clean(r["summary"], VALUE_LIMIT * 2)
        if not summary:
            raise InvalidMemory("a card needs a summary")
        session_id = None if r.get("session_id") is None else str(r["session_id"])
        created_at = _time(r.get("created_at")) or utc_now()
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
                session_id=session_id, summary=summary, keywords=_clean(r.get("keywords"), 1000),
                first_event_id=first, last_event_id=last,
                event_count=int(r.get("event_count") or len(linked)),
                level=int(r.get("level") or 0), is_extractive=bool(r.get("is_extractive")),
                importance=_unit(r.get("importance")), access_count=int(r.get("access_count") or 0),
                last_accessed_at=_time(r.get("last_accessed_at")), created_at=created_at,
                updated_at=_time(r.get("updated_at")) or created_at), worker=WORKER)
            if card_id is not None:
                outcome = "added"
            else:
                # cards_one_per_chunk: this chunk of events already has its card here.
                card_id = con.execute("SELECT id FROM context_cards WHERE user_id = ? AND "
                                      "session_id IS ? AND first_event_id = ? AND level = 0",
                                      (self.user_id, session_id, first)).fetchone()[0]
            if r.get("folded_into") is not None:
                self.folds.append((card_id, r["folded_into"]))
        else:
            card_id = row[0]
        if linked:
            marks = ",".join("?" * len(linked))
            con.execute(f"UPDATE events SET compacted = 1, card_id = ? WHERE user_id = ? "
                        f"AND card_id IS NULL AND id IN ({marks})", (card_id, self.user_id, *linked))
        if r.get("id") is not None:
            self.card_ids[r["id"]] = card_id
        return outcome

    # -- profile and facts

    def _profile(self, con: apsw.Connection, r: dict) -> str:
        key = _key(r["key"], "profile")
        value = _clean(r["value"], VALUE_LIMIT)
        if not value:
            raise InvalidMemory(f"profile key {key!r} has no value")
        source = r.get("source") if r.get("source") in SOURCES else "user"
        updated_at = _time(r.get("updated_at")) or _time(r.get("created_at")) or utc_now()
        created_at = _time(r.get("created_at")) or updated_at
        deleted_at = _time(r.get("deleted_at"))
        action = import_profile(
            con, self.user_id, key, value, source=source,
            source_event_id=self._event_id(con, r.get("source_event_uuid")),
            created_at=created_at, updated_at=updated_at, deleted_at=deleted_at, worker=WORKER)
        return OUTCOMES.get(action, "unchanged")

    def _fact(self, con: apsw.Connection, r: dict) -> str:
        category = str(r["category"]).strip().casefold()
        if category not in CATEGORIES:
            raise InvalidMemory(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        key = _key(r["key"], "fact")
        value = _clean(r["value"], VALUE_LIMIT)
        if not value:
            raise InvalidMemory(f"fact {category}/{key} has no value")
        source = r.get("source") if r.get("source") in SOURCES else "user"
        created_at = _time(r.get("created_at")) or utc_now()
        updated_at = _time(r.get("updated_at")) or created_at
        written = import_fact(con, self.user_id, FactRecord(
            category=category, key=key, value=value, source=source,
            source_event_id=self._event_id(con, r.get("source_event_uuid")),
            created_at=created_at, updated_at=updated_at,
            superseded_at=_time(r.get("superseded_at")), deleted_at=_time(r.get("deleted_at")),
            importance=_unit(r.get("importance")), access_count=int(r.get("access_count") or 0),
            last_accessed_at=_time(r.get("last_accessed_at"))), worker=WORKER)
        if written.fact_id is not None and r.get("id") is not None:
            self.fact_ids[r["id"]] = written.fact_id
        if written.action == "insert" and r.get("superseded_by") is not None:
            # Linked once every record is in (a row superseded here is linked already).
            self.supersessions.append((written.fact_id, r["superseded_by"]))
        return OUTCOMES.get(written.action, "unchanged")

    # -- diary

    def _diary(self, con: apsw.Connection, r: dict) -> str:
        session_id = r.get("session_id")
        if session_id is None or not str(session_id).strip():
            raise InvalidMemory("a diary entry needs a session_id")
        session_id = str(session_id)
        entry = _clean(r["entry"], VALUE_LIMIT * 2)
        if not entry:
            raise InvalidMemory(f"the diary entry of session {session_id} is empty")
        created_at = _time(r.get("created_at")) or utc_now()
        action = import_diary_entry(con, self.user_id, session_id, entry,
                                    is_extractive=bool(r.get("is_extractive")),
                                    created_at=created_at, worker=WORKER)
        return OUTCOMES.get(action, "unchanged")

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
        con.execute(
            "INSERT INTO sessions (user_id, id, title, started_at, last_event_at, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, id) DO UPDATE SET "
            "title = coalesce(sessions.title, excluded.title), "
            "started_at = min(sessions.started_at, excluded.started_at), "
            "last_event_at = max(sessions.last_event_at, excluded.last_event_at), "
            # An ended session stays ended, unless this database has later events in it.
            "ended_at = CASE WHEN excluded.ended_at IS NULL "
            "OR max(sessions.last_event_at, excluded.last_event_at) > excluded.ended_at "
            "THEN sessions.ended_at ELSE coalesce(sessions.ended_at, excluded.ended_at) END",
            (self.user_id, session_id, s["title"], first, last, s["ended_at"]))
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


def _store(config: Config, user_id: str, records: Iterable[dict | Problem],
           report: ImportReport) -> ImportReport:
    path = memory_db_path(config.data_dir)
    if not path.exists():
        raise TransferError(f"no memory database at {path}: run `hilo init` first "
                            "(or pass the right --data-dir)")
    importer = _Importer(config, user_id, report)
    # The user's own words are the source of truth: FULL, like the front-end's writer.
    with Writer(path, Durability.FULL, name="hilo-import") as writer:
        for batch in _batches(records, IMPORT_BATCH):
            writer.submit(lambda con, batch=batch: importer.apply(con, batch))
        writer.submit(importer.finish)
    return report


def import_path(config: Config, path: Path, user_id: str) -> ImportReport:
    """Import a Hilo export — a markdown folder or a .jsonl file — into user_id's memory.

    Idempotent: what is already there is recognised and left alone, so importing the same
    export twice adds nothing. Where both sides hold a different value for the same
    profile key, fact or diary entry, the more recent one is current (a fact's older
    value is kept as its history); a key the user deleted here is never brought back.
    """
    _check_user(user_id)
    path = Path(path).expanduser()
    if path.is_dir():
        if not ((path / PROFILE_FILE).exists() or any((path / d).is_dir()
                                                      for d in (FACTS_DIR, CARDS_DIR, DIARY_DIR))):
            raise TransferError(f"{path} is not a Hilo markdown export (no {PROFILE_FILE}, "
                                f"{FACTS_DIR}/, {CARDS_DIR}/ or {DIARY_DIR}/)")
        report = ImportReport(path, user_id, "markdown")
        return _store(config, user_id, read_markdown(path), report)
    if path.is_file():
        report = ImportReport(path, user_id, "jsonl")
        return _store(config, user_id, read_jsonl(path), report)
    raise TransferError(f"{path} does not exist: pass a folder from `hilo export --format md` "
                        "or a .jsonl file from `hilo export --format jsonl`")


# -- kinder-agent -------------------------------------------------------------------------

KINDER_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
                "bot": "assistant", "model": "assistant", "system": "system", "tool": "tool"}
KINDER_CATEGORIES = {"preferences": "preference", "decisions": "decision", "solutions": "solution",
                     "fix": "solution", "facts": "fact", "conversations": "conversation"}
KINDER_SESSION = "kinder-agent"  # for rows without a session
_TIME_COLUMNS = ("created_at", "timestamp", "ts", "time", "date", "updated_at")


def _columns(con: apsw.Connection, table: str) -> list[str]:
    return [row[1] for row in con.execute(f'PRAGMA table_info("{table}")')]


def _pick(columns: list[str], *names: str) -> str | None:
    lowered = {c.lower(): c for c in columns}
    return next((lowered[n] for n in names if n in lowered), None)


def _select(con: apsw.Connection, table: str, wanted: dict[str, tuple[str, ...]],
            order: tuple[str, ...] = ()) -> Iterator[dict]:
    """Rows of `table` as {our name: value}, for whichever candidate column exists."""
    columns = _columns(con, table)
    chosen = {ours: _pick(columns, *names) for ours, names in wanted.items()}
    parts = [f'"{col}" AS {ours}' if col else f"NULL AS {ours}" for ours, col in chosen.items()]
    sort = [f'"{chosen[o]}"' for o in order if chosen.get(o)] or ["rowid"]
    yield from _rows(con, f'SELECT rowid AS _rowid, {", ".join(parts)} FROM "{table}" '
                     f'ORDER BY {", ".join(sort)}, rowid', ())


def _kinder_key(content: str, category: str, taken: dict[tuple[str, str], str]) -> str:
    """A short, stable key for a free-text fact: its first content words."""
    base = " ".join(terms(content, min_length=3)[:5]) or " ".join(content.split())[:60].casefold()
    key, n = base, 1
    while taken.get((category, key), content) != content:
        n += 1
        key = f"{base} {n}"
    taken[(category, key)] = content
    return key


def read_kinder_agent(db_path: Path) -> Iterator[dict | Problem]:
    """Records from a kinder-agent memory database (see tests/fixtures/kinder_agent.py).

    Tables messages, context_cards, profile, facts and diary; column names vary between
    versions, so each is found among its usual spellings. Compacted messages are linked
    to the card of their session created at or after them (compaction takes the oldest
    chunk); messages, facts and cards keep their dates. Imported messages count as
    distilled (the REPL had already extracted their facts); `hilo rebuild --all` redoes it.
    """
    con = connect_readonly(Path(db_path))
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "messages" not in tables:
            raise TransferError(f"{db_path} has no messages table: is it a kinder-agent database?")
        time_names = _TIME_COLUMNS

        messages = []
        for m in _select(con, "messages", {
                "id": ("id", "message_id"), "session_id": ("session_id", "session", "conversation_id"),
                "role": ("role",), "content": ("content", "message", "text"),
                "compacted": ("compacted", "is_compacted"), "importance": ("importance",),
                "at": time_names}, order=("at", "id")):
            role = KINDER_ROLES.get(str(m["role"] or "").strip().lower())
            if role is None or m["content"] is None:
                yield Problem(f"messages row {m['_rowid']}", f"role {m['role']!r} or content "
                              "missing, skipped")
                continue
            m["role"] = role
            m["session_id"] = str(m["session_id"] or KINDER_SESSION)
            m["at"] = _time(m["at"])
            m["content"] = m["content"] if isinstance(m["content"], (str, bytes)) else str(m["content"])
            digest = hashlib.sha256(m["content"].encode("utf-8", "replace")
                                    if isinstance(m["content"], str) else m["content"]).hexdigest()[:16]
            m["uuid"] = str(uuidlib.uuid5(IMPORT_NAMESPACE, "kinder-agent\x1f" + "\x1f".join(
                str(x) for x in (m["session_id"], m["id"] or m["_rowid"], m["at"], digest))))
            messages.append(m)

        cards = []
        if "context_cards" in tables:
            for c in _select(con, "context_cards", {
                    "id": ("id", "card_id"), "session_id": ("session_id", "session"),
                    "summary": ("summary", "content", "text"), "keywords": ("keywords", "tags"),
                    "at": ("created_at", "timestamp", "ts", "time", "date")}, order=("at", "id")):
                c["id"] = c["id"] if c["id"] is not None else f"row{c['_rowid']}"
                c["at"] = _time(c["at"])
                cards.append(c)

        # Link each compacted message to the first card of its session made at or after it.
        links: dict[str, Any] = {}
        by_session: dict[str, list[dict]] = defaultdict(list)
        for c in cards:
            if c["session_id"] is not None and c["at"] is not None:
                by_session[str(c["session_id"])].append(c)
        card_events: dict[Any, list[str]] = defaultdict(list)
        for m in messages:
            if not m["compacted"] or m["at"] is None:
                continue
            card = next((c for c in by_session.get(m["session_id"], []) if c["at"] >= m["at"]), None)
            if card is not None:
                links[m["uuid"]] = card["id"]
                card_events[card["id"]].append(m["uuid"])

        sessions: dict[str, list[str | None]] = {}
        for m in messages:
            span = sessions.setdefault(m["session_id"], [m["at"], m["at"]])
            if m["at"]:
                span[0] = min(filter(None, (span[0], m["at"])))
                span[1] = max(filter(None, (span[1], m["at"])))
        for session_id, (first, last) in sessions.items():
            # A conversation in the old REPL's history is over.
            yield {"type": "session", "id": session_id, "started_at": first, "last_event_at": last,
                   "ended_at": last, "_where": f"session {session_id}"}
        for m in messages:
            yield {"type": "event", "uuid": m["uuid"], "session_id": m["session_id"],
                   "role": m["role"], "content": m["content"], "created_at": m["at"],
                   "importance": m["importance"], "compacted": bool(m["compacted"]),
                   "card": links.get(m["uuid"]), "distilled_at": m["at"],
                   "_where": f"messages row {m['_rowid']}"}
        for c in cards:
            keywords = c["keywords"] or ""
            if isinstance(keywords, str) and keywords.strip().startswith("["):
                try:
                    keywords = ", ".join(str(k) for k in json.loads(keywords))
                except json.JSONDecodeError:
                    pass
            linked = card_events.get(c["id"], [])
            yield {"type": "card", "id": c["id"], "session_id": c["session_id"],
                   "summary": c["summary"], "keywords": keywords, "created_at": c["at"],
                   "first_event_uuid": linked[0] if linked else None,
                   "last_event_uuid": linked[-1] if linked else None,
                   "event_count": len(linked), "importance": 0.5,
                   "_where": f"context_cards row {c['_rowid']}"}

        if "profile" in tables:
            for p in _select(con, "profile", {"key": ("key", "name", "attribute"),
                                              "value": ("value", "content"),
                                              "at": ("updated_at", "created_at", "timestamp")},
                             order=("key",)):
                yield {"type": "profile", "key": p["key"], "value": p["value"], "source": "agent",
                       "updated_at": _time(p["at"]), "_where": f"profile row {p['_rowid']}"}

        if "facts" in tables:
            taken: dict[tuple[str, str], str] = {}
            for f in _select(con, "facts", {"id": ("id",), "key": ("key", "subject"),
                                            "content": ("content", "fact", "text", "value"),
                                            "category": ("category", "type", "kind"),
                                            "importance": ("importance",), "at": time_names},
                             order=("at", "id")):
                content = _clean(f["content"])
                if not content:
                    yield Problem(f"facts row {f['_rowid']}", "empty fact, skipped")
                    continue
                category = str(f["category"] or "fact").strip().casefold()
                category = KINDER_CATEGORIES.get(category, category)
                category = category if category in CATEGORIES else "fact"
                key = _key(f["key"], "fact") if f["key"] else _kinder_key(content, category, taken)
                at = _time(f["at"])
                yield {"type": "fact", "id": f["id"], "category": category, "key": key,
                       "value": content, "source": "agent", "created_at": at, "updated_at": at,
                       "importance": 0.5 if f["importance"] is None else f["importance"],
                       "_where": f"facts row {f['_rowid']}"}

        if "diary" in tables:
            last_event = {sid: span[1] for sid, span in sessions.items()}
            for d in _select(con, "diary", {"id": ("id",), "session_id": ("session_id", "session"),
                                            "entry": ("entry", "content", "summary", "text"),
                                            "at": ("created_at", "timestamp", "date", "day")},
                             order=("at", "id")):
                session_id = str(d["session_id"]) if d["session_id"] else f"kinder-diary-{d['_rowid']}"
                yield {"type": "diary", "session_id": session_id, "entry": d["entry"],
                       "created_at": _diary_time(d["at"], last_event.get(session_id)),
                       "_where": f"diary row {d['_rowid']}"}
    finally:
        con.close()


def _diary_time(value: Any, session_last: str | None) -> str | None:
    """A date-only diary entry was written when its session ended, if that was that day."""
    at = _time(value)
    if at is None:
        return session_last
    date_only = (isinstance(value, date) and not isinstance(value, datetime)) or (
        isinstance(value, str) and len(value.strip()) == 10)
    if date_only and session_last and session_last[:10] == at[:10]:
        return session_last
    return at


def import_kinder_agent(config: Config, db_path: Path, user_id: str) -> ImportReport:
    """Import a kinder-agent memory database into user_id's memory (idempotent).

    Messages become events (sanitised by prepare_event) in their sessions, with their
    dates and compaction state; cards, profile, facts and diary follow. Facts and profile
    keys count as the agent's (source 'agent').
    """
    _check_user(user_id)
    db_path = Path(db_path).expanduser()
    if not db_path.is_file():
        raise TransferError(f"{db_path} does not exist: pass the kinder-agent memory database")
    report = ImportReport(db_path, user_id, "kinder-agent")
    try:
        return _store(config, user_id, read_kinder_agent(db_path), report)
    except apsw.NotADBError:
        raise TransferError(f"{db_path} is not a SQLite database") from None
