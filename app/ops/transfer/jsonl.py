"""JSON lines: everything of one user, for machines and for moving a memory between databases.

The first line is a header ({"type": "header", "format": "hilo-export", ...}); then
sessions, events, cards, profile keys (tombstones too), facts (with their history and
tombstones, forgotten ones too), diary entries, scheduled tasks and MEMORY.md, one JSON
object per line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from app.config import Config
from app.datadir import DataDir
from app.db import schema_version
from app.ops.backup import snapshot
from app.ops.transfer.files import refuse_to_overwrite, replacing_file
from app.ops.transfer.memory_md import exported_memory_md
from app.ops.transfer.records import (
    FORMAT,
    FORMAT_VERSION,
    ExportReport,
    Problem,
    TransferError,
    check_user,
)
from app.ops.transfer.user_records import (
    card_records,
    diary_records,
    event_records,
    fact_records,
    profile_records,
    session_records,
    task_records,
)
from app.timeutil import utc_now

__all__ = ["export_jsonl", "read_jsonl"]


def export_jsonl(config: Config, user_id: str, out_path: Path, *,
                 overwrite: bool = False) -> ExportReport:
    """Everything of one user, one JSON object per line, written atomically to out_path.

    An existing out_path is replaced only with overwrite.
    """
    check_user(user_id)
    out_path = Path(out_path).expanduser()
    if not out_path.parent.is_dir():
        raise TransferError(f"directory {out_path.parent} does not exist: create it first")
    if out_path.is_dir():
        raise TransferError(f"{out_path} is a folder: pass a file name for the JSON lines export")
    if not overwrite:
        refuse_to_overwrite(out_path)
    written: Counter = Counter()
    with snapshot(DataDir.of(config).memory_db) as con, \
            replacing_file(out_path, overwrite=overwrite) as out:
        header = {"type": "header", "format": FORMAT, "version": FORMAT_VERSION,
                  "user_id": user_id, "exported_at": utc_now(),
                  "schema_version": schema_version(con)}
        out.write(_line(header))
        for records in (session_records(con, user_id), event_records(con, user_id),
                        card_records(con, user_id),
                        profile_records(con, user_id),
                        fact_records(con, user_id),
                        diary_records(con, user_id), task_records(con, user_id)):
            for record in records:
                out.write(_line(record))
                written[record["type"]] += 1
        memory_md = exported_memory_md(config)
        if memory_md is not None:
            out.write(_line({"type": "memory_md", "text": memory_md}))
            written["memory_md"] += 1
    return ExportReport(out_path, user_id, dict(written))


def _line(record: dict) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def _check_header(path: Path, header: dict, where: str) -> Problem | None:
    """Refuses a file that is not a Hilo export or is from a newer Hilo (TransferError);
    a version that is not a number is reported and the file read as this version."""
    if header.get("format") != FORMAT:
        raise TransferError(f"{path} is not a Hilo export (format "
                            f"{header.get('format')!r}): pass a file from `hilo export`")
    try:
        version = int(header.get("version", 0))
    except (TypeError, ValueError, OverflowError):
        return Problem(where, f"header version {header.get('version')!r} is not a number; "
                              f"read as version {FORMAT_VERSION}")
    if version > FORMAT_VERSION:
        raise TransferError(f"{path} was written by a newer Hilo (format version "
                            f"{header['version']}): upgrade Hilo to import it")
    return None


def read_jsonl(path: Path) -> Iterator[dict | Problem]:
    """Records from a file written by export_jsonl; a line that is not one is a Problem."""
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
            except RecursionError:
                yield Problem(where, "not a record: nested too deeply")
                continue
            if not isinstance(record, dict) or "type" not in record:
                yield Problem(where, 'not a record: expected an object with a "type"')
                continue
            if record["type"] == "header":
                problem = _check_header(Path(path), record, where)
                if problem is not None:
                    yield problem
                continue
            record["_where"] = where
            yield record
