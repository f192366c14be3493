"""Schedules: a cron expression or plain English or Spanish, turned into a validated
5-field cron expression, its next run, and a sentence that echoes it back.

What is understood (accents and case do not matter):

    every day at 9 · every weekday at 18:30 · every monday and thursday at 8am ·
    every weekend at 10 · every 15 minutes · every 2 hours · every hour on weekdays ·
    on the 1st of every month at noon · on the last day of every month at 18:00
    cada día a las 9 · cada lunes a las 8 · todos los días laborables a las 18:30 ·
    de lunes a viernes a las 9 y media · cada 15 minutos · el día 1 de cada mes a mediodía
    daily · every morning · every monday evening at 7 · cada mañana · todas las noches ·
    todos los lunes por la tarde · on weekdays at noon · los días laborables al mediodía
    weekly · weekly on friday · cada semana · monthly · cada mes · every other day ·
    every 3 days · cada dos días · día por medio
    one-shots: in 10 minutes · in 30 seconds · at noon · tomorrow at 9 · today at 17:30 ·
    tonight · next tuesday · next friday at 18:00 · en 10 minutos · a mediodía ·
    mañana a las 9 · el próximo martes · pasado mañana a las 8 de la tarde ·
    2026-12-01 09:00 (ISO 8601)

A day without a time runs at 09:00 ("daily", "tomorrow", "next tuesday"); a part of the
day stands for a time (morning/mañana 09:00, afternoon 15:00, tarde 16:00, evening
18:00, night/noche 21:00) and reads an hour said with it ("every evening at 7" is
19:00); a time without a day is its next occurrence, once ("at noon"). "weekly" runs on
Mondays and "monthly" on the 1st; "every other day" is cron's */2, the odd days of the
month (the 31st and the 1st run back to back); skipping weeks cannot be said in cron and
is refused. The echo shows what was understood. Anything else is refused, never guessed
— "on monday at 9" too, which could mean once or every week: one short line naming what
was not understood ("blue moon", "25:00", "yesterday"), then a few lines of examples
(app/tasks/grammar.py reads the words, app/tasks/phrases.py holds them). A cron expression must have
exactly 5 fields (a sixth would mean seconds) and pass croniter's strict check; day of
month and day of week combine as in cron (either matches), not as in huey's crontab.

Times are wall-clock times in the user's time zone; every datetime here is aware and
the next run is returned in UTC. Daylight-saving time (documented, and tested):
- a wall-clock time skipped when clocks go forward (02:30 in Madrid on the last Sunday
  of March) runs at the first minute after the gap (03:00), once;
- a wall-clock time that happens twice when clocks go back (02:30 in Madrid, 01:30 in
  New York) runs once, at its first occurrence. Schedules whose hour field is a
  wildcard ("every 15 minutes", "every hour") follow elapsed time instead and keep
  running through the repeated hour, as cron does.
"""

from __future__ import annotations

__all__ = ["Schedule", "ScheduleError", "describe_schedule", "is_fixed_moment", "local_text",
           "next_occurrence", "parse_schedule", "time_zone", "validate_cron"]

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import ExpressionDescriptor, Options
from croniter import croniter

from app.tasks.grammar import (
    ScheduleError,
    read_moment,
    read_repeating,
    read_words,
    refuse,
    wall_time,
)

UTC = UTC

