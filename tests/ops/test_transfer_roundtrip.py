"""Export → import into an empty data directory → export is the identity, in both formats
(issue 30): random memories — messages, cards folded or not, profile keys set and deleted,
facts superseded, deleted and forgotten, diary entries, scheduled tasks in their own
zones, MEMORY.md — come back as they left, but for trust, which no import brings."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import Durability, connect_readonly
from app.events import append_event, link_to_card
from app.memory import (
    CATEGORIES,
    NewCard,
    add_card,
    add_diary_entry,
    current_fact,
    delete_fact,
    delete_profile,
    fold_cards,
    set_profile,
    upsert_fact,
)
from app.memory.forget import forget_fact
from app.ops.transfer import export_jsonl, export_markdown, import_path
from app.ops.transfer.markdown import read_markdown
from app.ops.transfer.memory_md import accept_imported_memory_md, imported_memory_md_path
from app.ops.transfer.records import Problem
from app.tasks.store import add_task, list_tasks, pause_task
from app.timeutil import to_rfc3339
from app.writer import Writer
from tests.conftest import REPO_ROOT

USER = "default"
# Examples per format: each builds, exports, imports and exports a memory (~0.3 s).
EXAMPLES = 50
# Tasks are scheduled from this moment, at home and where they are imported.
NOW = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)
START = datetime(2029, 12, 1, 9, 0, tzinfo=UTC)
SCHEDULES = ("every day at 8", "0 9 * * 1-5", "every 15 minutes", "2030-01-08 09:00",
             "every monday and thursday at 8am", "cada lunes a las 8", "on the 1st of every "
             "month at noon")
ZONES = (None, "America/New_York", "Europe/Madrid", "Asia/Kolkata")
# Lines that look like the export's own syntax, beside arbitrary text.
TRICKY_LINES = ("---", "> quoted", '<!-- hilo-event {"uuid": "x"} -->', "<!-- hilo-fact {} -->",
                "- key: value", "## a heading", "  indented", "", "-->", "é ñ 漢字 🙂", "a\tb",
                "trailing   ", "...")

line = st.one_of(st.sampled_from(TRICKY_LINES),
                 st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                         max_size=24))
text = st.lists(line, min_size=1, max_size=4).map("\n".join).filter(lambda t: t.strip())
keys = st.one_of(st.sampled_from(("editor", "city", "work: team", "Pet name", '"quoted" key',
                                  "ключ", "allergy")), text.map(lambda t: t[:40]).filter(str.strip))
sessions = st.sampled_from(("s1", "chat two", "task:99", "ünï"))


@st.composite
def memories(draw: st.DrawFn) -> dict:
    return {
        "messages": draw(st.lists(st.tuples(sessions, st.sampled_from(("user", "assistant")),
                                            text), max_size=12)),
        "cards": draw(st.lists(st.tuples(sessions, st.integers(1, 3), text, st.booleans()),
                               max_size=3)),
        "fold": draw(st.booleans()),
        "profile": draw(st.lists(st.tuples(keys, st.one_of(st.none(), text),
                                           st.sampled_from(("user", "agent"))), max_size=6)),
        "facts": draw(st.lists(st.tuples(st.sampled_from(CATEGORIES), keys,
                                         st.one_of(text, st.sampled_from(("delete", "forget"))),
                                         st.sampled_from(("user", "agent"))), max_size=10)),
        "diary": draw(st.dictionaries(sessions, st.tuples(text, st.booleans()), max_size=3)),
        "ended": draw(st.sets(sessions, max_size=2)),
        "tasks": draw(st.lists(st.tuples(st.sampled_from(SCHEDULES), st.sampled_from(ZONES),
                                         text, st.booleans(), st.booleans()), max_size=4)),
        "memory_md": draw(st.one_of(st.none(), text)),
    }


def build(config: Config, memory: dict) -> None:
    """A memory made the way Hilo makes one: its own writes, in order."""
    with Writer(DataDir.of(config).memory_db, Durability.FULL) as writer:
        events: dict[str, list[int]] = {}
        for n, (session, role, content) in enumerate(memory["messages"]):
            event = append_event(writer, config, USER, session, role, content,
                                 created_at=START + timedelta(minutes=n))
            events.setdefault(session, []).append(event.id)
        writer.submit(lambda con: _derive(con, memory, events))
        for n, (schedule, zone, prompt, paused, trusted) in enumerate(memory["tasks"]):
            added = add_task(writer, config, schedule, f"{n}. {prompt}", trusted=trusted,
                             now=NOW, timezone_name=zone, source="cli")
            if paused:
                pause_task(writer, USER, added.task.id, now=NOW)
    if memory["memory_md"] is not None:
        DataDir.of(config).bootstrap.write_text(memory["memory_md"], encoding="utf-8")


def _derive(con, memory: dict, events: dict[str, list[int]]) -> None:
    stamp = START + timedelta(days=1)
    cards = []
    for n, (session, count, summary, extractive) in enumerate(memory["cards"]):
        ids = [i for i in events.get(session, []) if not _in_card(con, i)][:count]
        if not ids:
            continue
        at = to_rfc3339(stamp + timedelta(minutes=n))
        card_id = add_card(con, USER, NewCard(session, summary.strip(), "k1, k2", ids[0], ids[-1],
                                              len(ids), is_extractive=extractive,
                                              created_at=at), worker="compact")
        if card_id is not None:
            link_to_card(con, USER, ids, card_id)
            cards.append(card_id)
    if memory["fold"] and len(cards) >= 2:
        fold_cards(con, USER, NewCard(None, "folded", "", None, None, 0, level=1), cards[:2],
                   worker="consolidate")
    for key, value, source in memory["profile"]:
        if value is None:
            delete_profile(con, USER, key)
        else:
            set_profile(con, USER, key, value, source=source, worker="test")
    for category, key, value, source in memory["facts"]:
        fact = current_fact(con, USER, category, " ".join(key.split()).casefold())
        if value == "delete" and fact is not None and fact.deleted_at is None:
            delete_fact(con, USER, fact.id)
        elif value == "forget" and fact is not None and fact.deleted_at is None:
            forget_fact(con, USER, fact.id)
        elif value not in ("delete", "forget"):
            upsert_fact(con, USER, category, key, value, source=source, worker="test")
    for session, (entry, extractive) in memory["diary"].items():
        if session in events:
            add_diary_entry(con, USER, session, entry.strip(), is_extractive=extractive,
                            worker="diary")
    for session in memory["ended"]:
        con.execute("UPDATE sessions SET ended_at = ? WHERE user_id = ? AND id = ?",
                    ("2029-12-03T00:00:00.000000Z", USER, session))


def _in_card(con, event_id: int) -> bool:
    return con.execute("SELECT card_id FROM events WHERE id = ?", (event_id,)).fetchone()[0] \
        is not None


# -- comparing exports ------------------------------------------------------------------------


def exported_records(path: Path) -> list[dict]:
    """An export read back as records, in its order (the JSON lines header left out)."""
    if path.is_dir():
        records = list(read_markdown(path))
        assert not [r for r in records if isinstance(r, Problem)]
    else:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        records = [r for r in records if r["type"] != "header"]
    for record in records:
        record.pop("_where", None)
    return records


def canonical(records: list[dict]) -> list[str]:
    """Records with row ids (which differ between databases) replaced by what they name,
    and without what an import never brings (trust)."""
    names = {kind: {r["id"]: [r.get(k) for k in fields] for r in records
                    if r["type"] == kind and "id" in r}
             for kind, fields in (("fact", ("category", "key", "created_at", "value")),
                                  ("card", ("session_id", "created_at", "summary")))}
    links = {"fact": {"id": "fact", "superseded_by": "fact"},
             "card": {"id": "card", "folded_into": "card"}, "event": {"card": "card"}}
    shown = []
    for record in records:
        record = dict(record)
        for field, kind in links.get(record["type"], {}).items():
            if record.get(field) is not None:
                record[field] = names[kind][record[field]]
        if record["type"] == "task":  # an import never brings trust, and marks the task
            record.pop("is_trusted")
            record.pop("source")
        shown.append(json.dumps(record, sort_keys=True, ensure_ascii=False))
    return shown


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """An initialised data directory, copied for each example (migrating is slow)."""
    root = tmp_path_factory.mktemp("template") / "data"
    DataDir(root).init()
    return root


def fresh(template: Path, root: Path) -> Config:
    shutil.copytree(template, root)
    return load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root)


@contextmanager
def round_trip(template: Path, memory: dict, fmt: str) -> Iterator[tuple[Path, Path, Config]]:
    """(first export, export of its import into an empty data directory, that directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        home, there = fresh(template, Path(tmp) / "home"), fresh(template, Path(tmp) / "there")
        build(home, memory)
        export = export_markdown if fmt == "md" else export_jsonl
        suffix = "" if fmt == "md" else ".jsonl"
        first, second = Path(tmp) / f"first{suffix}", Path(tmp) / f"second{suffix}"
        export(home, USER, first)
        report = import_path(there, first, USER, now=NOW)
        assert not report.problems
        if imported_memory_md_path(there).exists():  # the owner accepts it at the machine
            accept_imported_memory_md(there)
        export(there, USER, second)
        yield first, second, there


@pytest.mark.parametrize("fmt", ["jsonl", "md"])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memory=memories())
def test_export_import_export_is_the_identity(template, fmt, memory):
    with round_trip(template, memory, fmt) as (first, second, there):
        assert canonical(exported_records(second)) == canonical(exported_records(first))
        con = connect_readonly(DataDir.of(there).memory_db)
        try:
            assert not [t for t in list_tasks(con, USER) if t.is_trusted]
        finally:
            con.close()
