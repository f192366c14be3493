"""What export and import lost (issue 30): a task's zone, the record of a forgotten fact,
MEMORY.md; and a cron expression the API refuses, which an import ran every minute."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from app.config import load_config
from app.datadir import BOOTSTRAP_TEMPLATE, DataDir
from app.db import Durability, connect_readonly
from app.errors import NotFound
from app.events import append_event
from app.memory import current_fact, store_fact, upsert_fact
from app.memory.facts import forgotten_key
from app.memory.forget import forget_fact
from app.ops.transfer import export_jsonl, export_markdown, import_path
from app.ops.transfer.memory_md import accept_imported_memory_md
from app.tasks.store import add_task, list_tasks
from app.timeutil import parse_rfc3339
from app.writer import Writer
from tests.conftest import REPO_ROOT

USER = "default"
FORMATS = ["jsonl", "md"]


@pytest.fixture
def empty(tmp_path):
    """A second data directory, just initialised."""
    other = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=tmp_path / "other")
    DataDir.of(other).init()
    return other


def export(config, fmt: str, tmp_path: Path) -> Path:
    out = tmp_path / ("export.jsonl" if fmt == "jsonl" else "export")
    (export_jsonl if fmt == "jsonl" else export_markdown)(config, USER, out)
    return out


def memory_db(config):
    return connect_readonly(DataDir.of(config).memory_db)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_task_keeps_its_time_zone(config, writer, empty, tmp_path, fmt):
    add_task(writer, config, "every day at 8", "Plan the day.", timezone_name="America/New_York", source="cli")
    writer.close()

    report = import_path(empty, export(config, fmt, tmp_path), USER)

    assert not report.problems
    [task] = list_tasks(memory_db(empty), USER)
    assert task.timezone == "America/New_York"
    next_run = parse_rfc3339(task.next_run_at).astimezone(ZoneInfo("America/New_York"))
    assert (next_run.hour, next_run.minute) == (8, 0)  # not 08:00 UTC


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forgotten_fact_stays_forgotten_after_an_import(config, writer, empty, tmp_path, fmt):
    said = append_event(writer, config, USER, "s1", "user", "I am allergic to peanuts.")
    writer.submit(lambda con: forget_fact(con, USER, upsert_fact(
        con, USER, "fact", "allergy", "peanuts", source="agent", worker="distill",
        source_event_id=said.id).fact_id))
    writer.close()

    report = import_path(empty, export(config, fmt, tmp_path), USER)

    assert not report.problems  # was: "fact fact/allergy has no value", and the record lost
    event_id = memory_db(empty).execute("SELECT id FROM events WHERE uuid = ?",
                                        (said.uuid,)).fetchone()[0]
    # The distiller reads the same message again: the forget record turns it away.
    with Writer(DataDir.of(empty).memory_db, Durability.FULL) as there:
        again = there.submit(lambda con: store_fact(
            con, USER, "fact", "allergy", "peanuts", source="agent", worker="distill",
            source_event_id=event_id))
        assert again.action == "tombstoned"
        assert there.submit(lambda con: current_fact(con, USER, "fact", "allergy")) is None
        fact = there.submit(lambda con: current_fact(con, USER, "fact", forgotten_key("allergy")))
    assert (fact.value, fact.deleted_at is not None) == ("", True)
    exported = export_jsonl(empty, USER, tmp_path / "again.jsonl").path.read_text()
    facts = "".join(line for line in exported.splitlines() if '"type": "fact"' in line)
    assert "peanuts" not in facts and "allergy" not in facts  # neither the value nor its key


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_import_refuses_a_cron_the_api_refuses_and_keeps_the_rest(config, writer, empty,
                                                                    tmp_path, fmt):
    add_task(writer, config, "every day at 8", "Plan the day.", name="plan", source="cli")
    writer.submit(lambda con: upsert_fact(con, USER, "fact", "editor", "neovim", source="user",
                                          worker="user"))
    writer.close()
    out = export(config, fmt, tmp_path)
    if fmt == "jsonl":
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        for line in lines:
            if line["type"] == "task":
                line["cron_expr"] = "0 0 * * * * *"
        out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    else:
        task_file = out / "tasks" / "plan.md"
        task_file.write_text(task_file.read_text().replace("cron_expr: 0 8 * * *",
                                                           "cron_expr: 0 0 * * * * *"))

    report = import_path(empty, out, USER)

    where = "export.jsonl line" if fmt == "jsonl" else "tasks/plan.md"
    [problem] = report.problems
    assert problem.startswith(where) and "task skipped" in problem and "7 fields" in problem
    assert "\n" not in problem and "Write it like" not in problem  # one line, no grammar
    assert list_tasks(memory_db(empty), USER) == []
    assert report.added["fact"] == 1


def test_an_import_refuses_a_zone_that_does_not_exist(empty, tmp_path):
    out = tmp_path / "tasks.jsonl"
    out.write_text(json.dumps({"type": "task", "name": "x", "schedule": "every day at 8",
                               "cron_expr": "0 8 * * *", "prompt": "p",
                               "timezone": "Mars/Olympus"}) + "\n")
    report = import_path(empty, out, USER)
    assert len(report.problems) == 1 and '"Mars/Olympus" is not a time zone' in report.problems[0]
    assert list_tasks(memory_db(empty), USER) == []


MINE = "# About me\nI am Ana. Answer in Spanish.\n"


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_md_travels_and_waits_beside_until_the_owner_accepts_it(config, data_dir, empty,
                                                                       tmp_path, fmt):
    """Every conversation reads MEMORY.md as the owner's own words: an import never
    installs one, and says in one line where it waits and how to accept it."""
    DataDir.of(config).bootstrap.write_text(MINE)
    out = export(config, fmt, tmp_path)
    bootstrap, beside = DataDir.of(empty).bootstrap, DataDir.of(empty).root / "MEMORY.imported.md"
    template = bootstrap.read_text()

    report = import_path(empty, out, USER)  # an empty data directory holds the template

    assert bootstrap.read_text() == template and beside.read_text() == MINE
    assert (f"MEMORY.md: the imported one is kept beside it at {beside}, which no conversation "
            "reads; to use it, read it and run `hilo memory accept-import`.") in report.summary()
    assert not import_path(empty, out, USER).added  # the same one: nothing to do
    assert accept_imported_memory_md(empty) == (bootstrap, None)
    assert bootstrap.read_text() == MINE and not beside.exists()

    bootstrap.write_text("# Mine, written here\n")
    import_path(empty, out, USER)
    assert bootstrap.read_text() == "# Mine, written here\n" and beside.read_text() == MINE
    _, kept = accept_imported_memory_md(empty)
    assert bootstrap.read_text() == MINE and kept.read_text() == "# Mine, written here\n"
    with pytest.raises(NotFound, match="no imported MEMORY.md waits"):
        accept_imported_memory_md(empty)
    assert not report.problems


def test_an_untouched_template_is_not_exported(config, data_dir, tmp_path):
    assert export_jsonl(config, USER, tmp_path / "out.jsonl").written.get("memory_md") is None
    export_markdown(config, USER, tmp_path / "md")
    assert not (tmp_path / "md" / "MEMORY.md").exists()


def test_the_markdown_folder_shows_messages_history_and_what_was_forgotten(config, writer,
                                                                          tmp_path):
    said = append_event(writer, config, USER, "s1", "user", "I use vim.\n\n  Mostly.")
    writer.submit(lambda con: upsert_fact(con, USER, "preference", "editor", "vim",
                                          source="user", worker="user"))
    writer.submit(lambda con: upsert_fact(con, USER, "preference", "editor", "neovim",
                                          source="user", worker="user"))
    writer.submit(lambda con: forget_fact(con, USER, upsert_fact(
        con, USER, "fact", "allergy", "peanuts", source="user", worker="user").fact_id))
    writer.close()
    out = tmp_path / "md"

    export_markdown(config, USER, out)

    [session] = (out / "sessions").iterdir()
    text = session.read_text()
    assert f'"uuid": "{said.uuid}"' in text and "\n> I use vim.\n>\n>   Mostly.\n" in text
    history = (out / "history.md").read_text()
    assert "## preference/editor" in history and "\n> vim\n" in history
    forgotten = (out / "forgotten.md").read_text()
    assert "## fact/forgotten:" in forgotten  # its key's hash: the key is forgotten too
    assert "allergy" not in forgotten and "peanuts" not in forgotten
    assert datetime.now(UTC).strftime("%Y-%m-%d") in forgotten


def test_exporting_again_removes_a_memory_md_the_owner_took_back(config, data_dir, tmp_path):
    DataDir.of(config).bootstrap.write_text(MINE)
    export_markdown(config, USER, tmp_path / "md")
    DataDir.of(config).bootstrap.write_text(BOOTSTRAP_TEMPLATE)
    report = export_markdown(config, USER, tmp_path / "md")
    assert report.removed_stale == 1 and not (tmp_path / "md" / "MEMORY.md").exists()