_CRON_MACROS = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_CRON_FIELD = re.compile(r"(?:[\d*/,\-?LW#]|[A-Za-z]{3})+")
_DESCRIBE_OPTIONS = Options(locale_code="en_US", use_24hour_time_format=True)


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule. One-shots carry the exact moment they run (`run_once_at`, UTC)
    and a cron expression for that minute, day and month, kept for display."""

    original: str
    cron_expr: str
    timezone: str
    run_once_at: datetime | None = None

    @property
    def is_oneshot(self) -> bool:
        return self.run_once_at is not None

    def next_run(self, after: datetime) -> datetime | None:
        """The first run strictly after `after` (UTC), or None for a one-shot already past."""
        if self.run_once_at is not None:
            return self.run_once_at if self.run_once_at > after else None
        return next_occurrence(self.cron_expr, self.timezone, after)

    def describe(self, now: datetime) -> str:
        return describe_schedule(self.cron_expr, self.timezone, self.next_run(now),
                                 oneshot=self.is_oneshot)


# ----------------------------------------------------------------------------- public API


def parse_schedule(text: str, timezone_name: str, now: datetime, *, oneshot: bool = False,
                   allow_past: bool = False) -> Schedule:
    """Understand `text` (cron, plain English or Spanish, ISO date-time) in the user's zone.

    `oneshot=True` turns a repeating schedule into a single run at its next occurrence.
    A one-shot in the past is refused unless `allow_past` (config.toml's, which may have
    run already). Raises ScheduleError, whose message shows examples.
    """
    _require_aware(now)
    zone = time_zone(timezone_name)
    original = " ".join(str(text).split())
    if not original:
        raise ScheduleError("the schedule is empty")
    local_now = now.astimezone(zone)
    words = read_words(original)

    moment = _parse_iso(original, zone) or read_moment(words, local_now)
    if moment is not None:
        if moment <= now and not allow_past:
            raise ScheduleError(
                f'"{original}" is in the past: {local_text(moment, zone)}, {timezone_name}')
        return _oneshot(original, timezone_name, moment)

    cron_expr = _parse_cron(original)
    if cron_expr is None:
        cron_expr = read_repeating(words)
    if cron_expr is None:
        refuse(original, words)
    cron_expr = validate_cron(cron_expr)
    if oneshot:
        return _oneshot(original, timezone_name, next_occurrence(cron_expr, timezone_name, now))
    return Schedule(original, cron_expr, timezone_name)


def validate_cron(cron_expr: str) -> str:
    """The expression with single spaces, if it has exactly 5 fields and croniter's
    strict check passes; else ScheduleError saying what is wrong."""
    expr = " ".join(cron_expr.split())
    expr = _CRON_MACROS.get(expr.lower(), expr)
    fields = expr.split(" ")
    if len(fields) == 6:
        raise ScheduleError(
            f'"{cron_expr}" has 6 fields; the first would mean seconds, and Hilo schedules to '
            "the minute: use 5 fields (minute hour day-of-month month day-of-week)")
    if len(fields) != 5:
        raise ScheduleError(
            f'"{cron_expr}" has {len(fields)} fields; a cron expression has exactly 5 '
            "(minute hour day-of-month month day-of-week)")
    try:
        croniter.expand(expr, strict=True)
    except (ValueError, KeyError) as exc:  # croniter's errors are ValueErrors
        raise ScheduleError(f'"{cron_expr}" is not a valid cron expression ({exc})') from None
    return expr


def next_occurrence(cron_expr: str, timezone_name: str, after: datetime) -> datetime:
    """The first occurrence of `cron_expr` strictly after `after`, in UTC.

    Evaluated in `timezone_name`; a wall-clock time repeated when clocks go back runs
    only at its first occurrence unless the hour field is a wildcard (module docstring).
    """
    _require_aware(after)
    zone = ZoneInfo(timezone_name)
    follows_elapsed_time = cron_expr.split()[1].startswith("*")
    it = croniter(cron_expr, after.astimezone(zone))
    while True:
        candidate: datetime = it.get_next(datetime)
        if not follows_elapsed_time and _is_second_pass(candidate):
            continue
        return candidate.astimezone(UTC)


def describe_schedule(cron_expr: str, timezone_name: str, next_run_at: datetime | None, *,
                      oneshot: bool = False) -> str:
    """The echo shown when a task is created: "Runs at 09:00, Monday through Friday,
    Europe/Madrid; next: 2026-12-01 09:00 (Tuesday)"."""
    zone = ZoneInfo(timezone_name)
    if oneshot:
        if next_run_at is None:
            return f"Runs once ({timezone_name}); its time has passed"
        return f"Runs once at {local_text(next_run_at, zone)}, {timezone_name}"
    try:
        words = ExpressionDescriptor(cron_expr, _DESCRIBE_OPTIONS).get_description()
        words = words[0].lower() + words[1:]
    except Exception:  # noqa: BLE001 — the echo is a courtesy; the cron text still says it
        words = f'on the cron schedule "{cron_expr}"'
    text = f"Runs {words}, {timezone_name}"
    if next_run_at is not None:
        text += f"; next: {local_text(next_run_at, zone)}"
    return text


def is_fixed_moment(text: str) -> bool:
    """True for an ISO date-time, which names the same moment whenever it is parsed
    ("tomorrow at 9" does not): what a one-shot in config.toml needs."""
    return bool(_ISO_START.match(" ".join(text.split())))


# ----------------------------------------------------------------------------- helpers


def time_zone(timezone_name: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f'"{timezone_name}" is not a time zone: name one as in '
                            '"Europe/Madrid" or "America/New_York"', examples=False) from None


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("naive datetime: pass a timezone-aware one")


def _is_second_pass(local: datetime) -> bool:
    """True for the second occurrence of a wall-clock time repeated when clocks go back."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def local_text(moment: datetime, zone: ZoneInfo) -> str:
    """`moment` as the clock in `zone` says it, to the minute (to the second when it has
    seconds: "in 30 seconds"), with its day: "2026-12-01 09:00 (Tuesday)"."""
    local = moment.astimezone(zone)
    seconds = f":{local:%S}" if local.second else ""  # "in 30 seconds"
    return f"{local:%Y-%m-%d %H:%M}{seconds} ({local:%A})"


def _oneshot(original: str, timezone_name: str, moment: datetime) -> Schedule:
    local = moment.astimezone(ZoneInfo(timezone_name))
    cron_expr = f"{local.minute} {local.hour} {local.day} {local.month} *"
    return Schedule(original, cron_expr, timezone_name, run_once_at=moment.astimezone(UTC))


# -- cron --------------------------------------------------------------------------------


def _parse_cron(text: str) -> str | None:
    """`text` if it looks like a cron expression (then validate_cron judges it), else None."""
    if text.lower() in _CRON_MACROS:
        return text
    fields = text.split()
    if len(fields) < 5 or not re.match(r"[\d*/?]", fields[0]):
        return None
    if all(_CRON_FIELD.fullmatch(f) for f in fields):
        return text
    return None


# -- ISO date-times and one-shots ----------------------------------------------------------


_ISO_START = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{1,2}:\d{2}")


def _parse_iso(text: str, zone: ZoneInfo) -> datetime | None:
    if not _ISO_START.match(text):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(f'"{text}" is not a valid date-time') from None
    if moment.tzinfo is None:
        return wall_time(moment.date(), moment.hour, moment.minute, zone).replace(
            second=moment.second, microsecond=moment.microsecond)
    return moment
