"""The scheduled-tasks store (app/tasks/store.py, runs.py, config_tasks.py): add, list,
pause, resume, remove, run now, log, claiming occurrences, and syncing [[scheduled_tasks]]
from config.toml."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import apsw
import pytest

from app import db
from app.config import ConfigError
from app.datadir import DataDir
from app.db import connect_readonly
from app.ops.transfer import import_path
from app.tasks.config_tasks import config_tasks, sync_config_tasks
from app.tasks.runs import claim_next_run, finish_run, request_run, task_log
from app.tasks.schedule import ScheduleError
from app.tasks.store import (
    TaskError,
    TaskNotFound,
    add_task,
    get_task,
    list_tasks,
    pause_task,
    remove_task,
    resume_task,
    trust_task,
)

UTC = UTC
USER = "default"  # [memory] user_id in config.toml
# Monday 30 November 2026, 07:00 in Madrid.
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


@pytest.fixture
def config(config):
    return config.replace(schedule={"timezone": "Europe/Madrid"})


@pytest.fixture
def read(data_dir):
    cons = []

    def open_reader():
        con = connect_readonly(DataDir(data_dir).memory_db)
        cons.append(con)
        return con

    yield open_reader
    for con in cons:
        con.close()


def tasks_of(read, user=USER):
    return list_tasks(read(), user)


def with_entries(config, *entries: dict[str, Any]):
    return config.replace(scheduled_tasks=tuple(entries))


# -- add ----------------------------------------------------------------------------------


def test_add_stores_cron_original_and_next_run_in_utc(writer, config, read):
    added = add_task(writer, config, "every weekday at 9", "summarise my inbox", now=NOW, source="cli")
    task = added.task
    assert (task.cron_expr, task.original_schedule, task.source) == ("0 9 * * 1-5", "every weekday at 9", "cli")
    assert task.next_run_at == "2026-11-30T08:00:00.000000Z"  # 09:00 in Madrid
    assert task.name == "summarise my inbox" and not task.is_paused and not task.is_oneshot
    assert added.description == (
        "Runs at 09:00, Monday through Friday, Europe/Madrid; next: 2026-11-30 09:00 (Monday)")
    assert tasks_of(read) == [task]


def test_add_a_oneshot_stores_the_exact_time(writer, config):
    task = add_task(writer, config, "in 10 minutes", "stretch", now=NOW + timedelta(seconds=7), source="cli").task
    assert task.is_oneshot
    assert task.next_run_at == "2026-11-30T06:10:07.000000Z"
    assert task.cron_expr == "10 7 30 11 *"


def test_add_refuses_nonsense_and_stores_nothing(writer, config, read):
    with pytest.raises(ScheduleError, match="every day at 9"):
        add_task(writer, config, "whenever", "hi", now=NOW, source="cli")
    with pytest.raises(TaskError, match="prompt is empty"):
        add_task(writer, config, "every day at 9", "   ", now=NOW, source="cli")
    assert tasks_of(read) == []


def test_add_keeps_name_trust_and_redacts_secrets_in_the_prompt(writer, config):
    task = add_task(writer, config, "every day at 9", "call the API with sk-abcdefghijklmnopqrstuvwxyz123456",
                    name="api check", trusted=True, now=NOW, source="cli").task
    assert task.name == "api check" and task.is_trusted
    assert "sk-abcdefghijklmnopqrstuvwxyz123456" not in task.prompt


def test_trust_and_untrust_change_only_the_tasks_trust(writer, config, read):
    task = add_task(writer, config, "every day at 9", "check the disk", now=NOW, source="cli").task
    assert not task.is_trusted

    trusted = trust_task(writer, USER, task.id, now=NOW)
    assert trusted.is_trusted and tasks_of(read)[0].is_trusted
    assert (trusted.prompt, trusted.next_run_at, trusted.is_paused) == (
        task.prompt, task.next_run_at, task.is_paused)
    assert not trust_task(writer, USER, "check the disk", trusted=False, now=NOW).is_trusted
    with pytest.raises(TaskNotFound):
        trust_task(writer, "ana", task.id, now=NOW)  # another user's task is not there


def test_tasks_of_one_user_are_invisible_to_another(writer, config, read):
    add_task(writer, config, "every day at 9", "ana's task", user_id="ana", now=NOW, source="cli")
    assert [t.prompt for t in tasks_of(read, "ana")] == ["ana's task"]
    assert tasks_of(read, "bob") == []
    with pytest.raises(TaskNotFound):
        pause_task(writer, "bob", 1, now=NOW)


# -- list, pause, resume, remove, run now, log ---------------------------------------------------


def test_list_shows_next_run_last_run_last_error_and_paused(writer, config, read):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    claim = claim_next_run(writer, config, NOW + timedelta(minutes=15))
    finish_run(writer, config, claim, NOW + timedelta(minutes=15), error="model down", retryable=False)
    pause_task(writer, USER, task.id, now=NOW)
    [listed] = tasks_of(read)
    assert listed.is_paused
    assert listed.last_run_at == "2026-11-30T06:15:00.000000Z"
    assert listed.next_run_at == "2026-11-30T06:30:00.000000Z"
    assert (listed.last_status, listed.last_error) == ("failed", "model down")
    assert listed.to_json()["session_id"] == f"task:{task.id}"


def test_tasks_are_found_by_id_or_name(writer, config, read):
    task = add_task(writer, config, "every day at 9", "x", name="morning", now=NOW, source="cli").task
    assert get_task(read(), USER, "morning") == get_task(read(), USER, f"#{task.id}") == get_task(read(), USER, task.id)
    add_task(writer, config, "every day at 10", "y", name="morning", now=NOW, source="cli")
    with pytest.raises(TaskError, match="use the id"):
        get_task(read(), USER, "morning")
    with pytest.raises(TaskNotFound, match="hilo tasks list"):
        get_task(read(), USER, 99)


def test_paused_tasks_are_not_claimed(writer, config):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    pause_task(writer, USER, task.id, now=NOW)
    assert claim_next_run(writer, config, NOW + timedelta(hours=2)) is None


def test_resume_skips_what_was_missed_while_paused(writer, config):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    pause_task(writer, USER, task.id, now=NOW)
    resumed = resume_task(writer, config, USER, task.id, now=NOW + timedelta(hours=2, minutes=1))
    assert not resumed.is_paused
    assert resumed.next_run_at == "2026-11-30T08:15:00.000000Z"


def test_a_resumed_oneshot_whose_time_passed_runs_at_the_next_tick(writer, config):
    task = add_task(writer, config, "in 10 minutes", "stretch", now=NOW, source="cli").task
    pause_task(writer, USER, task.id, now=NOW)
    later = NOW + timedelta(hours=1)
    resume_task(writer, config, USER, task.id, now=later)
    claim = claim_next_run(writer, config, later)
    assert claim is not None and claim.task.id == task.id


def test_remove_deletes_the_task_keeps_its_log_and_never_reuses_its_id(writer, config, read):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    claim = claim_next_run(writer, config, NOW + timedelta(minutes=15))
    finish_run(writer, config, claim, NOW + timedelta(minutes=15))
    removed = remove_task(writer, USER, task.id, now=NOW)
    assert removed.id == task.id and tasks_of(read) == []
    log = task_log(read(), USER, task.id)
    assert log.task is None and [r.status for r in log.runs] == ["done"]
    assert add_task(writer, config, "every day at 9", "new", now=NOW, source="cli").task.id == task.id + 1


def test_run_now_is_queued_for_the_worker_even_when_paused(writer, config):
    task = add_task(writer, config, "every day at 9", "brief me", now=NOW, source="cli").task
    pause_task(writer, USER, task.id, now=NOW)
    first = request_run(writer, USER, task.id, now=NOW)
    again = request_run(writer, USER, task.id, now=NOW + timedelta(seconds=1))
    assert again.id == first.id  # asked twice before the worker looked: runs once
    claim = claim_next_run(writer, config, NOW + timedelta(seconds=30))
    assert (claim.task.id, claim.run.kind, claim.run.attempts) == (task.id, "manual", 1)
    assert claim_next_run(writer, config, NOW + timedelta(seconds=30)) is None
    # The schedule itself is untouched.
    assert get_task(connect_readonly(DataDir.of(config).memory_db), USER, task.id).next_run_at == task.next_run_at


def test_log_of_an_unknown_task_says_so(read, data_dir):
    with pytest.raises(TaskNotFound):
        task_log(read(), USER, 42)


# -- claiming ----------------------------------------------------------------------------


def test_a_due_task_is_claimed_once_and_next_run_moves_past_now(writer, config, read):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    at = NOW + timedelta(minutes=15, seconds=20)
    claim = claim_next_run(writer, config, at)
    assert claim.run.scheduled_for == task.next_run_at and claim.run.status == "running"
    assert claim_next_run(writer, config, at) is None
    assert get_task(read(), USER, task.id).next_run_at == "2026-11-30T06:30:00.000000Z"


def test_downtime_coalesces_missed_occurrences_into_one_run(writer, config, read):
    task = add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli").task
    back = NOW + timedelta(hours=3, minutes=7)  # twelve occurrences missed
    claims = []
    while (claim := claim_next_run(writer, config, back)) is not None:
        claims.append(claim)
    assert len(claims) == 1 and claims[0].run.scheduled_for == task.next_run_at
    assert get_task(read(), USER, task.id).next_run_at == "2026-11-30T09:15:00.000000Z"


def test_a_failed_run_retries_with_backoff_then_gives_up(writer, config, read):
    config = config.replace(queue={"max_attempts": 3})
    add_task(writer, config, "every day at 9", "ping", now=NOW, source="cli")
    at = NOW + timedelta(hours=2)
    claim = claim_next_run(writer, config, at)
    run = finish_run(writer, config, claim, at, error="model busy", retryable=True)
    assert (run.status, run.retry_at) == ("retrying", "2026-11-30T08:01:00.000000Z")
    assert claim_next_run(writer, config, at + timedelta(seconds=59)) is None
    retry = claim_next_run(writer, config, at + timedelta(minutes=1))
    assert (retry.run.id, retry.run.attempts) == (claim.run.id, 2)
    run = finish_run(writer, config, retry, at + timedelta(minutes=1), error="model busy", retryable=True)
    assert run.retry_at == "2026-11-30T08:03:00.000000Z"  # then two minutes
    last = claim_next_run(writer, config, at + timedelta(minutes=3))
    run = finish_run(writer, config, last, at + timedelta(minutes=3), error="model busy", retryable=True)
    assert (run.status, run.attempts, run.error) == ("failed", 3, "model busy")
    assert claim_next_run(writer, config, at + timedelta(hours=1)) is None


def test_an_error_retrying_cannot_fix_fails_at_once(writer, config):
    add_task(writer, config, "every day at 9", "ping", now=NOW, source="cli")
    claim = claim_next_run(writer, config, NOW + timedelta(hours=2))
    run = finish_run(writer, config, claim, NOW + timedelta(hours=2), error="model not pulled")
    assert (run.status, run.retry_at) == ("failed", None)


def test_a_pending_retry_gives_way_to_the_next_occurrence(writer, config):
    add_task(writer, config, "every 15 minutes", "ping", now=NOW, source="cli")
    at = NOW + timedelta(minutes=15)
    claim = claim_next_run(writer, config, at)
    finish_run(writer, config, claim, at, error="busy", retryable=True)
    much_later = at + timedelta(hours=1)
    claims = []
    while (c := claim_next_run(writer, config, much_later)) is not None:
        claims.append(c)
    assert [c.run.kind for c in claims] == ["schedule"]
    log = task_log(connect_readonly(DataDir.of(config).memory_db), USER, claim.task.id)
    assert [r.status for r in log.runs] == ["running", "failed"]


def test_a_run_cut_off_by_a_killed_worker_is_retried(writer, config):
    add_task(writer, config, "every day at 9", "ping", now=NOW, source="cli")
    at = NOW + timedelta(hours=2)
    lost = claim_next_run(writer, config, at)  # never finished
    assert claim_next_run(writer, config, at + timedelta(minutes=30)) is None
    again = claim_next_run(writer, config, at + timedelta(hours=1, minutes=1))
    assert (again.run.id, again.run.attempts) == (lost.run.id, 2)


def test_a_oneshot_is_deleted_after_a_successful_run(writer, config, read):
    task = add_task(writer, config, "in 10 minutes", "stretch", now=NOW, source="cli").task
    at = NOW + timedelta(minutes=10)
    claim = claim_next_run(writer, config, at)
    assert get_task(read(), USER, task.id).next_run_at is None  # claimed: no further occurrence
    finish_run(writer, config, claim, at)
    assert tasks_of(read) == []
    assert [r.status for r in task_log(read(), USER, task.id).runs] == ["done"]


def test_a_oneshot_that_fails_for_good_stays_listed_with_its_error(writer, config, read):
    task = add_task(writer, config, "in 10 minutes", "stretch", now=NOW, source="cli").task
    at = NOW + timedelta(minutes=10)
    finish_run(writer, config, claim_next_run(writer, config, at), at, error="model not pulled")
    [listed] = tasks_of(read)
    assert (listed.id, listed.last_error, listed.next_run_at) == (task.id, "model not pulled", None)


# -- config.toml ------------------------------------------------------------------------------


MORNING = {"name": "morning", "schedule": "every weekday at 9", "prompt": "brief me"}


def test_config_tasks_are_added_updated_and_removed_to_match_the_file(writer, config, read):
    add_task(writer, config, "every day at 20", "tool task", now=NOW, source="tool")
    evening = {"name": "evening", "schedule": "cada día a las 21", "prompt": "resume el día", "trusted": True}
    counts = sync_config_tasks(writer, with_entries(config, MORNING, evening), now=NOW)
    assert counts.to_json() == {"added": 2, "updated": 0, "removed": 0, "unchanged": 0, "expired": 0}
    by_name = {t.name: t for t in tasks_of(read)}
    assert by_name["morning"].source == "config" and by_name["evening"].is_trusted
    assert by_name["tool task"].source == "tool"
    morning_id = by_name["morning"].id

    again = sync_config_tasks(writer, with_entries(config, MORNING, evening), now=NOW)
    assert (again.unchanged, again.added) == (2, 0)

    changed = {**MORNING, "schedule": "every weekday at 8", "paused": True}
    counts = sync_config_tasks(writer, with_entries(config, changed), now=NOW)
    assert (counts.updated, counts.removed) == (1, 1)
    by_name = {t.name: t for t in tasks_of(read)}
    assert set(by_name) == {"morning", "tool task"}
    morning = by_name["morning"]
    assert (morning.id, morning.cron_expr, morning.is_paused) == (morning_id, "0 8 * * 1-5", True)
    assert morning.next_run_at == "2026-11-30T07:00:00.000000Z"


def test_config_tasks_are_changed_in_the_file_not_from_the_cli(writer, config):
    sync_config_tasks(writer, with_entries(config, MORNING), now=NOW)
    for change in (pause_task, remove_task):
        with pytest.raises(TaskError, match="comes from config.toml"):
            change(writer, USER, "morning", now=NOW)
    with pytest.raises(TaskError, match=r"to trust it, edit its \[\[scheduled_tasks\]\] "
                                        r"entry \(trusted = true\)"):
        trust_task(writer, USER, "morning", now=NOW)
    assert request_run(writer, USER, "morning", now=NOW).status == "queued"  # running it is fine


def test_an_invalid_config_entry_stops_the_sync_and_changes_nothing(writer, config, read):
    bad = {"name": "bad", "schedule": "whenever", "prompt": "x"}
    with pytest.raises(ConfigError, match=r'(?s)scheduled_tasks\[1\] \("bad"\)\.schedule.*every day at 9'):
        sync_config_tasks(writer, with_entries(config, MORNING, bad), now=NOW)
    assert tasks_of(read) == []


@pytest.mark.parametrize("entry, problem", [
    ({"name": "x", "schedule": "every day at 9"}, r"prompt.*non-empty string"),
    ({"name": "x", "schedule": "every day at 9", "prompt": "p", "when": 1}, "unknown key when"),
    ({"name": "x", "schedule": "every day at 9", "prompt": "p", "trusted": "yes"}, "true or false"),
    ({"name": "x", "schedule": "tomorrow at 9", "prompt": "p"}, "ISO date-time"),
    ({"name": "x", "schedule": "every day at 9", "prompt": "p", "oneshot": True}, "ISO date-time"),
])
def test_config_entries_are_validated(config, entry, problem):
    with pytest.raises(ConfigError, match=problem):
        config_tasks(with_entries(config, entry), NOW)


def test_duplicate_config_names_are_refused(config):
    with pytest.raises(ConfigError, match="same name"):
        config_tasks(with_entries(config, MORNING, MORNING), NOW)


def test_a_config_oneshot_is_added_once_and_not_again_after_it_ran(writer, config, read):
    entry = {"name": "launch", "schedule": "2026-12-01 09:00", "prompt": "wish me luck"}
    assert sync_config_tasks(writer, with_entries(config, entry), now=NOW).added == 1
    at = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    finish_run(writer, config, claim_next_run(writer, config, at), at)
    assert tasks_of(read) == []
    counts = sync_config_tasks(writer, with_entries(config, entry), now=at + timedelta(days=1))
    assert (counts.added, counts.expired) == (0, 1)
    assert tasks_of(read) == []


# -- imported tasks --------------------------------------------------------------------------


def test_a_task_stored_before_imports_were_marked_keeps_every_column(tmp_path):
    con = db.connect(tmp_path / "m.sqlite3")
    con.execute(f"CREATE TABLE {db.MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
    for migration in [m for m in db.available_migrations() if m.number < 15]:
        con.execute(migration.sql)
        con.execute(f"INSERT INTO {db.MIGRATIONS_TABLE} VALUES (?, 'then')", (migration.name,))
    row = (7, "ana", "stretch", "0 9 * * *", "every day at 9", "Remind me", "tool", 0, 1, 1,
           "2026-12-03T08:00:00Z", None, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z",
           "Europe/Lisbon")
    con.execute(f"INSERT INTO scheduled_tasks VALUES ({', '.join('?' * len(row))})", row)

    assert "0015_imported_tasks.sql" in db.migrate(con)

    # Every column kept (migration 0021 adds whether its prompt is from outside: a task
    # stored before then is from outside only if it was imported), but who added it: not
    # kept before migration 0026.
    assert con.execute("SELECT * FROM scheduled_tasks").fetchall() == [
        (*row[:6], "unrecorded", *row[7:], 0)]
    con.execute("UPDATE scheduled_tasks SET source = 'import'")  # the new value is allowed
    with pytest.raises(apsw.ConstraintError):
        con.execute("UPDATE scheduled_tasks SET source = 'page'")


def test_an_imported_tasks_prompt_is_from_outside_until_its_owner_trusts_it(writer, config, read,
                                                                             tmp_path):
    export = tmp_path / "tasks.jsonl"
    export.write_text(json.dumps({"type": "header", "format": "hilo-export", "version": 1,
                                  "user_id": "someone"}) + "\n" + json.dumps({
        "type": "task", "name": "stretch", "schedule": "every day at 9",
        "prompt": "Remind me to stretch", "source": "tool", "is_trusted": True}) + "\n")
    import_path(config, export, USER)

    [task] = tasks_of(read)
    assert (task.source, task.is_trusted, task.prompt_from_outside) == ("import", False, True)
    trusted = trust_task(writer, USER, task.id)
    assert (trusted.source, trusted.prompt_from_outside) == ("import", False)


def test_tasks_added_before_migration_0026_say_who_added_them_was_not_kept(tmp_path,
                                                                         monkeypatch):
    every = db.available_migrations()
    monkeypatch.setattr(db, "available_migrations", lambda: [m for m in every if m.number < 26])
    con = db.connect(tmp_path / "memory.sqlite3")
    db.migrate(con)
    con.execute(
        "INSERT INTO scheduled_tasks (id, user_id, name, cron_expr, original_schedule, prompt, "
        "source, created_at, updated_at) VALUES (1, 'u', 'n', '0 9 * * *', 'every day at 9', "
        "'p', 'tool', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')")
    monkeypatch.setattr(db, "available_migrations", lambda: every)
    db.migrate(con)

    (task,) = list_tasks(con, "u")
    assert (task.source, task.added_by) == (
        "unrecorded", "added before Hilo recorded who adds tasks")
    con.close()
