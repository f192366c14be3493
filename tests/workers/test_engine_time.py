"""Learning's cost is a measured figure: each learning call's engine time is kept beside
each chat turn's, and the queue view sets learning's engine seconds per chat turn against
the chat's own."""

from __future__ import annotations

import httpx
import pytest

from app import db
from tests.api.support import HiloServer
from tests.fake_ollama import CpuSpeed, FakeOllama
from tests.workers.support import drain, query, scripted_queue
from workers.inspection import QueueView

IDLE = 0.3  # [queue] chat_idle_seconds in these tests


def converse(server: HiloServer, *said: str) -> None:
    history: list[dict] = []
    with httpx.Client(timeout=30) as client:
        for text in said:
            history.append({"role": "user", "content": text})
            reply = client.post(f"{server.url}/api/chat", json={
                "model": "gemma3:4b", "messages": history, "stream": False}).json()
            history.append(reply["message"])
    drain()  # the conversation is quiet: its turns are learned


def test_learning_engine_seconds_per_chat_turn_are_set_against_the_chats_own(
        config, data_dir, bound_queue):
    with FakeOllama(cpu=CpuSpeed(4000, 4000)) as fake:
        cfg = scripted_queue(config.replace(queue={"chat_idle_seconds": IDLE}), fake,
                             bound_queue)
        server = HiloServer(cfg, fake).start()
        try:
            converse(server, "Remember code alpha1, please", "And code alpha2",
                     "My name is Dana")
        finally:
            server.stop()

    turns = query(cfg, "SELECT engine_ms, engine_clock FROM turn_records")
    assert len(turns) == 3 and all(ms > 0 and clock == "engine" for ms, clock in turns)
    calls = query(cfg, "SELECT job, outcome, engine_ms, engine_clock, prompt_tokens, max_tokens "
                       "FROM learning_calls")
    assert calls, "each learning call is kept"
    assert all(outcome == "answered" and ms > 0 and clock == "engine" and prompt and limit
               for _, outcome, ms, clock, prompt, limit in calls)

    learning = QueueView(cfg).status().learning
    spend = learning.spend
    assert (spend.chat_turns, spend.learning_calls) == (3, len(calls))
    assert spend.ratio == pytest.approx(sum(c[2] for c in calls) / sum(t[0] for t in turns),
                                        rel=1e-3)
    assert "s of the engine per chat turn" in spend.line() and learning.stall is None


def test_a_database_at_0022_gets_the_engine_time_migration(tmp_path):
    """0027 comes after main's 0022 (and numbers others hold): a database migrated before it
    gains the learning_calls table and the turn records' engine time, its rows kept."""
    con = db.connect(tmp_path / "m.sqlite3")
    con.execute(f"CREATE TABLE {db.MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
    for migration in (m for m in db.available_migrations() if m.number <= 22):
        con.execute(migration.sql)
        con.execute(f"INSERT INTO {db.MIGRATIONS_TABLE} VALUES (?, 'then')", (migration.name,))
    assert db.schema_version(con) == 22

    assert "0027_engine_time.sql" in db.migrate(con)
    columns = {row[1] for row in con.execute("PRAGMA table_info(turn_records)")}
    assert {"engine_ms", "engine_clock"} <= columns
    assert con.execute("SELECT count(*) FROM learning_calls").fetchone() == (0,)
    assert db.migrate(con) == []  # applied once
