"""Scheduled tasks as people say them, in their own time zone: everyday phrasings in
English and Spanish, refusals whose examples themselves work, the machine's zone by
default, and a task's own zone (migration 0005)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from app import db
from app.db import Migration, available_migrations, connect, migrate, schema_version
from app.tasks.runs import claim_next_run
from app.tasks.schedule import ScheduleError, parse_schedule
from app.tasks.store import add_task, describe_task, list_tasks

UTC = UTC
MADRID = "Europe/Madrid"
HILO = str(Path(sys.executable).with_name("hilo"))


def local(*parts: int, zone: str = MADRID) -> datetime:
    return datetime(*parts, tzinfo=ZoneInfo(zone))


# Monday 30 November 2026, 07:00 in Madrid.
NOW = local(2026, 11, 30, 7, 0)


@pytest.mark.parametrize("text, cron", [
    ("daily", "0 9 * * *"),
    ("every day", "0 9 * * *"),
    ("todos los días", "0 9 * * *"),
    ("cada día", "0 9 * * *"),
    ("every morning", "0 9 * * *"),
    ("cada mañana", "0 9 * * *"),
    ("todas las mañanas", "0 9 * * *"),
    ("every afternoon", "0 15 * * *"),
    ("every evening", "0 18 * * *"),
    ("every night", "0 21 * * *"),
    ("todas las noches a las 10", "0 22 * * *"),
    ("every evening at 7", "0 19 * * *"),
    ("every morning at 6:30", "30 6 * * *"),
    ("every monday", "0 9 * * 1"),
    ("cada lunes", "0 9 * * 1"),
    ("every weekday morning", "0 9 * * 1-5"),
    ("every monday evening at 7", "0 19 * * 1"),
    ("todos los lunes por la mañana", "0 9 * * 1"),
    ("de lunes a viernes por la tarde", "0 16 * * 1-5"),
    ("every day at 7 in the evening", "0 19 * * *"),
    ("every day at 10 at night", "0 22 * * *"),
    ("los sábados a las 8 de la tarde", "0 20 * * 6"),
])
def test_everyday_repeating_phrasings(text, cron):
    schedule = parse_schedule(text, MADRID, NOW)
    assert not schedule.is_oneshot
    assert schedule.cron_expr == cron


@pytest.mark.parametrize("text, when", [
    ("at noon", (2026, 11, 30, 12, 0)),
    ("a mediodía", (2026, 11, 30, 12, 0)),
    ("noon", (2026, 11, 30, 12, 0)),
    ("at midnight", (2026, 12, 1, 0, 0)),
    ("a medianoche", (2026, 12, 1, 0, 0)),
    ("at 6", (2026, 12, 1, 6, 0)),  # 06:00 today has passed: tomorrow's
    ("a las 9", (2026, 11, 30, 9, 0)),
    ("at 9pm", (2026, 11, 30, 21, 0)),
    ("tomorrow at 8", (2026, 12, 1, 8, 0)),
    ("mañana a las 8", (2026, 12, 1, 8, 0)),
    ("tomorrow", (2026, 12, 1, 9, 0)),
    ("tomorrow morning", (2026, 12, 1, 9, 0)),
    ("tomorrow evening at 7", (2026, 12, 1, 19, 0)),
    ("mañana por la mañana", (2026, 12, 1, 9, 0)),
    ("mañana por la tarde a las 5", (2026, 12, 1, 17, 0)),
    ("pasado mañana a las 10", (2026, 12, 2, 10, 0)),
    ("tonight", (2026, 11, 30, 21, 0)),
    ("tonight at 9", (2026, 11, 30, 21, 0)),
    ("esta noche", (2026, 11, 30, 21, 0)),
    ("this evening", (2026, 11, 30, 18, 0)),
    ("next tuesday", (2026, 12, 1, 9, 0)),
    ("next tuesday at 18:00", (2026, 12, 1, 18, 0)),
    ("next monday", (2026, 12, 7, 9, 0)),  # said on a Monday: the one after today
    ("this friday", (2026, 12, 4, 9, 0)),
    ("el próximo martes", (2026, 12, 1, 9, 0)),
    ("el martes que viene", (2026, 12, 1, 9, 0)),
    ("el próximo viernes a las 8 de la tarde", (2026, 12, 4, 20, 0)),
])
def test_everyday_oneshot_phrasings(text, when):
    schedule = parse_schedule(text, MADRID, NOW)
    assert schedule.is_oneshot
    assert schedule.run_once_at == local(*when)


@pytest.mark.parametrize("text, seconds", [("in 30 seconds", 30), ("en 45 segundos", 45)])
def test_in_seconds(text, seconds):
    schedule = parse_schedule(text, MADRID, NOW)
    assert schedule.run_once_at == NOW + timedelta(seconds=seconds)
    assert schedule.describe(NOW) == (
        f"Runs once at 2026-11-30 07:00:{seconds} (Monday), Europe/Madrid")


@pytest.mark.parametrize("text, cron", [
    ("weekly", "0 9 * * 1"),
    ("every week", "0 9 * * 1"),
    ("weekly on friday", "0 9 * * 5"),
    ("every week on friday at 10", "0 10 * * 5"),
    ("cada semana", "0 9 * * 1"),
    ("todas las semanas", "0 9 * * 1"),
    ("semanalmente a las 8", "0 8 * * 1"),
    ("cada semana el viernes", "0 9 * * 5"),
    ("every other day", "0 9 */2 * *"),
    ("every other day at 7pm", "0 19 */2 * *"),
    ("every 3 days", "0 9 */3 * *"),
    ("cada dos días", "0 9 */2 * *"),
    ("cada 2 días a las 8", "0 8 */2 * *"),
    ("día por medio", "0 9 */2 * *"),
    ("on weekdays", "0 9 * * 1-5"),
    ("on weekdays at noon", "0 12 * * 1-5"),
    ("los días laborables", "0 9 * * 1-5"),
    ("los días laborables al mediodía", "0 12 * * 1-5"),
    ("daily", "0 9 * * *"),
    ("daily at midnight", "0 0 * * *"),
    ("every day at noon", "0 12 * * *"),
    ("cada día al mediodía", "0 12 * * *"),
    ("a diario a medianoche", "0 0 * * *"),
    ("monthly", "0 9 1 * *"),
    ("every month", "0 9 1 * *"),
    ("cada mes", "0 9 1 * *"),
    ("todos los meses a las 10", "0 10 1 * *"),
])
def test_the_phrases_people_use(text, cron):
    schedule = parse_schedule(text, MADRID, NOW)
    assert (schedule.cron_expr, schedule.is_oneshot) == (cron, False)


@pytest.mark.parametrize("text", ["al mediodía", "at noon", "midnight", "a medianoche"])
def test_a_time_alone_is_its_next_occurrence(text):
    assert parse_schedule(text, MADRID, NOW).is_oneshot


@pytest.mark.parametrize("text, problem", [
    ("at 25:00", '"25:00" is not a time of day: hours go from 0 to 23'),
    ("at 25", '"25" is not a time of day: hours go from 0 to 23'),
    ("a las 9:75", '"9:75" is not a time of day: minutes go from 00 to 59'),
    ("yesterday at 9", '"yesterday" is in the past: say a time to come ("today at 9", '
                       '"tomorrow at 9")'),
    ("ayer a las 9", '"ayer" is in the past: say a time to come ("today at 9", '
                     '"tomorrow at 9")'),
    ("last monday", '"last monday" is in the past: say a time to come ("today at 9", '
                    '"tomorrow at 9")'),
    ("every blue moon", 'could not understand "blue moon" in "every blue moon": not a day, '
                        'a time or an interval'),
    ("cada luna llena", 'could not understand "luna llena" in "cada luna llena": not a day, '
                        'a time or an interval'),
    ("whenever", 'could not understand "whenever": it names no day, time or interval'),
    ("every other week", '"every other week": a schedule cannot skip weeks; try "every '
                         'monday" or "the 1st and 15th of every month"'),
    ("fortnightly", '"fortnightly": a schedule cannot skip weeks; try "every monday" or '
                    '"the 1st and 15th of every month"'),
    ("every 20 days", '"every 20 days": at most every 15 days (cron counts days within a '
                      'month)'),
    ("every 30 seconds", '"every 30 seconds": tasks repeat at most every minute; say '
                         '"every minute"'),
    ("on monday at 9", '"on monday at 9" could mean that day once or every week: to repeat '
                       'it say "every monday at 9" ("cada lunes a las 9"); for once, give '
                       'the date-time'),
])
def test_a_refusal_names_what_was_not_understood_in_its_first_line(text, problem):
    with pytest.raises(ScheduleError) as refused:
        parse_schedule(text, MADRID, NOW)
    assert refused.value.problem == problem
    first, *examples = str(refused.value).splitlines()
    assert first == problem
    assert examples and all(len(line) <= 90 for line in examples)


def test_the_advice_a_refusal_gives_parses():
    assert parse_schedule("every monday", MADRID, NOW).cron_expr == "0 9 * * 1"
    assert parse_schedule("the 1st and 15th of every month", MADRID, NOW).cron_expr == (
        "0 9 1,15 * *")


def examples_in(message: str) -> list[str]:
    """The examples a refusal offers, as it lists them: after each line's colon."""
    lines = message.splitlines()[1:]
    found = [example for line in lines[:2] for example in line.split(": ", 1)[1].split(" · ")]
    cron, iso = lines[2].split(": ", 1)[1].split(", or ")
    return [*found, cron, iso]


