"""The memory database: migrations, schema, FTS sync, connection modes."""

from __future__ import annotations

import apsw
import pytest

from app import db
from app.db import Durability, SchemaTooNew, connect, connect_readonly, migrate

LAYER_TABLES = ["sessions", "events", "context_cards", "profile", "facts", "diary",
                "embeddings", "scheduled_tasks", "memory_log"]


def schema(con: apsw.Connection) -> list[tuple]:
    return list(con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name"))


def test_migrations_apply_once_and_are_recorded(tmp_path):
    con = connect(tmp_path / "m.sqlite3")
    first = migrate(con)
    before = schema(con)
    assert first == [m.name for m in db.available_migrations()]
    assert migrate(con) == []
    assert schema(con) == before
    recorded = list(con.execute("SELECT name, applied_at FROM _hilo_migrations"))
    assert [r[0] for r in recorded] == first and all(r[1].endswith("Z") for r in recorded)


def test_database_from_a_newer_hilo_is_refused(tmp_path):
    con = connect(tmp_path / "m.sqlite3")
    migrate(con)
    con.execute("INSERT INTO _hilo_migrations VALUES ('9999_from_the_future.sql', 'now')")
    with pytest.raises(SchemaTooNew, match="newer Hilo.*9999_from_the_future.sql.*upgrade Hilo"):
        migrate(con)


def test_every_layer_table_exists_and_carries_user_id(tmp_path):
    con = connect(tmp_path / "m.sqlite3")
    migrate(con)
    for table in LAYER_TABLES:
        columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
        assert "user_id" in columns, table


def test_scheduled_tasks_columns(tmp_path):
    con = connect(tmp_path / "m.sqlite3")
    migrate(con)
    columns = [row[1] for row in con.execute("PRAGMA table_info(scheduled_tasks)")]
    assert columns == ["id", "user_id", "name", "cron_expr", "original_schedule", "prompt",
                       "source", "is_oneshot", "is_paused", "is_trusted", "next_run_at",
                       "last_run_at", "created_at", "updated_at", "timezone", "from_outside"]


def test_connections_use_wal_and_the_asked_durability(tmp_path):
    full = connect(tmp_path / "m.sqlite3", Durability.FULL)
    normal = connect(tmp_path / "m.sqlite3", Durability.NORMAL)
    assert full.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert full.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert normal.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert full.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_readonly_connection_cannot_write_and_refuses_missing_file(tmp_path):
    con = connect(tmp_path / "m.sqlite3")
    migrate(con)
    ro = connect_readonly(tmp_path / "m.sqlite3")
    with pytest.raises(apsw.ReadOnlyError):
        ro.execute("INSERT INTO sessions (user_id, id, started_at, last_event_at) "
                   "VALUES ('u', 's', 'a', 'b')")
    with pytest.raises(db.DatabaseError, match="hilo init"):
        connect_readonly(tmp_path / "missing.sqlite3")


def test_fts_follows_inserts_updates_and_deletes(writer, config):
    from app.events import append_event

    event = append_event(writer, config, "ana", "s1", "user", "I adopted a dog named Pixel")
    path = writer.path
    ro = connect_readonly(path)

    def hits(word: str) -> list[int]:
        return [r[0] for r in ro.execute(
            "SELECT rowid FROM events_fts WHERE events_fts MATCH ?", (f'"{word}"',))]

    assert hits("pixel") == [event.id]
    writer.submit(lambda con: con.execute(
        "UPDATE events SET content = 'a cat named Mochi' WHERE id = ?", (event.id,)))
    assert hits("pixel") == [] and hits("mochi") == [event.id]
    writer.submit(lambda con: con.execute("DELETE FROM events WHERE id = ?", (event.id,)))
    assert hits("mochi") == []
    writer.submit(lambda con: con.execute(
        "INSERT INTO events_fts (events_fts, rank) VALUES ('integrity-check', 1)"))


def test_accents_do_not_matter_to_search(writer, config):
    from app.events import append_event

    event = append_event(writer, config, "ana", "s1", "user", "Tomé un café en Cádiz")
    ro = connect_readonly(writer.path)
    rows = list(ro.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH ?", ('"cadiz"',)))
    assert rows == [(event.id,)]


def test_current_fact_key_is_unique_per_user_and_category(writer):
    insert = ("INSERT INTO facts (user_id, category, key, value, source, created_at, updated_at) "
              "VALUES (?, 'preference', 'editor', ?, 'agent', 't', 't')")
    writer.submit(lambda con: con.execute(insert, ("ana", "vim")))
    writer.submit(lambda con: con.execute(insert, ("bob", "emacs")))
    with pytest.raises(apsw.ConstraintError):
        writer.submit(lambda con: con.execute(insert, ("ana", "helix")))


def test_an_unchanged_memory_database_is_quick_checked_once_per_process(tmp_path, monkeypatch):
    path = tmp_path / "memory.sqlite3"
    db.create_memory_database(path)
    checks: list[str] = []
    real = db.file_damage
    monkeypatch.setattr(db, "file_damage", lambda *args: checks.append("check") or real(*args))
    db.check_memory_database(path)  # DataDir.init at a start
    db.check_memory_database(path)  # then the writer
    assert db.memory_damage(path, every=30.0) is None  # then /health
    assert len(checks) == 1
    con = connect(path)
    con.execute("CREATE TABLE grown (x)")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    db.check_memory_database(path)
    assert len(checks) == 2


def test_rows_stored_before_provenance_get_it_from_their_role_and_sources(tmp_path):
    """migrations/0013_provenance.sql: where each old event came from, as well as it can be told, and
    what was learned from a tool's result marked as from outside."""
    con = connect(tmp_path / "m.sqlite3")
    before = [m for m in db.available_migrations() if m.number < 13]
    con.execute("CREATE TABLE _hilo_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for migration in before:
        con.execute(migration.sql)
        con.execute("INSERT INTO _hilo_migrations VALUES (?, 'then')", (migration.name,))
    now = "2026-01-01T00:00:00.000000Z"
    con.execute("INSERT INTO sessions VALUES ('ana', 's', NULL, ?, ?, NULL)", (now, now))
    for n, role in enumerate(("system", "user", "assistant", "tool"), start=1):
        con.execute("INSERT INTO events (id, uuid, user_id, session_id, role, content, "
                    "created_at, importance) VALUES (?, ?, 'ana', 's', ?, 'x', ?, 0.5)",
                    (n, f"u{n}", role, now))
    for n, event in ((1, 2), (2, 4)):
        con.execute("INSERT INTO facts (id, user_id, category, key, value, source, "
                    "source_event_id, created_at, updated_at) "
                    "VALUES (?, 'ana', 'fact', ?, 'v', 'agent', ?, ?, ?)",
                    (n, f"k{n}", event, now, now))
    applied = [m[4:] for m in migrate(con)]  # and the later migrations after them
    assert applied[:2] == ["_provenance.sql", "_terminal_allow_rules.sql"]
    assert list(con.execute("SELECT role, origin, from_outside FROM events ORDER BY id")) == [
        ("system", "task", 0), ("user", "typed", 0), ("assistant", "model", 0),
        ("tool", "hilo_tool", 1)]
    assert list(con.execute("SELECT key, from_outside FROM facts ORDER BY id")) == [
        ("k1", 0), ("k2", 1)]
