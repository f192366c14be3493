"""One owner per write: every change to memory goes through app/memory and is logged once.

Each write path — a worker's fact, the user's fact, compaction, the consolidation fold
and merge, the diary, the user's profile edits, an import and a rebuild — leaves exactly
one memory_log row per change, signed by the right worker; what changes nothing logs
nothing. The last tests read the source tree: no module outside app/memory writes the
memory tables, and none but app/events.py writes the events table.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.config import load_config
from app.datadir import DataDir
from app.events import append_event
from app.learn.compact import compact_session
from app.learn.consolidate import fold_old_cards, merge_duplicate_facts
from app.learn.diary_entry import write_diary
from app.learn.distill import distill_turn
from app.memory import (
    HANDS,
    NewCard,
    add_card,
    delete_fact,
    delete_profile,
    is_outside,
    set_profile,
    store_fact,
    upsert_fact,
    write_diary_entry,
)
from app.model.client import ModelClient
from app.ops.backup import rebuild
from app.ops.transfer import export_jsonl, import_path
from app.tasks.store import add_task
from app.timeutil import to_rfc3339
from tests.conftest import REPO_ROOT
from tests.fixtures.memory import populate_memory
from tests.workers.support import add_turn, query, scalar, scripted_model, worker_config

NOW = datetime.now(UTC)


@pytest.fixture
def setup(config, data_dir, writer, fake_ollama):
    cfg = worker_config(config, fake_ollama)
    fake_ollama.responder = scripted_model
    with ModelClient.from_config(cfg) as model:
        yield cfg, writer, model


class Log:
    """memory_log rows written since the last call: (kind, owner_id, action, worker)."""

    def __init__(self, config) -> None:
        self.config = config
        self.seen = 0

    def new(self) -> list[tuple]:
        rows = query(self.config, "SELECT id, owner_kind, owner_id, action, worker FROM memory_log "
                                  "WHERE id > ? ORDER BY id", (self.seen,))
        if rows:
            self.seen = rows[-1][0]
        return [row[1:] for row in rows]


def fact_id(cfg, category, key) -> str:
    return str(scalar(cfg, "SELECT id FROM facts WHERE category = ? AND key = ? "
                           "AND superseded_at IS NULL", (category, key)))


# -- facts ----------------------------------------------------------------------------------


def test_a_fact_the_distill_worker_finds_is_logged_once_per_change(setup):
    cfg, writer, model = setup
    log = Log(cfg)
    distill_turn(writer, model, cfg, "ana", "s1",
                 add_turn(writer, cfg, "ana", "s1", "my name is Ana. I use vim as my editor"))
    assert log.new() == [("profile", "name", "insert", "distill"),
                         ("fact", fact_id(cfg, "preference", "editor"), "insert", "distill")]

    distill_turn(writer, model, cfg, "ana", "s1",
                 add_turn(writer, cfg, "ana", "s1", "I use helix as my editor"))
    assert log.new() == [("fact", fact_id(cfg, "preference", "editor"), "supersede", "distill")]

    distill_turn(writer, model, cfg, "ana", "s1",
                 add_turn(writer, cfg, "ana", "s1", "I use helix as my editor"))
    assert log.new() == []  # said again: nothing changed, nothing logged


def test_a_fact_the_user_adds_goes_through_the_same_dedupe_as_the_workers(config, writer):
    """What POST /memory/facts calls: store_fact with source and worker "user"."""
    log = Log(config)
    similarity = config.memory.dedupe_similarity

    def add(key, value, source="user"):
        return writer.submit(lambda con: store_fact(
            con, "ana", "fact", key, value, source=source, worker=source,
            similarity=similarity))

    first = add("staging database", "staging postgres runs on host db2")
    assert first.action == "insert"
    assert log.new() == [("fact", str(first.fact_id), "insert", "user")]

    # Similar text under another key updates the fact it repeats, as for a worker.
    second = add("staging db host", "the staging postgres runs on host db2 since March")
    assert second.action == "supersede"
    assert query(config, "SELECT key, value FROM facts WHERE superseded_at IS NULL") == [
        ("staging database", "the staging postgres runs on host db2 since March")]
    assert log.new() == [("fact", str(second.fact_id), "supersede", "user")]

    # The same key with a new value supersedes it; the same value again changes nothing.
    third = add("staging database", "staging postgres moved to host db7")
    assert third.action == "supersede" and log.new() == [
        ("fact", str(third.fact_id), "supersede", "user")]
    assert add("staging database", "staging postgres moved to host db7").action == "unchanged"
    assert log.new() == []


def test_a_fact_the_user_deleted_is_never_recreated_by_a_worker_but_the_user_may(config, writer):
    log = Log(config)
    similarity = config.memory.dedupe_similarity
    written = writer.submit(lambda con: store_fact(
        con, "ana", "preference", "editor", "uses vim", source="user", worker="user"))
    assert writer.submit(lambda con: delete_fact(con, "ana", written.fact_id))
    assert log.new() == [("fact", str(written.fact_id), "insert", "user"),
                         ("fact", str(written.fact_id), "delete", "user")]

    for key in ("editor", "main editor"):  # the same key, and similar text under another
        refused = writer.submit(lambda con, k=key: store_fact(
            con, "ana", "preference", k, "uses vim", source="agent", worker="distill",
            similarity=similarity))
        assert refused.action == "tombstoned"
    assert log.new() == []
    assert scalar(config, "SELECT count(*) FROM facts") == 1

    again = writer.submit(lambda con: store_fact(
        con, "ana", "preference", "main editor", "uses vim", source="user", worker="user",
        similarity=similarity))
    assert again.action == "supersede"  # the user's word brings back the key they deleted
    assert query(config, "SELECT key, value, deleted_at FROM facts WHERE superseded_at IS NULL") == [
        ("editor", "uses vim", None)]
    assert log.new() == [("fact", str(again.fact_id), "supersede", "user")]


# -- cards ----------------------------------------------------------------------------------


def test_a_card_from_compaction_is_logged_once(setup):
    cfg, writer, _ = setup
    for n in range(cfg.memory.compaction_threshold // 2):  # the threshold's events
        add_turn(writer, cfg, "ana", "s1", f"Step {n}: configure the nginx proxy")
    log = Log(cfg)
    (card_id,) = compact_session(writer, None, cfg, "ana", "s1", extractive=True)
    assert log.new() == [("card", str(card_id), "insert", "compact")]
    assert query(cfg, "SELECT source_event_id FROM memory_log WHERE owner_kind = 'card'") == [
        (scalar(cfg, "SELECT last_event_id FROM context_cards"),)]
    assert compact_session(writer, None, cfg, "ana", "s1", extractive=True) == []
    assert log.new() == []


def test_a_consolidation_fold_logs_the_new_card_once(config, writer):
    created = to_rfc3339(NOW - timedelta(days=40))
    old = [writer.submit(lambda con, n=n: add_card(con, "ana", NewCard(
        session_id="s1", summary=f"Old note {n} about the proxy", keywords="proxy",
        first_event_id=None, last_event_id=None, event_count=4, created_at=created),
        worker="test")) for n in range(3)]
    log = Log(config)
    log.new()

    folded, (new_card,) = fold_old_cards(writer, None, now=NOW, extractive=True)

    assert folded == 3
    assert log.new() == [("card", str(new_card), "insert", "consolidate")]
    marks = ",".join("?" * len(old))
    assert query(config, f"SELECT DISTINCT folded_into FROM context_cards WHERE id IN ({marks})",
                 tuple(old)) == [(new_card,)]
    assert fold_old_cards(writer, None, now=NOW, extractive=True) == (0, [])
    assert log.new() == []


def test_a_consolidation_merge_logs_one_supersede_per_duplicate(config, writer):
    def write(con):
        return [upsert_fact(con, "ana", "fact", key, "the proxy listens on port 8080",
                            source="agent", worker="test").fact_id for key in ("port", "proxy port")]

    ids = writer.submit(write)
    log = Log(config)
    log.new()
    assert merge_duplicate_facts(writer) == 1
    rows = log.new()
    assert len(rows) == 1 and rows[0][0] == "fact" and rows[0][2:] == ("supersede", "consolidate")
    assert int(rows[0][1]) in ids
    assert merge_duplicate_facts(writer) == 0 and log.new() == []


# -- diary ----------------------------------------------------------------------------------


def test_a_diary_entry_is_logged_once_when_written_and_once_when_rewritten(setup):
    cfg, writer, _ = setup
    add_turn(writer, cfg, "ana", "s1", "Let us move the backups to S3.")
    log = Log(cfg)
    assert write_diary(writer, None, cfg, "ana", "s1", extractive=True) == "written"
    diary_id = str(scalar(cfg, "SELECT id FROM diary"))
    assert log.new() == [("diary", diary_id, "insert", "diary")]
    assert write_diary(writer, None, cfg, "ana", "s1", extractive=True) == "up-to-date"
    assert log.new() == []
    add_turn(writer, cfg, "ana", "s1", "And the logs too.")  # the session reopens
    assert write_diary(writer, None, cfg, "ana", "s1", extractive=True) == "updated"
    assert log.new() == [("diary", diary_id, "update", "diary")]


# -- profile --------------------------------------------------------------------------------


def test_the_users_profile_edits_are_logged_once_each(config, writer):
    log = Log(config)

    def edit(write):
        return writer.submit(write)

    assert edit(lambda con: set_profile(con, "ana", "City", "Madrid", source="user",
                                        worker="user")) == "insert"
    assert edit(lambda con: set_profile(con, "ana", "city", "madrid ", source="user",
                                        worker="user")) == "unchanged"
    assert edit(lambda con: set_profile(con, "ana", "city", "Lisbon", source="user",
                                        worker="user")) == "update"
    assert edit(lambda con: delete_profile(con, "ana", "city")) is True
    assert edit(lambda con: delete_profile(con, "ana", "city")) is False
    assert edit(lambda con: set_profile(con, "ana", "city", "Porto", source="agent",
                                        worker="distill")) == "tombstoned"
    assert edit(lambda con: set_profile(con, "ana", "city", "Porto", source="user",
                                        worker="user")) == "update"
    assert log.new() == [("profile", "city", "insert", "user"),
                         ("profile", "city", "update", "user"),
                         ("profile", "city", "delete", "user"),
                         ("profile", "city", "restore", "user")]


# -- import and rebuild -----------------------------------------------------------------------


def test_an_import_logs_each_record_it_adds_once_and_a_second_import_nothing(
        config, writer, tmp_path):
    populate_memory(writer, config)
    writer.close()
    export_jsonl(config, "ana", tmp_path / "ana.jsonl")
    other = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=tmp_path / "other")
    DataDir.of(other).init()
    log = Log(other)

    report = import_path(other, tmp_path / "ana.jsonl", "ana")

    rows = log.new()
    assert {worker for *_, worker in rows} == {"import"}
    tombstoned_keys = scalar(other, "SELECT count(*) FROM profile WHERE deleted_at IS NOT NULL")
    assert tombstoned_keys == 1
    # One row per record added; a key that arrives deleted is two changes: set, then deleted.
    assert Counter(kind for kind, *_ in rows) == {
        "profile": report.added["profile"] + tombstoned_keys, "fact": report.added["fact"],
        "card": report.added["card"], "diary": report.added["diary"]}
    assert len({(kind, owner, action) for kind, owner, action, _ in rows}) == len(rows)

    import_path(other, tmp_path / "ana.jsonl", "ana")
    assert log.new() == []


def test_rebuild_logs_each_row_it_clears_or_restores_once(config, writer):
    populate_memory(writer, config)
    log = Log(config)
    log.new()
    cards, diaries = scalar(config, "SELECT count(*) FROM context_cards"), scalar(
        config, "SELECT count(*) FROM diary")
    agent_facts = scalar(config, "SELECT count(*) FROM facts WHERE source = 'agent' "
                                 "AND deleted_at IS NULL AND superseded_at IS NULL")
    agent_keys = scalar(config, "SELECT count(*) FROM profile WHERE source = 'agent' "
                                "AND deleted_at IS NULL")

    report = rebuild(config, all_layers=True)

    rows = log.new()
    assert {worker for *_, worker in rows} == {"rebuild"}
    assert Counter((kind, action) for kind, _, action, _ in rows) == {
        ("card", "delete"): cards, ("diary", "delete"): diaries,
        ("fact", "delete"): agent_facts, ("profile", "delete"): agent_keys,
        ("fact", "restore"): report.cleared["user_facts_made_current"]}
    assert report.cleared["user_facts_made_current"] == 1
    assert len({(kind, owner, action) for kind, owner, action, _ in rows}) == len(rows)


# -- one owner ------------------------------------------------------------------------------


def write_sql(*tables: str) -> re.Pattern[str]:
    """SQL that writes one of `tables`: an INSERT, REPLACE, UPDATE or DELETE of it."""
    return re.compile(
        r"\b(?:INSERT(?:\s+OR\s+[A-Z]+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+[A-Z]+)?|DELETE\s+FROM)"
        r"\s+[\"'`\[]?(?:" + "|".join(tables) + r")\b")


def writes_outside(pattern: re.Pattern[str], owns: Callable[[Path], bool]) -> list[str]:
    """Each write `pattern` finds in app/ and workers/ outside the modules `owns` allows."""
    sources = [path for folder in ("app", "workers") for path in (REPO_ROOT / folder).rglob("*.py")]
    assert any(owns(path) for path in sources)
    return [
        f"{path.relative_to(REPO_ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()}"
        for path in sources if not owns(path)
        for text in [path.read_text(encoding="utf-8")]
        for match in pattern.finditer(text)
    ]


MEMORY_TABLES = ("profile", "facts", "context_cards", "diary", "memory_log")
WRITE_SQL = write_sql(*MEMORY_TABLES)
MEMORY_PACKAGE = REPO_ROOT / "app" / "memory"
EVENT_WRITE_SQL = write_sql("events")
EVENTS_MODULE = REPO_ROOT / "app" / "events.py"


def test_the_write_pattern_recognises_each_kind_of_write():
    for sql in ("INSERT INTO memory_log (", "INSERT OR IGNORE INTO facts", "UPDATE context_cards SET",
                "DELETE FROM diary", 'REPLACE INTO "profile"', "UPDATE OR REPLACE facts SET"):
        assert WRITE_SQL.search(sql), sql
    for sql in ("INSERT INTO facts_fts (facts_fts)", "UPDATE events SET", "DELETE FROM embeddings",
                "SELECT id FROM facts"):
        assert not WRITE_SQL.search(sql), sql


def test_only_the_memory_package_writes_the_memory_tables():
    offenders = writes_outside(WRITE_SQL, lambda path: MEMORY_PACKAGE in path.parents)
    assert offenders == [], "write memory through app/memory instead:\n" + "\n".join(offenders)


def test_the_event_write_pattern_recognises_each_kind_of_write():
    for sql in ("INSERT INTO events (uuid", "INSERT OR IGNORE INTO events", "UPDATE events SET",
                "DELETE FROM events", 'REPLACE INTO "events"', "UPDATE OR REPLACE events SET"):
        assert EVENT_WRITE_SQL.search(sql), sql
    for sql in ("INSERT INTO events_fts (events_fts)", "SELECT id FROM events",
                "UPDATE sessions SET", "DELETE FROM embeddings", "UPDATE facts SET"):
        assert not EVENT_WRITE_SQL.search(sql), sql


def test_only_app_events_writes_the_events_table():
    offenders = writes_outside(EVENT_WRITE_SQL, lambda path: path == EVENTS_MODULE)
    assert offenders == [], ("write events and their marks through app/events.py instead:\n"
                             + "\n".join(offenders))


# Each remaining table the memory keeps, and the one module (or, for the tasks, the one
# wing: a task, its schedule and its runs are one feature) that writes it.
TABLE_OWNERS = {
    "sessions": "app/memory/sessions.py",
    "embeddings": "app/memory/embeddings.py",
    "scheduled_tasks": "app/tasks/",
    "task_runs": "app/tasks/",
    "access_tokens": "app/access.py",
    "macros": "app/turn/macros.py",
    "terminal_allow_rules": "app/turn/tools/terminal.py",
    "model_json_modes": "app/model/json_modes.py",
    "turn_records": "app/turn/records.py",
    # Hilo's own bookkeeping of what learning cost: no text of the conversation, so no provenance.
    "learning_calls": "app/learn/engine_time.py",
}


@pytest.mark.parametrize("table, owner", TABLE_OWNERS.items(), ids=list(TABLE_OWNERS))
def test_each_table_has_one_writer(table, owner):
    owned = REPO_ROOT / owner
    offenders = writes_outside(write_sql(table), lambda path: path == owned or (
        owner.endswith("/") and owned in path.parents))
    assert offenders == [], f"write {table} through {owner} instead:\n" + "\n".join(offenders)


# -- provenance: every write path states it, and one that states none is outside -------------

# The tables whose rows carry their provenance (docs/trust.md, app/memory/provenance.py).
PROVENANCE_TABLES = ("events", "facts", "profile", "context_cards", "diary", "sessions",
                     "scheduled_tasks")
INSERT_SQL = re.compile(
    r"\bINSERT(?:\s+OR\s+[A-Z]+)?\s+INTO\s+[\"'`\[]?(" + "|".join(PROVENANCE_TABLES)
    + r")\b[\"'`\]]?\s*\(([^)]*)\)")
# The functions that write such a row, and the keyword that states whose hand it is.
STATED_BY = {
    "upsert_fact": "from_outside", "store_fact": "from_outside", "set_profile": "from_outside",
    "remember_fact": "from_outside", "correct_fact": "from_outside",
    "write_diary_entry": "from_outside", "add_diary_entry": "from_outside",
    "NewCard": "from_outside", "store_extraction": "from_outside", "add_task": "from_outside",
    "insert_task": "from_outside", "prepare_event": "origin", "append_event": "origin",
    "start_turn": "origin",
}


def _source_files() -> list[Path]:
    return [path for folder in ("app", "workers") for path in (REPO_ROOT / folder).rglob("*.py")]


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)


def test_every_insert_into_a_provenance_table_names_its_provenance():
    found, unstated = 0, []
    for path in _source_files():
        text = path.read_text(encoding="utf-8")
        for match in INSERT_SQL.finditer(text):
            found += 1
            if "from_outside" not in match.group(2):
                line = text.count("\n", 0, match.start()) + 1
                unstated.append(f"{path.relative_to(REPO_ROOT)}:{line}: {match.group(1)}")
    assert found >= len(PROVENANCE_TABLES)
    assert unstated == [], "name from_outside (app.memory.provenance.is_outside):\n" + "\n".join(
        unstated)


def test_every_write_path_states_whose_hand_it_is():
    """Each call in app/ and workers/ of a function that writes a row with provenance says
    whose hand the row is; a new path that says nothing fails here (and would be outside)."""
    seen: Counter = Counter()
    unstated = []
    for path in _source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in _calls(tree):
            name = _called(call)
            if name not in STATED_BY or ast.unparse(call.func) == "progress.add_task":
                continue  # (rich's progress bar adds a task of its own)
            seen[name] += 1
            keywords = {k.arg for k in call.keywords}
            # ChatService.append / append_all take the event's fields as keywords too.
            if STATED_BY[name] not in keywords and None not in keywords:
                unstated.append(f"{path.relative_to(REPO_ROOT)}:{call.lineno}: {name}(…) "
                                f"without {STATED_BY[name]}=")
        for call in _calls(tree):  # a service's append(user, session, role, text, ...)
            if _called(call) == "append" and len(call.args) >= 4:
                seen["append"] += 1
                if "origin" not in {k.arg for k in call.keywords}:
                    unstated.append(f"{path.relative_to(REPO_ROOT)}:{call.lineno}: append(…) "
                                    "without origin=")
    assert {"store_fact", "set_profile", "NewCard", "add_task", "prepare_event",
            "append"} <= set(seen)  # the walk finds the write paths
    assert unstated == [], "state the provenance:\n" + "\n".join(unstated)


def test_a_write_that_states_no_provenance_is_from_outside(config, writer):
    """The functions' defaults and the schema's: nothing stated, outside."""
    event = append_event(writer, config, "ana", "s1", "user", "hello")
    written = writer.submit(lambda con: store_fact(con, "ana", "fact", "k", "v", source="user",
                                                   worker="user"))
    writer.submit(lambda con: set_profile(con, "ana", "city", "Porto", source="user",
                                          worker="user"))
    writer.submit(lambda con: add_card(con, "ana", NewCard("s1", "a card", "", None, None, 0),
                                       worker="test"))
    writer.submit(lambda con: write_diary_entry(con, "ana", "s1", "a note"))
    task = add_task(writer, config, "every day at 9", "say hi", user_id="ana",
                    source="http").task
    assert event.from_outside and task.prompt_from_outside
    for table in ("events", "facts", "profile", "context_cards", "diary", "sessions",
                  "scheduled_tasks"):
        assert query(config, f"SELECT DISTINCT from_outside FROM {table}") == [(1,)], table
    assert written.action == "insert"
    # The schema's own default, for a row written without naming the column.
    assert query(config, "SELECT dflt_value FROM pragma_table_info('facts') "
                         "WHERE name = 'from_outside'") == [("1",)]


def test_only_the_owners_own_hand_makes_a_row_the_owners():
    assert [is_outside(hand) for hand in HANDS] == [False, False, True]
    assert is_outside() and is_outside(None, reading=False)
    assert is_outside("owner", reading=True) and is_outside("hilo", reading=[False, True])
    assert not is_outside("hilo", reading=[False, False])