def test_every_example_in_a_refusal_parses():
    with pytest.raises(ScheduleError) as refused:
        parse_schedule("whenever I feel like it", MADRID, NOW)
    examples = examples_in(str(refused.value))
    assert {"every day at 9", "weekly", "in 10 minutes", "cada día a las 9", "cada semana",
            "en 10 minutos", "30 18 * * 1-5"} <= set(examples)
    now = datetime.now(UTC)
    for example in examples:
        parse_schedule(example, MADRID, now)  # raises if one does not


def test_an_unknown_time_zone_is_refused_in_one_line():
    with pytest.raises(ScheduleError, match='"Mars/Olympus" is not a time zone'):
        parse_schedule("every day at 9", "Mars/Olympus", NOW)


# -- the time zone of a task --------------------------------------------------------------


def test_tasks_run_in_the_machines_zone_by_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env.update(TZ="Europe/Lisbon", HILO_DATA_DIR=str(tmp_path / "d"))
    subprocess.run([HILO, "init"], env=env, capture_output=True, check=True, timeout=60)
    added = subprocess.run([HILO, "tasks", "add", "every day at 9", "walk Nilo"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    assert "Runs at 09:00, Europe/Lisbon; next:" in added.stdout


def test_a_task_keeps_its_own_zone_and_runs_by_it(writer, config, data_dir):
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    added = add_task(writer, config, "every day at 9", "standup notes", now=now,
                     timezone_name="America/New_York", source="cli")
    task = added.task
    assert task.timezone == "America/New_York"
    assert added.description.startswith("Runs at 09:00, America/New_York; next: 2026-11-30")
    assert task.next_run_at == "2026-11-30T14:00:00.000000Z"  # 09:00 in New York
    # The config's zone does not move it: claiming sets the next run by the task's zone.
    other = config.replace(schedule={"timezone": "Asia/Tokyo"})
    claim = claim_next_run(writer, other, datetime(2026, 11, 30, 14, 0, 30, tzinfo=UTC))
    assert claim is not None and claim.task.id == task.id
    [after] = writer.submit(lambda con: list_tasks(con, task.user_id))
    assert after.next_run_at == "2026-12-01T14:00:00.000000Z"
    assert describe_task(after, "Asia/Tokyo").startswith("Runs at 09:00, America/New_York")


def test_a_task_without_a_zone_follows_the_configured_one(writer, config):
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    task = add_task(writer, config.replace(schedule={"timezone": MADRID}), "every day at 9",
                    "x", now=now, source="cli").task
    assert task.timezone is None
    assert task.next_run_at == "2026-11-30T08:00:00.000000Z"


def test_a_task_following_the_machines_zone_follows_it_when_it_changes(writer, config):
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    task = add_task(writer, config.replace(schedule={"timezone": "UTC"}), "every day at 8",
                    "stretch", now=now, source="cli").task
    assert task.next_run_at == "2026-11-30T08:00:00.000000Z"
    # The machine moves to Madrid: what is listed agrees with itself, 08:00 there...
    [listed] = writer.submit(lambda con: list_tasks(con, task.user_id, MADRID))
    assert listed.next_run_at == "2026-11-30T07:00:00.000000Z"
    assert describe_task(listed, MADRID) == (
        "Runs at 08:00, Europe/Madrid; next: 2026-11-30 08:00 (Monday)")
    # ...and the worker runs it then, not at 08:00 UTC.
    madrid = config.replace(schedule={"timezone": MADRID})
    claim = claim_next_run(writer, madrid, datetime(2026, 11, 30, 7, 0, 30, tzinfo=UTC))
    assert claim is not None and claim.task.id == task.id
    [after] = writer.submit(lambda con: list_tasks(con, task.user_id))
    assert after.next_run_at == "2026-12-01T07:00:00.000000Z"


def test_tasks_list_reads_a_changed_machine_zone_consistently(data_dir, monkeypatch):
    from app.cli import main

    d = ["--data-dir", str(data_dir)]
    monkeypatch.setenv("TZ", "UTC")
    assert main(["tasks", "add", "every day at 8", "stretch", *d]) == 0
    monkeypatch.setenv("TZ", MADRID)
    listed = subprocess.run([HILO, "tasks", "list", *d], capture_output=True, text=True,
                            timeout=60)
    description = re.search(r"Runs at (\d\d:\d\d), Europe/Madrid; next: \S+ (\d\d:\d\d)",
                            listed.stdout)
    assert description is not None, listed.stdout + listed.stderr
    assert description.group(1) == description.group(2) == "08:00"


def test_a_bad_zone_for_a_task_is_refused(writer, config):
    with pytest.raises(ScheduleError, match="is not a time zone"):
        add_task(writer, config, "every day at 9", "x", timezone_name="Nowhere/Land", source="cli")


# -- migration 0005 and a free number before it ----------------------------------------------


def test_the_zone_column_comes_with_migration_0005(tmp_path):
    con = connect(tmp_path / "memory.sqlite3")
    migrate(con)
    columns = [row[1] for row in con.execute("PRAGMA table_info(scheduled_tasks)")]
    assert "timezone" in columns
    assert schema_version(con) == available_migrations()[-1].number >= 5
    con.close()


def test_a_migration_numbered_below_one_already_applied_is_applied_later(tmp_path,
                                                                        monkeypatch):
    shipped = available_migrations()
    without_4 = [m for m in shipped if m.number != 4]
    monkeypatch.setattr(db, "available_migrations", lambda: without_4)
    con = connect(tmp_path / "memory.sqlite3")
    migrate(con)
    assert schema_version(con) == without_4[-1].number
    later = Migration(4, "0004_arrives_later.sql", "CREATE TABLE arrived_later (x INTEGER);")
    monkeypatch.setattr(db, "available_migrations", lambda: sorted(
        [*without_4, later], key=lambda m: m.number))
    assert migrate(con) == ["0004_arrives_later.sql"]
    assert con.execute("SELECT count(*) FROM arrived_later").fetchone() == (0,)
    con.close()


def test_doctor_names_a_migration_that_arrived_below_the_highest_applied(config, monkeypatch):
    from app.datadir import DataDir
    from app.ops.doctor import Status, check_database

    def schema_check():
        return next(c for c in check_database(config) if c.name == "schema version")

    # 0005 once arrived below the highest applied; 0015 now rebuilds the tasks table with
    # its column (and 0022 sets an option of 0009's index), so the example is a migration
    # no later one builds on.
    late = "0017_model_json_modes.sql"
    shipped = available_migrations()
    config.data_dir.mkdir(parents=True)
    con = connect(DataDir.of(config).memory_db)
    with monkeypatch.context() as patched:
        patched.setattr(db, "available_migrations",
                        lambda: [m for m in shipped if m.name != late])
        migrate(con)
    assert schema_check().status is Status.WARN
    assert late in schema_check().detail
    migrate(con)
    assert schema_check().status is Status.OK
    con.close()
