"""consolidate: merge duplicates, fold old cards, decay gently, never drop what matters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.learn.consolidate import (
    FLOOR_PROTECTED,
    FLOOR_READ,
    FLOOR_UNREAD,
    FOLD_GROUP,
    consolidate,
)
from app.memory import upsert_fact
from app.model.errors import ModelHTTPError
from app.timeutil import to_rfc3339
from app.turn.chat import ChatService
from tests.fake_ollama import Fault
from tests.workers.support import add_turn, query, scalar, snapshot, worker_config

NOW = datetime.now(UTC)


def fact(writer, category, key, value, user="ana", access_count=0):
    def write(con):
        fact_id = upsert_fact(con, user, category, key, value, source="agent", worker="test").fact_id
        con.execute("UPDATE facts SET access_count = ? WHERE id = ?", (access_count, fact_id))
        return fact_id
    return writer.submit(write)


def current(cfg):
    return sorted(query(cfg, "SELECT category, key, value FROM facts WHERE superseded_at IS NULL"))


def old_cards(writer, count, days_old=40, session="s1", user="ana"):
    created = to_rfc3339(NOW - timedelta(days=days_old))

    def write(con):
        for n in range(count):
            con.execute(
                "INSERT INTO context_cards (user_id, session_id, summary, keywords, first_event_id, "
                "last_event_id, event_count, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 4, ?, ?)",
                (user, session, f"Configured nginx upstream number {n}", "nginx, upstream",
                 n * 4 + 1, n * 4 + 4, created, created))
    writer.submit(write)


def test_duplicate_facts_are_merged_into_one_current_row(job_parts):
    cfg, writer, model, _ = job_parts
    kept = fact(writer, "fact", "staging db", "staging postgres runs on host db2 since March")
    dupe = fact(writer, "fact", "db host", "staging postgres runs on host db2")
    same = fact(writer, "decision", "orm", "Use SQLAlchemy 2")
    fact(writer, "decision", "orm choice", "use sqlalchemy 2 ")
    report = consolidate(writer, model, cfg, now=NOW)
    assert report.merged_facts == 2
    assert current(cfg) == [("decision", "orm choice", "use sqlalchemy 2"),
                            ("fact", "staging db", "staging postgres runs on host db2 since March")]
    assert query(cfg, "SELECT superseded_by FROM facts WHERE id = ?", (dupe,)) == [(kept,)]
    assert query(cfg, "SELECT superseded_at IS NOT NULL FROM facts WHERE id = ?", (same,)) == [(1,)]
    assert query(cfg, "SELECT action, worker FROM memory_log WHERE owner_id = ?", (str(dupe),))[-1] == (
        "supersede", "consolidate")


def test_preferences_and_solutions_merge_only_when_identical(job_parts):
    cfg, writer, model, _ = job_parts
    fact(writer, "preference", "editor", "uses vim with tmux")
    fact(writer, "preference", "terminal editor", "uses vim")
    fact(writer, "solution", "fix 502", "restart php-fpm after deploys")
    fact(writer, "solution", "nginx 502", "restart php-fpm after deploys")
    consolidate(writer, model, cfg, now=NOW)
    assert [row[1] for row in current(cfg)] == ["editor", "terminal editor", "nginx 502"]


def test_a_frequently_read_fact_is_never_merged_away(job_parts):
    cfg, writer, model, _ = job_parts
    popular = fact(writer, "fact", "office", "office is in Valencia", access_count=5)
    fact(writer, "fact", "office city", "office is in Valencia")
    consolidate(writer, model, cfg, now=NOW)
    assert [row[1] for row in current(cfg)] == ["office"]
    assert query(cfg, "SELECT access_count FROM facts WHERE id = ?", (popular,)) == [(5,)]


def test_cards_older_than_30_days_fold_into_level_one_cards(job_parts):
    cfg, writer, model, fake = job_parts
    old_cards(writer, FOLD_GROUP + 2)
    old_cards(writer, 3, days_old=5, session="s2")
    report = consolidate(writer, model, cfg, now=NOW)
    assert report.folded_cards == FOLD_GROUP + 2 and len(report.new_cards) == 2
    folded = query(cfg, "SELECT level, session_id, first_event_id, last_event_id, event_count, "
                        "is_extractive FROM context_cards WHERE level = 1 ORDER BY id")
    assert folded == [(1, "s1", 1, FOLD_GROUP * 4, FOLD_GROUP * 4, 0),
                      (1, "s1", FOLD_GROUP * 4 + 1, (FOLD_GROUP + 2) * 4, 8, 0)]
    assert scalar(cfg, "SELECT count(*) FROM context_cards WHERE level = 0 AND folded_into IS NULL") == 3
    assert "Configured nginx upstream number 0" in fake.bodies("/api/generate")[0]["prompt"]


def test_a_fold_the_model_cannot_write_raises_then_folds_extractively(job_parts):
    cfg, writer, model, fake = job_parts
    old_cards(writer, 3)
    fake.script_generate(Fault.http_500())
    with pytest.raises(ModelHTTPError):
        consolidate(writer, model, cfg, now=NOW)
    report = consolidate(writer, model, cfg, now=NOW, extractive=True)
    assert report.folded_cards == 3
    assert query(cfg, "SELECT is_extractive FROM context_cards WHERE level = 1") == [(1,)]


def test_importance_decays_to_floors_never_to_zero(job_parts):
    cfg, writer, model, _ = job_parts
    unread = fact(writer, "fact", "a", "alpha")
    read = fact(writer, "fact", "b", "bravo", access_count=1)
    frequent = fact(writer, "decision", "c", "charlie", access_count=3)
    preference = fact(writer, "preference", "d", "delta")
    solution = fact(writer, "solution", "e", "echo")
    a_year_ago = to_rfc3339(NOW - timedelta(days=365))
    report = consolidate(writer, model, cfg, now=NOW, last_decay_at=a_year_ago)
    assert report.decayed == 5 and report.decayed_at == to_rfc3339(NOW)
    importance = dict(query(cfg, "SELECT id, importance FROM facts"))
    assert importance[unread] == FLOOR_UNREAD
    assert importance[read] == FLOOR_READ
    assert importance[frequent] == importance[preference] == importance[solution] == FLOOR_PROTECTED


def test_decay_is_gentle_over_one_interval(job_parts):
    cfg, writer, model, _ = job_parts
    unread = fact(writer, "fact", "a", "alpha")
    consolidate(writer, model, cfg, now=NOW)  # never decayed before: one interval's worth
    (value,) = query(cfg, "SELECT importance FROM facts WHERE id = ?", (unread,))[0]
    assert 0.49 < value < 0.5


def test_a_fact_read_since_the_last_decay_keeps_its_importance(job_parts):
    cfg, writer, model, _ = job_parts
    fresh = fact(writer, "fact", "a", "alpha", access_count=1)
    writer.submit(lambda con: con.execute("UPDATE facts SET last_accessed_at = ? WHERE id = ?",
                                          (to_rfc3339(NOW), fresh)))
    consolidate(writer, model, cfg, now=NOW, last_decay_at=to_rfc3339(NOW - timedelta(days=30)))
    assert query(cfg, "SELECT importance FROM facts") == [(0.5,)]


def test_consolidating_twice_leaves_the_same_database(job_parts):
    cfg, writer, model, _ = job_parts
    fact(writer, "fact", "staging db", "staging postgres runs on host db2 since March")
    fact(writer, "fact", "db host", "staging postgres runs on host db2")
    fact(writer, "fact", "lonely", "nothing like it")
    old_cards(writer, 5)
    first = consolidate(writer, model, cfg, now=NOW)
    before = snapshot(cfg)
    second = consolidate(writer, model, cfg, now=NOW + timedelta(minutes=1),
                         last_decay_at=first.decayed_at)
    assert (second.merged_facts, second.folded_cards, second.decayed) == (0, 0, 0)
    assert snapshot(cfg) == before


def test_extractive_cards_and_diaries_are_rewritten_when_the_model_is_back(job_parts):
    from app.learn.compact import compact_session
    from app.learn.diary_entry import write_diary

    cfg, writer, model, _ = job_parts
    for n in range(cfg.memory.compaction_threshold // 2):  # one chunk to compact
        add_turn(writer, cfg, "ana", "s1", f"message {n}")
    compact_session(writer, None, cfg, "ana", "s1", extractive=True)
    write_diary(writer, None, cfg, "ana", "s1", extractive=True)
    report = consolidate(writer, model, cfg, now=NOW)
    assert report.resummarised == 2
    assert query(cfg, "SELECT summary, is_extractive FROM context_cards") == [
        ("The user and the assistant went through part of the work.", 0)]
    assert query(cfg, "SELECT entry, is_extractive FROM diary") == [
        ("The user worked through a list of codes with the assistant.", 0)]


def test_the_queued_job_remembers_its_last_decay_so_a_rerun_changes_nothing(
        config, data_dir, writer, fake_ollama, bound_queue):
    from tests.workers.support import drain
    from workers import jobs
    from workers.queue import failed_jobs, huey
    from workers.runner import LAST_DECAY_KEY

    cfg = worker_config(config, fake_ollama)
    bound_queue(cfg)
    fact(writer, "fact", "a", "alpha")
    jobs.consolidate()
    drain()
    assert huey.get(LAST_DECAY_KEY, peek=True) is not None
    before = snapshot(cfg)
    jobs.consolidate()
    drain()
    assert snapshot(cfg) == before
    assert failed_jobs() == []


def test_consolidation_runs_every_interval_on_the_hour_utc():
    from workers.jobs import consolidation_schedule

    every_six = consolidation_schedule(6)
    assert [h for h in range(24) if every_six(datetime(2026, 1, 1, h, 0))] == [0, 6, 12, 18]
    assert not every_six(datetime(2026, 1, 1, 6, 1))
    every_two_days = consolidation_schedule(48)
    assert every_two_days(datetime(2026, 1, 3, 0, 0)) and not every_two_days(datetime(2026, 1, 2, 0, 0))


def segments(cfg, table: str) -> int:
    return scalar(cfg, f"SELECT count(DISTINCT segid) FROM '{table}_idx'")


def test_the_full_text_indexes_are_merged_and_find_the_same(job_parts):
    # Each turn is its own write, and so its own segment: FTS5 lets them pile up, and
    # every search reads each one.
    cfg, writer, model, _ = job_parts
    for n in range(40):
        add_turn(writer, cfg, "ana", "s1", f"note {n}: the nginx upstream for host db{n % 7}")
    piled = segments(cfg, "events_fts")
    found = query(cfg, "SELECT rowid FROM events_fts WHERE events_fts MATCH 'nginx db3' "
                       "ORDER BY bm25(events_fts)")
    first = consolidate(writer, model, cfg, now=NOW)
    assert first.fts_merge_steps > 0
    assert segments(cfg, "events_fts") < piled and segments(cfg, "events_fts") <= 2
    assert query(cfg, "SELECT rowid FROM events_fts WHERE events_fts MATCH 'nginx db3' "
                      "ORDER BY bm25(events_fts)") == found
    again = consolidate(writer, model, cfg, now=NOW + timedelta(minutes=1),
                        last_decay_at=first.decayed_at)
    assert again.fts_merge_steps == 0


def test_the_turns_recalls_are_counted_and_protect_an_often_read_fact(job_parts):
    cfg, writer, model, _ = job_parts
    popular = fact(writer, "fact", "office", "office is in Valencia")
    with ChatService(cfg) as service:
        for session in ("s1", "s2", "s3"):  # each a new prompt that recalls it
            service.start_turn("ana", session, "where is my office?").run()
        service.writer.submit(lambda con: None)  # the turns' records are committed
    fact(writer, "fact", "office city", "office is in Valencia")  # newer: it would win

    report = consolidate(writer, model, cfg, now=NOW)

    assert report.counted_turns == 3
    assert [row[1] for row in current(cfg)] == ["office"]
    assert query(cfg, "SELECT access_count FROM facts WHERE id = ?", (popular,)) == [(3,)]
    assert consolidate(writer, model, cfg, now=NOW).counted_turns == 0  # each counted once
