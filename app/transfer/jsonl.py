"""JSON lines: everything of one user, for machines and for moving a memory between databases.

The first line is a header ({"type": "header", "format": "hilo-export", ...}); then
sessions, events, cards, profile keys (tombstones too), facts (with their history and
tombstones) and diary entries, one JSON object per line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from app.backup import snapshot
from app.config import Config
from app.db import memory_db_path, schema_version
from app.timeutil import utc_now
from app.transfer.records import (
    FORMAT,
    FORMAT_VERSION,
    ExportReport,
    Problem,
    TransferError,
    check_user,
)
from app.transfer.user_records import (
    card_records,
    diary_records,
    event_records,
    fact_records,
    profile_records,
    session_records,
)


def export_jsonl(config: Config, user_id: str, out_path: Path) -> ExportReport:
    """Everything of one user, one JSON object per line, written atomically to out_path."""
    check_user(user_id)
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
            for records in (session_records(con, user_id), event_records(con, user_id),
                            card_records(con, user_id),
                            profile_records(con, user_id, live_only=False),
                            fact_records(con, user_id, current_only=False),
                            diary_records(con, user_id)):
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    written[record["type"]] += 1
        partial.replace(out_path)
    finally:
        partial.unlink(missing_ok=True)
    return ExportReport(out_path, user_id, dict(written))


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
