"""Schedules (app/tasks/schedule.py): cron or plain English and Spanish → a 5-field cron and
the next run, on a fixed clock, in the user's time zone, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.tasks.schedule import (
    ScheduleError,
    next_occurrence,
    parse_schedule,
    validate_cron,
)

UTC = UTC
MADRID = "Europe/Madrid"
NEW_YORK = "America/New_York"


def local(zone: str, *parts: int, fold: int = 0) -> datetime:
    return datetime(*parts, tzinfo=ZoneInfo(zone), fold=fold)


# Monday 30 November 2026, 07:00 in Madrid.
NOW = local(MADRID, 2026, 11, 30, 7, 0)


def runs(cron_expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every run from start to end, as a scheduler computing one next run at a time sees it."""
    found, moment = [], start
    while True:
        moment = next_occurrence(cron_expr, zone, moment)
        if moment > end:
            return found
        found.append(moment)


@pytest.mark.parametrize("text, cron, first_run", [
    ("every day at 9", "0 9 * * *", (2026, 11, 30, 9, 0)),
    ("every weekday at 18:30", "30 18 * * 1-5", (2026, 11, 30, 18, 30)),
    ("every monday and thursday at 8am", "0 8 * * 1,4", (2026, 11, 30, 8, 0)),
    ("every 15 minutes", "*/15 * * * *", (2026, 11, 30, 7, 15)),
    ("on the 1st of every month at noon", "0 12 1 * *", (2026, 12, 1, 12, 0)),
    ("cada día a las 9", "0 9 * * *", (2026, 11, 30, 9, 0)),
    ("cada lunes a las 8", "0 8 * * 1", (2026, 11, 30, 8, 0)),
    ("todos los días laborables a las 18:30", "30 18 * * 1-5", (2026, 11, 30, 18, 30)),
    ("cada 15 minutos", "*/15 * * * *", (2026, 11, 30, 7, 15)),
    ("el día 1 de cada mes a mediodía", "0 12 1 * *", (2026, 12, 1, 12, 0)),
    ("cada lunes y jueves a las 8", "0 8 * * 1,4", (2026, 11, 30, 8, 0)),
    ("de lunes a viernes a las 9 y media", "30 9 * * 1-5", (2026, 11, 30, 9, 30)),
    ("los sábados a las 8 de la tarde", "0 20 * * 6", (2026, 12, 5, 20, 0)),
    ("Every Weekend at 10", "0 10 * * 6,0", (2026, 12, 5, 10, 0)),
    ("every hour on weekdays", "0 * * * 1-5", (2026, 11, 30, 8, 0)),
    ("cada 2 horas", "0 */2 * * *", (2026, 11, 30, 8, 0)),
    ("every day at 9 and 18", "0 9,18 * * *", (2026, 11, 30, 9, 0)),
    ("on the last day of every month at 18:00", "0 18 L * *", (2026, 11, 30, 18, 0)),
    ("at 7:30pm every friday", "30 19 * * 5", (2026, 12, 4, 19, 30)),
    ("30 18 * * 1-5", "30 18 * * 1-5", (2026, 11, 30, 18, 30)),
    ("0  9 * *  MON-FRI", "0 9 * * MON-FRI", (2026, 11, 30, 9, 0)),
    ("@daily", "0 0 * * *", (2026, 12, 1, 0, 0)),
])
def test_phrases_map_to_cron_and_next_run(text, cron, first_run):
    schedule = parse_schedule(text, MADRID, NOW)
    assert schedule.cron_expr == cron
    assert not schedule.is_oneshot
    assert schedule.next_run(NOW) == local(MADRID, *first_run)
    assert schedule.next_run(NOW).tzinfo == UTC


