"""Export to markdown and JSONL, import them back, and import a kinder-agent database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.datadir import DataDir
from app.db import connect_readonly
from app.ops.transfer import (
    TransferError,
    export_jsonl,
    export_markdown,
    import_kinder_agent,
    import_path,
)
from tests.fixtures.kinder_agent import FIRST, SECOND, SECRET
from tests.fixtures.memory import full_state, memory_state, populate_memory, table_counts


def db(config) -> Path:
    return DataDir.of(config).memory_db


# -- markdown -------------------------------------------------------------------------------


def test_markdown_export_is_a_folder_a_person_can_read(config, populated, tmp_path):
    out = tmp_path / "notes"
    report = export_markdown(config, "ana", out)

    profile = (out / "profile.md").read_text()
    assert "- name: Ana\n" in profile and "- editor: neovim\n" in profile
    assert "- bio: Backend developer.\n  Likes Go.\n\n  Lives in Madrid.\n" in profile
    assert "city" not in profile.split("---")[-1]  # a deleted key is not shown as known
    facts = sorted(p.name for p in (out / "facts").iterdir())
    assert len(facts) == 4 and any(name.endswith("-preference-editor.md") for name in facts)
    editor = next((out / "facts").glob("*-preference-editor.md")).read_text()
    head = yaml.safe_load(editor.split("---")[1])
    assert set(head) == {"id", "category", "key", "source", "created_at", "updated_at", "importance"}
    assert head["category"] == "preference" and head["source"] == "user"
    assert editor.rstrip().endswith("\nneovim with a dark theme")
    assert facts[0][:10] == head["created_at"][:10]
    card = next((out / "cards").iterdir()).read_text()
    assert card.rstrip().endswith("Ana writes Go; billing moved to Postgres.")
    diary = (out / "diary" / "2026-11-28.md").read_text()
    assert "Ana moved billing to Postgres and planned the index." in diary
    assert report.written == {"session": 2, "event": 8, "profile": 5, "fact": 7, "card": 1,
                              "diary": 1}


def test_markdown_round_trip_into_an_empty_database(config, populated, empty, tmp_path):
    export_markdown(config, "ana", tmp_path / "notes")
    report = import_path(empty, tmp_path / "notes", "ana")
    # Everything the JSON lines carry: messages, fact history, tombstones.
    assert full_state(db(empty), "ana") == full_state(db(config), "ana")
    assert report.added == {"session": 2, "event": 8, "profile": 5, "fact": 7, "card": 1,
                            "diary": 1}
    assert not report.problems


def test_markdown_import_twice_duplicates_nothing(config, populated, empty, tmp_path):
    export_markdown(config, "ana", tmp_path / "notes")
    import_path(empty, tmp_path / "notes", "ana")
    counts = table_counts(db(empty))
    again = import_path(empty, tmp_path / "notes", "ana")
    assert table_counts(db(empty)) == counts
    assert not again.added and not again.updated
    # And into the very database it came from: everything is already there.
    before = table_counts(db(config))
    assert not import_path(config, tmp_path / "notes", "ana").added
    assert table_counts(db(config)) == before


def test_a_fact_a_person_adds_to_the_folder_is_imported_as_theirs(config, populated, empty, tmp_path):
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    (out / "facts" / "my-own.md").write_text("---\ncategory: preference\nkey: Coffee\n---\n\nNo sugar.\n")
    (out / "profile.md").write_text((out / "profile.md").read_text() + "- pronouns: she/her\n")
    import_path(empty, out, "ana")
    con = connect_readonly(db(empty))
    assert con.execute("SELECT value, source FROM facts WHERE key = 'coffee'").fetchone() == (
        "No sugar.", "user")
    assert con.execute("SELECT value, source FROM profile WHERE key = 'pronouns'").fetchone() == (
        "she/her", "user")
    assert con.execute("SELECT value FROM profile WHERE key = 'work: team'").fetchone() == ("billing",)


def test_exporting_again_updates_the_folder_and_keeps_a_persons_notes(config, writer, tmp_path):
    from app.memory import delete_fact, list_facts

    populate_memory(writer, config)
    out = tmp_path / "notes"
    export_markdown(config, "ana", out)
    (out / "facts" / "todo.md").write_text("A note of mine, not a fact.\n")
    pet_free = {p.name for p in (out / "facts").iterdir()}
    solution = next(f for f in list_facts(connect_readonly(db(config)), "ana") if f.category == "solution")
    writer.submit(lambda con: delete_fact(con, "ana", solution.id))
    report = export_markdown(config, "ana", out)
    assert report.removed_stale == 1
    assert {p.name for p in (out / "facts").iterdir()} == {
        n for n in pet_free if "-solution-" not in n}
    with pytest.raises(TransferError, match="did not write"):
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "profile.md").write_text("# my own profile\n")
        export_markdown(config, "ana", tmp_path / "mine")


# -- JSONL ----------------------------------------------------------------------------------


def test_jsonl_round_trip_restores_events_and_every_layer(config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    report = export_jsonl(config, "ana", out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["type"] == "header"
    assert {line["type"] for line in lines[1:]} == {"session", "event", "card", "profile", "fact",
                                                    "diary"}
    assert report.written["event"] == 8

    imported = import_path(empty, out, "ana")

    assert full_state(db(empty), "ana") == full_state(db(config), "ana")
    assert imported.added["event"] == 8 and imported.added["session"] == 2
    assert not imported.problems


def test_what_an_import_brings_is_outside_content(config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    import_path(empty, out, "ana")
    con = connect_readonly(db(empty))
    assert set(con.execute("SELECT origin, from_outside FROM events")) == {("import", 1)}
    for table in ("facts", "profile", "context_cards", "diary"):
        assert set(con.execute(f"SELECT from_outside FROM {table}")) == {(1,)}, table


def test_jsonl_import_twice_duplicates_nothing(config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    import_path(empty, out, "ana")
    counts = table_counts(db(empty))
    again = import_path(empty, out, "ana")
    assert table_counts(db(empty)) == counts
    assert not again.added and not again.updated
    before = table_counts(db(config))
    assert not import_path(config, out, "ana").added  # into the database it came from
    assert table_counts(db(config)) == before


def test_jsonl_import_as_another_user_copies_without_touching_the_first(config, populated, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    ana = full_state(db(config), "ana")
    import_path(config, out, "bob")
    import_path(config, out, "bob")
    bob = full_state(db(config), "bob")
    assert full_state(db(config), "ana") == ana
    assert len(bob["events"]) == len(ana["events"])
    assert {e[0] for e in bob["events"]}.isdisjoint(e[0] for e in ana["events"])
    assert bob["facts"] == ana["facts"] and bob["profile"] == ana["profile"]


def test_a_bad_jsonl_line_is_reported_and_the_rest_imported(config, populated, empty, tmp_path):
    out = tmp_path / "ana.jsonl"
    export_jsonl(config, "ana", out)
    lines = out.read_text().splitlines()
    lines.insert(3, "{not json")
    lines.append(json.dumps({"type": "fact", "category": "gossip", "key": "k", "value": "v"}))
    out.write_text("\n".join(lines) + "\n")
    report = import_path(empty, out, "ana")
    assert memory_state(db(empty), "ana") == memory_state(db(config), "ana")
    assert len(report.problems) == 2
    assert "line 4: not JSON" in report.problems[0] and "category" in report.problems[1]


def test_importing_something_else_is_a_clear_error(empty, tmp_path):
    with pytest.raises(TransferError, match="does not exist"):
        import_path(empty, tmp_path / "nothing-here", "ana")
    (tmp_path / "other.jsonl").write_text(json.dumps({"type": "header", "format": "mem0"}) + "\n")
    with pytest.raises(TransferError, match="not a Hilo export"):
        import_path(empty, tmp_path / "other.jsonl", "ana")


# -- kinder-agent ---------------------------------------------------------------------------




def test_kinder_agent_import_keeps_sessions_compaction_and_dates(empty, kinder):
    report = import_kinder_agent(empty, kinder.path, "ana")
    assert not report.problems
    con = connect_readonly(db(empty))

    sessions = list(con.execute("SELECT id, started_at, last_event_at, ended_at FROM sessions "
                                "WHERE user_id = 'ana' ORDER BY id"))
    assert sessions == [
        (FIRST, "2026-11-28T10:00:00.000000Z", "2026-11-28T10:09:00.000000Z",
         "2026-11-28T10:09:00.000000Z"),
        (SECOND, "2026-11-29T21:10:00.000000Z", "2026-11-29T21:15:00.000000Z",
         "2026-11-29T21:15:00.000000Z"),
    ]
    events = list(con.execute(
        "SELECT e.session_id, e.created_at, e.compacted, c.summary FROM events e "
        "LEFT JOIN context_cards c ON c.id = e.card_id WHERE e.user_id = 'ana' ORDER BY e.id"))
    assert len(events) == kinder.messages
    assert events[0][:2] == (FIRST, "2026-11-28T10:00:00.000000Z")
    first = [(compacted, summary) for sid, _, compacted, summary in events if sid == FIRST]
    assert [s[:8] for _, s in first[:4] if s] == ["Ana intr"] * 4  # the card made after them
    assert [s[:8] for _, s in first[4:8] if s] == ["Billing "] * 4
    assert first[8:] == [(0, None), (0, None)]  # not compacted yet
    second = [(compacted, summary) for sid, _, compacted, summary in events if sid == SECOND]
    assert second[:4] == [(1, None)] * 4 and second[4:] == [(0, None)] * 2  # card lost: no link

    cards = list(con.execute("SELECT created_at, keywords, event_count, first_event_id, last_event_id "
                             "FROM context_cards ORDER BY created_at"))
    assert [c[:3] for c in cards] == [("2026-11-28T10:03:30.000000Z", "ana, neovim, dark theme", 4),
                                      ("2026-11-28T10:07:30.000000Z", "postgres, billing, index", 4)]
    assert cards[0][4] - cards[0][3] == 3

    facts = {(cat, value): created for cat, value, created in con.execute(
        "SELECT category, value, created_at FROM facts")}
    assert facts == {
        ("preference", "Ana uses neovim with a dark theme"): "2026-11-28T10:02:40.000000Z",
        ("decision", "Billing service moves to Postgres"): "2026-11-28T10:04:40.000000Z",
        ("solution", "Create the missing index before copying rows"): "2026-11-28T10:07:40.000000Z",
        ("fact", "Backups run on Sundays"): "2026-11-29T21:13:40.000000Z",
    }
    assert dict(con.execute("SELECT key, value FROM profile")) == {"name": "Ana", "editor": "neovim"}
    diary = list(con.execute("SELECT session_id, created_at FROM diary ORDER BY created_at"))
    # A diary dated by day only was written when its session ended.
    assert diary == [(FIRST, "2026-11-28T10:09:00.000000Z"), (SECOND, "2026-11-29T21:15:00.000000Z")]


def test_kinder_agent_import_redacts_secrets_and_adds_nothing_twice(empty, kinder):
    import_kinder_agent(empty, kinder.path, "ana")
    con = connect_readonly(db(empty))
    contents = " ".join(row[0] for row in con.execute("SELECT content FROM events"))
    assert SECRET not in contents and "[REDACTED:" in contents
    counts = table_counts(db(empty))
    again = import_kinder_agent(empty, kinder.path, "ana")
    assert table_counts(db(empty)) == counts and not again.added and not again.updated


def test_kinder_agent_import_refuses_a_database_without_messages(empty, tmp_path):
    import sqlite3

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (body TEXT)").connection.close()
    with pytest.raises(TransferError, match="no messages table"):
        import_kinder_agent(empty, other, "ana")
