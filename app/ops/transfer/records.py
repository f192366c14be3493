"""The records every importer produces and every exporter writes, and their vocabulary.

A record is a dict in the JSONL shape ({"type": "fact", "category": ..., ...}); readers
add "_where" (the file and line or table and row it came from) for the import report.
Whatever cannot be read becomes a `Problem`, which the report lists; it never stops an
import. The field normalisers below turn what an input may hold into what Hilo stores.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from app.errors import InvalidInput
from app.events import normalize_text, truncate
from app.memory import InvalidMemory
from app.sanitize import redact_secrets
from app.timeutil import parse_rfc3339, to_rfc3339

__all__ = ["FORMAT", "FORMAT_VERSION", "RECORD_TYPES", "KEY_LIMIT", "VALUE_LIMIT", "TransferError",
           "ExportReport", "ImportReport", "Problem", "check_user", "record_time", "clean_text",
           "memory_key", "unit_interval"]

FORMAT = "hilo-export"
FORMAT_VERSION = 1
RECORD_TYPES = ("session", "event", "card", "profile", "fact", "diary", "task", "memory_md")
KEY_LIMIT = {"profile": 100, "fact": 200}
VALUE_LIMIT = 2000


class TransferError(InvalidInput):
    """An export or import that cannot be done; str() says what to do."""


# How a summary names n records of each type: (one, many).
_NOUNS = {"session": ("session", "sessions"), "event": ("event", "events"),
          "card": ("card", "cards"), "profile": ("profile key", "profile keys"),
          "fact": ("fact", "facts"), "diary": ("diary entry", "diary entries"),
          "task": ("scheduled task", "scheduled tasks"),
          "memory_md": ("MEMORY.md", "MEMORY.md")}


def _counts(counts: dict[str, int]) -> str:
    """{"fact": 4, "card": 1} as "4 facts, 1 card", in the order of RECORD_TYPES."""
    order = [kind for kind in RECORD_TYPES if counts.get(kind)] + sorted(
        kind for kind in counts if kind not in RECORD_TYPES and counts[kind])
    parts = []
    for kind in order:
        one, many = _NOUNS.get(kind, (kind, kind))
        parts.append(f"{counts[kind]} {one if counts[kind] == 1 else many}")
    return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class ExportReport:
    path: Path
    user_id: str
    written: dict[str, int]
    removed_stale: int = 0
    # Files an earlier export wrote for records now gone, kept because a person changed them.
    kept_changed: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"path": str(self.path), "user_id": self.user_id, "written": self.written,
                "removed_stale": self.removed_stale, "kept_changed": list(self.kept_changed)}

    def summary(self) -> str:
        """What the export wrote, as the CLI prints it."""
        lines = [f"Exported {self.user_id}'s memory to {self.path}: {_counts(self.written)}."]
        if self.removed_stale:
            lines.append(f"Removed {self.removed_stale} file{'s' if self.removed_stale != 1 else ''} "
                         "an earlier export wrote for records that are gone.")
        lines += [f"Kept {relative}: its record is gone, but it changed since Hilo wrote it."
                  for relative in self.kept_changed]
        return "\n".join(lines)


@dataclass
class ImportReport:
    source: Path
    user_id: str
    format: str  # "markdown", "jsonl" or "kinder-agent"
    added: Counter = field(default_factory=Counter)
    updated: Counter = field(default_factory=Counter)
    unchanged: Counter = field(default_factory=Counter)
    # What was skipped and why, one "where: why" each; an import never stops for one.
    problems: list[str] = field(default_factory=list)
    # Tasks the input marked trusted, imported untrusted ("#7 disk check").
    untrusted_tasks: list[str] = field(default_factory=list)
    # What the owner should know, though nothing was lost (where MEMORY.md went).
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"source": str(self.source), "user_id": self.user_id, "format": self.format,
                "added": dict(self.added), "updated": dict(self.updated),
                "unchanged": dict(self.unchanged), "problems": self.problems,
                "untrusted_tasks": self.untrusted_tasks, "notes": self.notes}

    def summary(self) -> str:
        """Counts of what was added, updated and skipped, then each skip and why."""
        lines = [f"Imported {self.source} ({self.format}) into {self.user_id}'s memory: "
                 f"added {_counts(self.added)}; updated {_counts(self.updated)}; "
                 f"{sum(self.unchanged.values())} already there."]
        if self.untrusted_tasks:
            count = len(self.untrusted_tasks)
            lines.append(f"{count} task{'s' if count != 1 else ''} imported untrusted "
                         f"({', '.join(self.untrusted_tasks)}): trust "
                         f"{'them' if count != 1 else 'it'} with `hilo tasks trust ID`.")
        lines += self.notes
        if self.problems:
            lines.append(f"Skipped {len(self.problems)}:")
            lines += [f"  {problem}" for problem in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Problem:
    """A part of the input that could not be read; reported, never fatal."""

    where: str
    detail: str


def check_user(user_id: str) -> str:
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 200:
        raise TransferError(f"user id must be 1 to 200 characters, got {user_id!r}")
    return user_id


def record_time(value: Any) -> str | None:
    """Any time an input may hold, as Hilo's RFC 3339 UTC text; None stays None.

    Naive times are UTC (SQLite's datetime('now') writes them); integers are epoch
    seconds (or milliseconds); YAML dates and datetimes are accepted as they load.
    ValueError for anything else, including times Hilo cannot store (infinite, before
    year 1000 or after 9999).
    """
    if value is None or value == "":
        return None
    moment = _moment(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # an offset that takes it past year 9999 in UTC
        raise ValueError(f"not a time: {value!r}") from None
    if moment.year < 1000:  # stored text would not have four digits, nor sort as a time
        raise ValueError(f"not a time: {value!r}")
    return to_rfc3339(moment)


def _moment(value: Any) -> datetime:
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit()):
        seconds = float(value)
        try:
            return datetime.fromtimestamp(seconds / 1000 if seconds > 1e11 else seconds,
                                          UTC)
        except (OverflowError, OSError, ValueError):  # inf, nan, or beyond year 9999
            raise ValueError(f"not a time: {value!r}") from None
    if isinstance(value, str):
        try:
            return parse_rfc3339(value.strip())
        except ValueError:
            raise ValueError(f"not a time: {value!r}") from None
    raise ValueError(f"not a time: {value!r}")


def clean_text(text: Any, limit: int | None = None) -> str:
    """Text as Hilo stores it: valid UTF-8, no NUL, secrets redacted, capped with a marker."""
    if text is None:
        return ""
    cleaned = redact_secrets(normalize_text(text if isinstance(text, (str, bytes)) else str(text))).text
    cleaned = cleaned.strip()
    if limit is not None and len(cleaned) > limit:
        cleaned = truncate(cleaned, limit, len(cleaned))
    return cleaned


def memory_key(text: Any, kind: str) -> str:
    """A profile or fact key as stored: cleaned, one space between words, casefolded."""
    key = " ".join(clean_text(text).split()).casefold()
    if not key:
        raise InvalidMemory(f"{kind} key must be non-empty text")
    return key[: KEY_LIMIT[kind]]


def unit_interval(value: Any, default: float = 0.5) -> float:
    try:
        return min(1.0, max(0.0, float(value)))
    except (TypeError, ValueError):
        return default
