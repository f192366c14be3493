"""Backup while the memory is being written, restore with its safety checks, rebuild."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.datadir import DataDir
from app.db import Durability, connect, connect_readonly
from app.events import append_event
from app.fts import build_match_query
from app.memory import list_facts, list_profile, profile_as_of
from app.ops.backup import (
    AlreadyRunning,
    BackupError,
    backup,
    rebuild,
    restore,
)
from app.timeutil import utc_now
from app.writer import Writer
from tests.fixtures.memory import populate_memory, table_counts

LONG = "a line of conversation long enough to fill pages " * 8


def uuids(path: Path) -> set[str]:
    con = connect_readonly(path)
    try:
        return {row[0] for row in con.execute("SELECT uuid FROM events")}
    finally:
        con.close()


def integrity(path: Path) -> list[str]:
    con = connect_readonly(path)
    try:
        return [row[0] for row in con.execute("PRAGMA integrity_check")]
    finally:
        con.close()


def search(path: Path, table: str, text: str) -> list[int]:
    con = connect_readonly(path)
    try:
        return [row[0] for row in con.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (build_match_query(text),))]
    finally:
        con.close()


# -- backup ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)  # a backup restarted by every commit would never finish
def test_backup_under_concurrent_writes_is_intact_and_has_every_event_committed_before_it(
        config, writer, tmp_path):
    before = {append_event(writer, config, "ana", "s1", "user", f"{n} {LONG}").uuid
              for n in range(300)}
    stop, started = threading.Event(), threading.Event()
    written_during: list[str] = []

    def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            written_during.append(append_event(writer, config, "ana", "s2", "user", f"bg {n}").uuid)
            started.set()
            n += 1

    background = threading.Thread(target=keep_writing)
    background.start()
    started.wait()
    steps: list[tuple[int, int]] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "copy":
            steps.append((done, total))
            # A commit between every two steps, for certain, besides the background thread's.
            append_event(writer, config, "ana", "s3", "assistant", f"between steps {done}")

    try:
        report = backup(config, tmp_path / "memory-backup.sqlite3", progress, pages_per_step=2)
    finally:
        stop.set()
        background.join()

    assert report.integrity == "ok" and integrity(report.dest) == ["ok"]
    copied = uuids(report.dest)
    assert before <= copied
    assert len(uuids(DataDir.of(config).memory_db)) > len(copied)  # writes went on meanwhile
    # One snapshot, never restarted by those commits: progress only moves forward.
    assert len(steps) == math.ceil(report.pages / 2) == report.steps
    assert [d for d, _ in steps] == sorted(d for d, _ in steps)
    assert steps[-1] == (report.pages, report.pages)
    assert report.events == len(copied)


def test_backup_into_a_directory_writes_a_dated_file_and_never_overwrites(config, data_dir, tmp_path):
    folder = tmp_path / "backups"
    folder.mkdir()
    report = backup(config, folder)
    assert report.dest.parent == folder and report.dest.name.startswith("memory-")
    assert report.schema_version >= 1
    with pytest.raises(BackupError, match="already exists"):
        backup(config, report.dest)
    assert backup(config, report.dest, overwrite=True).integrity == "ok"
    # No partial files left: the database and the MEMORY.md beside it.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [report.dest.name, f"{report.dest.name}.MEMORY.md"])


# -- restore --------------------------------------------------------------------------------


@pytest.fixture
def backed_up(config, data_dir, tmp_path):
    """A populated memory, a backup of it, then one more event only the live file has."""
    with Writer(DataDir(data_dir).memory_db, Durability.FULL) as w:
        populate_memory(w, config)
        copy = backup(config, tmp_path / "good.sqlite3").dest
        later = append_event(w, config, "ana", "s2", "user", "written after the backup").uuid
    return copy, later


def test_restore_refuses_while_a_worker_is_running(config, backed_up):
    copy, later = backed_up
    DataDir.of(config).pid_file("worker", os.getpid()).write_text(f"{os.getpid()}\n")
    assert DataDir.of(config).live_pids("worker")
    with pytest.raises(AlreadyRunning, match="worker"):
        restore(config, copy)
    assert later in uuids(DataDir.of(config).memory_db)  # untouched


def test_restore_refuses_while_the_server_is_running(config, backed_up):
    copy, later = backed_up
    DataDir.of(config).pid_file("serve", os.getpid()).write_text(f"{os.getpid()}\n")
    with pytest.raises(AlreadyRunning, match="server"):
        restore(config, copy)
    assert later in uuids(DataDir.of(config).memory_db)


def test_restore_names_both_when_the_worker_and_the_server_are_running(config, backed_up):
    copy, _ = backed_up
    for role in ("worker", "serve"):
        DataDir.of(config).pid_file(role, os.getpid()).write_text(f"{os.getpid()}\n")
    with pytest.raises(AlreadyRunning) as refused:
        restore(config, copy)
    message = str(refused.value)
    assert "the worker (pid" in message and "and the server (pid" in message
    assert ") are running: stop them first (pass --force only if those pids are not Hilo " \
        "processes)" in message


def test_restore_works_with_no_worker_and_keeps_the_old_file(config, backed_up):
    copy, later = backed_up
    # A pid file left by a worker that is gone does not count.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    DataDir.of(config).pid_file("worker", dead.pid).write_text(f"{dead.pid}\n")
    live = DataDir.of(config).memory_db

    report = restore(config, copy)

    assert uuids(live) == uuids(copy) and later not in uuids(live)
    assert report.kept_as.name.startswith("memory.sqlite3.before-restore-")
    assert later in uuids(report.kept_as)  # nothing the user had is lost
    assert integrity(live) == ["ok"] and integrity(report.kept_as) == ["ok"]
    assert not Path(f"{live}-wal").exists() or Path(f"{live}-wal").stat().st_size == 0
    con = connect_readonly(live)
    assert list_profile(con, "ana")  # the restored memory is usable
    con.close()


def test_restore_replaces_a_damaged_database(config, backed_up):
    copy, _ = backed_up
    live = DataDir.of(config).memory_db
    live.write_bytes(b"\0garbage" * 4096)  # what restore is for
    report = restore(config, copy)
    assert uuids(live) == uuids(copy) and integrity(live) == ["ok"]
    assert report.kept_as.read_bytes().startswith(b"\0garbage")


def test_restore_refuses_a_damaged_or_foreign_file_and_touches_nothing(config, backed_up, tmp_path):
    _, later = backed_up
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(BackupError, match="not a SQLite database|cannot be opened"):
        restore(config, garbage)
    foreign = tmp_path / "foreign.sqlite3"
    con = connect(foreign)
    con.execute("CREATE TABLE notes (body TEXT)")
    con.close()
    with pytest.raises(BackupError, match="not a Hilo memory database"):
        restore(config, foreign)
    with pytest.raises(BackupError, match="does not exist"):
        restore(config, tmp_path / "missing.sqlite3")
    assert later in uuids(DataDir.of(config).memory_db)
    assert not list(config.data_dir.glob("*before-restore*"))


def test_restore_refuses_while_another_connection_has_the_database_open(config, backed_up):
    copy, later = backed_up
    holder = connect(DataDir.of(config).memory_db)  # a `hilo chat` without a pid file
    try:
        with pytest.raises(BackupError, match="another process has"):
            restore(config, copy)
    finally:
        holder.close()
    assert later in uuids(DataDir.of(config).memory_db)


# -- rebuild --------------------------------------------------------------------------------


def test_rebuild_restores_a_deleted_full_text_index(config, writer):
    populate_memory(writer, config)
    path = DataDir.of(config).memory_db
    assert search(path, "events_fts", "zebra") and search(path, "facts_fts", "Postgres")
    for table in ("events_fts", "cards_fts", "facts_fts"):
        writer.submit(lambda con, t=table: con.execute(f"INSERT INTO {t} ({t}) VALUES ('delete-all')"))
    assert search(path, "events_fts", "zebra") == [] and search(path, "facts_fts", "Postgres") == []
    seen: list[tuple[str, int, int]] = []

    report = rebuild(config, progress=lambda *step: seen.append(step))

    assert search(path, "events_fts", "zebra") and search(path, "facts_fts", "Postgres")
    assert search(path, "cards_fts", "billing")
    assert report.fts_tables == ["events_fts", "cards_fts", "facts_fts", "event_labels_fts"]
    assert not report.cleared
    assert seen[-1] == ("vector indexes", 5, 5)


def test_rebuild_all_resets_derived_layers_but_keeps_user_facts(config, writer):
    memory = populate_memory(writer, config)
    path = DataDir.of(config).memory_db
    counted: list[tuple[str, int, int]] = []

    report = rebuild(config, all_layers=True, progress=lambda *step: counted.append(step))

    counts = table_counts(path)
    assert counts["context_cards"] == counts["diary"] == counts["embeddings"] == 0
    con = connect_readonly(path)
    facts = {(f.category, f.key): (f.value, f.source) for f in list_facts(con, "ana")}
    assert facts == {("preference", "editor"): ("neovim with a dark theme", "user"),
                     # the user's own value is current again once the agent's is gone
                     ("fact", "languages"): ("Go", "user")}
    tombstone = con.execute("SELECT deleted_at FROM facts WHERE id = ?",
                            (memory.tombstoned_fact_id,)).fetchone()
    assert tombstone[0] is not None  # the user's deletion stays, so no worker re-creates it
    assert {p.key for p in list_profile(con, "ana")} == {"name", "bio"}
    assert con.execute("SELECT deleted_at IS NOT NULL FROM profile WHERE key = 'city'").fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM events WHERE distilled_at IS NOT NULL OR compacted = 1 "
                       "OR card_id IS NOT NULL").fetchone() == (0,)
    assert counts["events"] == len(memory.event_ids)  # the source of truth is untouched
    assert "editor" not in profile_as_of(con, "ana", utc_now())  # the clearing is logged
    assert report.cleared["cards"] == 1 and report.cleared["events_reset"] == 6
    assert counted[-1][1:] == (11, 11) and [c[1] for c in counted] == list(range(1, 12))
    assert search(path, "events_fts", "zebra")