@pytest.mark.parametrize("text, when", [
    ("in 10 minutes", (2026, 11, 30, 7, 10)),
    ("en 10 minutos", (2026, 11, 30, 7, 10)),
    ("dentro de 2 horas", (2026, 11, 30, 9, 0)),
    ("tomorrow at 9", (2026, 12, 1, 9, 0)),
    ("mañana a las 9", (2026, 12, 1, 9, 0)),
    ("manana a las 9", (2026, 12, 1, 9, 0)),
    ("today at 17:30", (2026, 11, 30, 17, 30)),
    ("pasado mañana a las 8 de la tarde", (2026, 12, 2, 20, 0)),
    ("2026-12-01T09:00", (2026, 12, 1, 9, 0)),
    ("2026-12-01 09:00", (2026, 12, 1, 9, 0)),
    ("2026-12-01T08:00:00Z", (2026, 12, 1, 9, 0)),
])
def test_oneshots_run_once_at_the_exact_time(text, when):
    schedule = parse_schedule(text, MADRID, NOW)
    moment = local(MADRID, *when)
    assert schedule.is_oneshot
    assert schedule.run_once_at == moment
    assert schedule.next_run(NOW) == moment
    assert schedule.next_run(moment) is None
    # The cron names that minute, day and month, for display.
    assert schedule.cron_expr == f"{when[4]} {when[3]} {when[2]} {when[1]} *"


def test_a_repeating_schedule_made_oneshot_runs_at_its_next_occurrence():
    schedule = parse_schedule("every weekday at 9", MADRID, NOW, oneshot=True)
    assert schedule.is_oneshot
    assert schedule.run_once_at == local(MADRID, 2026, 11, 30, 9, 0)


@pytest.mark.parametrize("text", [
    "blah",
    "every blue moon",
    "whenever you feel like it",
    "every 7 minutes",       # */7 is not every 7 minutes
    "every 5 hours",
    "every day at 25",
    "every day at 9:75",
    "every day at 9:00 and 17:30",
    "today at 6",            # already past
    "2020-01-01 09:00",
    "0 9 * * * *",           # a sixth field means seconds
    "0 9 * *",
    "0 9 30 2 *",            # never happens
    "61 9 * * *",
    "",
])
def test_nonsense_is_refused_with_examples(text):
    with pytest.raises(ScheduleError) as refused:
        parse_schedule(text, MADRID, NOW)
    message = str(refused.value)
    assert "every day at 9" in message and "cada día a las 9" in message
    assert "30 18 * * 1-5" in message


@pytest.mark.parametrize("text", ["on monday at 9", "el lunes a las 9", "friday at 5pm"])
def test_a_single_weekday_is_not_guessed_to_repeat(text):
    with pytest.raises(ScheduleError, match="once or every week"):
        parse_schedule(text, MADRID, NOW)


def test_a_sixth_cron_field_is_refused_as_seconds():
    with pytest.raises(ScheduleError, match="seconds"):
        validate_cron("0 0 9 * * *")


def test_echo_says_the_schedule_in_words_with_zone_and_next_run():
    schedule = parse_schedule("every weekday at 9", MADRID, NOW)
    assert schedule.describe(NOW) == (
        "Runs at 09:00, Monday through Friday, Europe/Madrid; next: 2026-11-30 09:00 (Monday)")
    once = parse_schedule("mañana a las 9", MADRID, NOW)
    assert once.describe(NOW) == "Runs once at 2026-12-01 09:00 (Tuesday), Europe/Madrid"


def test_times_are_in_the_users_zone_and_stored_in_utc():
    schedule = parse_schedule("every day at 9", NEW_YORK, NOW)
    assert schedule.next_run(NOW) == datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="naive"):
        parse_schedule("every day at 9", MADRID, datetime(2026, 11, 30, 7, 0))


def test_weekday_tasks_skip_the_weekend():
    friday_evening = local(MADRID, 2026, 12, 4, 10, 0)
    schedule = parse_schedule("every weekday at 9", MADRID, friday_evening)
    assert schedule.next_run(friday_evening) == local(MADRID, 2026, 12, 7, 9, 0)  # Monday
    week = runs(schedule.cron_expr, MADRID, friday_evening, local(MADRID, 2026, 12, 11, 23, 0))
    assert [r.astimezone(ZoneInfo(MADRID)).strftime("%a") for r in week] == \
        ["Mon", "Tue", "Wed", "Thu", "Fri"]


def test_the_31st_skips_months_without_one():
    schedule = parse_schedule("on the 31st of every month at 9", MADRID, NOW)
    assert schedule.cron_expr == "0 9 31 * *"
    after_may = local(MADRID, 2027, 5, 31, 10, 0)
    assert schedule.next_run(after_may) == local(MADRID, 2027, 7, 31, 9, 0)  # June has 30
    assert schedule.next_run(local(MADRID, 2027, 4, 1, 0, 0)) == local(MADRID, 2027, 5, 31, 9, 0)


def test_february_29_runs_in_leap_years_only():
    for text in ("every year on february 29 at 9", "cada 29 de febrero a las 9", "0 9 29 2 *"):
        schedule = parse_schedule(text, MADRID, NOW)
        assert schedule.cron_expr == "0 9 29 2 *"
        assert schedule.next_run(NOW) == local(MADRID, 2028, 2, 29, 9, 0)
        assert schedule.next_run(local(MADRID, 2028, 3, 1, 0, 0)) == local(MADRID, 2032, 2, 29, 9, 0)


def test_february_30_is_refused():
    with pytest.raises(ScheduleError, match="never"):
        parse_schedule("every year on february 30 at 9", MADRID, NOW)


# -- daylight-saving time: decided behaviour, see app/tasks/schedule.py's docstring ------------------


def test_spring_forward_madrid_a_skipped_time_runs_once_after_the_gap():
    # 29 March 2026: 02:00 → 03:00 in Madrid; 02:30 does not exist that day.
    found = runs("30 2 * * *", MADRID, local(MADRID, 2026, 3, 28, 12, 0), local(MADRID, 2026, 3, 30, 12, 0))
    assert found == [local(MADRID, 2026, 3, 29, 3, 0), local(MADRID, 2026, 3, 30, 2, 30)]


def test_spring_forward_new_york_a_skipped_time_runs_once_after_the_gap():
    # 8 March 2026: 02:00 → 03:00 in New York.
    found = runs("30 2 * * *", NEW_YORK, local(NEW_YORK, 2026, 3, 7, 12, 0), local(NEW_YORK, 2026, 3, 9, 12, 0))
    assert found == [local(NEW_YORK, 2026, 3, 8, 3, 0), local(NEW_YORK, 2026, 3, 9, 2, 30)]


def test_fall_back_madrid_a_repeated_time_runs_once_at_its_first_occurrence():
    # 25 October 2026: 03:00 → 02:00 in Madrid; 02:30 happens twice.
    found = runs("30 2 * * *", MADRID, local(MADRID, 2026, 10, 24, 12, 0), local(MADRID, 2026, 10, 26, 12, 0))
    assert found == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC),   # 02:30 CEST, the first one
                     datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]


def test_fall_back_new_york_a_repeated_time_runs_once_at_its_first_occurrence():
    # 1 November 2026: 02:00 → 01:00 in New York; 01:30 happens twice.
    found = runs("30 1 * * *", NEW_YORK, local(NEW_YORK, 2026, 10, 31, 12, 0), local(NEW_YORK, 2026, 11, 2, 12, 0))
    assert found == [datetime(2026, 11, 1, 5, 30, tzinfo=UTC),    # 01:30 EDT
                     datetime(2026, 11, 2, 6, 30, tzinfo=UTC)]


def test_fall_back_from_inside_the_repeated_hour_waits_for_the_next_day():
    second_pass = local(MADRID, 2026, 10, 25, 2, 10, fold=1)  # 02:10 CET, after 02:30 CEST ran
    assert next_occurrence("30 2 * * *", MADRID, second_pass) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_intervals_follow_elapsed_time_through_the_repeated_hour():
    # 00:00Z to 02:00Z on 25 October 2026 is 02:00 CEST to 03:00 CET: two real hours.
    found = runs("*/15 * * * *", MADRID, datetime(2026, 10, 24, 23, 59, tzinfo=UTC),
                 datetime(2026, 10, 25, 1, 59, tzinfo=UTC))
    assert len(found) == 8
    assert all(b - a == timedelta(minutes=15) for a, b in zip(found, found[1:], strict=False))


def test_a_oneshot_in_the_spring_gap_runs_at_the_first_minute_after_it():
    before = local(MADRID, 2026, 3, 28, 12, 0)
    schedule = parse_schedule("tomorrow at 2:30", MADRID, before)
    assert schedule.run_once_at == local(MADRID, 2026, 3, 29, 3, 0)

