"""Schedules: a cron expression or plain English or Spanish, turned into a validated
5-field cron expression, its next run, and a sentence that echoes it back.

What is understood (accents and case do not matter):

    every day at 9 · every weekday at 18:30 · every monday and thursday at 8am ·
    every weekend at 10 · every 15 minutes · every 2 hours · every hour on weekdays ·
    on the 1st of every month at noon · on the last day of every month at 18:00
    cada día a las 9 · cada lunes a las 8 · todos los días laborables a las 18:30 ·
    de lunes a viernes a las 9 y media · cada 15 minutos · el día 1 de cada mes a mediodía
    daily · every morning · every monday evening at 7 · cada mañana · todas las noches ·
    todos los lunes por la tarde
    one-shots: in 10 minutes · in 30 seconds · at noon · tomorrow at 9 · today at 17:30 ·
    tonight · next tuesday · next friday at 18:00 · en 10 minutos · a mediodía ·
    mañana a las 9 · el próximo martes · pasado mañana a las 8 de la tarde ·
    2026-12-01 09:00 (ISO 8601)

A day without a time runs at 09:00 ("daily", "tomorrow", "next tuesday"); a part of the
day stands for a time (morning/mañana 09:00, afternoon 15:00, tarde 16:00, evening
18:00, night/noche 21:00) and reads an hour said with it ("every evening at 7" is
19:00); a time without a day is its next occurrence, once ("at noon"). The echo shows
what was understood. Anything else is refused with examples, never guessed — "on monday
at 9" too, which could mean once or every week. A cron expression must have
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

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import ExpressionDescriptor, Options
from croniter import croniter

from app.errors import InvalidInput

UTC = UTC

# Every example here parses (a test says so), whenever it is read.
EXAMPLES_EN = (
    "every day at 9", "daily", "every weekday at 18:30", "every monday and thursday at 8am",
    "every morning", "every 15 minutes", "on the 1st of every month at noon", "at noon",
    "in 10 minutes", "tomorrow at 9", "next tuesday",
)
EXAMPLES_ES = (
    "cada día a las 9", "todos los días", "cada lunes a las 8",
    "todos los días laborables a las 18:30", "cada mañana", "cada 15 minutos", "a mediodía",
    "en 10 minutos", "mañana a las 9", "el próximo martes",
)
# An ISO example in the future: a fixed date would turn into a refused one-shot.
EXAMPLES_OTHER = (f"{date.today().year + 1}-12-01 09:00", "30 18 * * 1-5")
EXAMPLES_TEXT = (
    "Write it like: " + " · ".join(EXAMPLES_EN) + "; or: " + " · ".join(EXAMPLES_ES)
    + "; or an ISO date-time, or a cron expression (minute hour day month weekday): "
    + " · ".join(EXAMPLES_OTHER) + "."
)
# A day named without a time ("daily", "tomorrow", "next tuesday") runs at this hour.
DEFAULT_HOUR = 9
# The time a part of the day stands for, said alone ("every morning")...
_PART_HOURS = {"morning": 9, "afternoon": 15, "evening": 18, "night": 21,
               "manana": 9, "tarde": 16, "noche": 21}
# ...and how it reads an hour said with it ("every evening at 7" is 19:00), in the
# words _TIME understands ("7 de la tarde").
_PART_READING = {"morning": "manana", "afternoon": "tarde", "evening": "tarde",
                 "night": "noche", "manana": "manana", "tarde": "tarde", "noche": "noche"}

# Cron's day-of-week numbers.
_WEEKDAY_NUMBERS = {
    "sunday": 0, "sun": 0, "domingo": 0, "dom": 0,
    "monday": 1, "mon": 1, "lunes": 1, "lun": 1,
    "tuesday": 2, "tue": 2, "tues": 2, "martes": 2, "mar": 2,
    "wednesday": 3, "wed": 3, "miercoles": 3, "mie": 3,
    "thursday": 4, "thu": 4, "thur": 4, "thurs": 4, "jueves": 4, "jue": 4,
    "friday": 5, "fri": 5, "viernes": 5, "vie": 5,
    "saturday": 6, "sat": 6, "sabado": 6, "sab": 6,
}
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "un": 1, "uno": 1, "una": 1,
    "two": 2, "dos": 2, "three": 3, "tres": 3, "four": 4, "cuatro": 4, "five": 5, "cinco": 5,
    "six": 6, "seis": 6, "seven": 7, "siete": 7, "eight": 8, "ocho": 8, "nine": 9, "nueve": 9,
    "ten": 10, "diez": 10, "eleven": 11, "once": 11, "twelve": 12, "doce": 12,
    "fifteen": 15, "quince": 15, "twenty": 20, "veinte": 20, "thirty": 30, "treinta": 30,
}
_SECOND_UNITS = {"s", "sec", "secs", "second", "seconds", "segundo", "segundos"}
_MINUTE_UNITS = {"m", "min", "mins", "minute", "minutes", "minuto", "minutos"}
_HOUR_UNITS = {"h", "hr", "hrs", "hour", "hours", "hora", "horas"}
_DAY_UNITS = {"d", "day", "days", "dia", "dias"}
_WEEK_UNITS = {"w", "week", "weeks", "semana", "semanas"}
_CRON_MACROS = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_CRON_FIELD = re.compile(r"(?:[\d*/,\-?LW#]|[A-Za-z]{3})+")
# Words that introduce a time of day: "at 9", "a las 9", "a la 1", "al mediodía", "a mediodía".
_TIME_MARKER = re.compile(r"(?:^|\s)(?:at|@|a las|a la|al|a)\s")
_LIST_SEPARATOR = re.compile(r"\s*(?:,|&|\band\b|\by\b|\be\b)\s*")
_DESCRIBE_OPTIONS = Options(locale_code="en_US", use_24hour_time_format=True)


class ScheduleError(InvalidInput, ValueError):
    """A schedule that cannot be understood or can never run; str() shows examples."""

    code = "invalid_task"

    def __init__(self, problem: str, *, examples: bool = True) -> None:
        super().__init__(f"{problem}. {EXAMPLES_TEXT}" if examples else problem)
        self.problem = problem


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
    words = _parts_of_day(_normalise(original))

    moment = _parse_iso(original, zone) or _parse_oneshot(words, local_now)
    if moment is not None:
        if moment <= now and not allow_past:
            raise ScheduleError(
                f'"{original}" is in the past: {_local_text(moment, zone)}, {timezone_name}')
        return _oneshot(original, timezone_name, moment)

    cron_expr = _parse_cron(original)
    if cron_expr is None:
        cron_expr = _parse_recurring(words)
    if cron_expr is None:
        raise ScheduleError(f'could not understand the schedule "{original}"')
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
        return f"Runs once at {_local_text(next_run_at, zone)}, {timezone_name}"
    try:
        words = ExpressionDescriptor(cron_expr, _DESCRIBE_OPTIONS).get_description()
        words = words[0].lower() + words[1:]
    except Exception:  # noqa: BLE001 — the echo is a courtesy; the cron text still says it
        words = f'on the cron schedule "{cron_expr}"'
    text = f"Runs {words}, {timezone_name}"
    if next_run_at is not None:
        text += f"; next: {_local_text(next_run_at, zone)}"
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


def _local_text(moment: datetime, zone: ZoneInfo) -> str:
    local = moment.astimezone(zone)
    seconds = f":{local:%S}" if local.second else ""  # "in 30 seconds"
    return f"{local:%Y-%m-%d %H:%M}{seconds} ({local:%A})"


def _oneshot(original: str, timezone_name: str, moment: datetime) -> Schedule:
    local = moment.astimezone(ZoneInfo(timezone_name))
    cron_expr = f"{local.minute} {local.hour} {local.day} {local.month} *"
    return Schedule(original, cron_expr, timezone_name, run_once_at=moment.astimezone(UTC))


def _normalise(text: str) -> str:
    """Lower case, no accents ("mañana" → "manana"), single spaces, no final full stop."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    plain = plain.replace("a.m.", "am").replace("p.m.", "pm")
    return " ".join(plain.split()).rstrip(".!")


def _number(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


def _wall_time(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    """That wall-clock time in `zone`; a time skipped by a DST jump becomes the first
    minute after the gap (as croniter does for repeating schedules)."""
    naive = datetime(day.year, day.month, day.day, hour, minute)
    for step in range(0, 24 * 60):
        candidate = (naive + timedelta(minutes=step)).replace(tzinfo=zone)
        round_trip = candidate.astimezone(UTC).astimezone(zone)
        if round_trip.replace(tzinfo=None) == candidate.replace(tzinfo=None):
            return candidate
    raise AssertionError("no time zone skips a whole day")  # pragma: no cover


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
        return _wall_time(moment.date(), moment.hour, moment.minute, zone).replace(
            second=moment.second, microsecond=moment.microsecond)
    return moment


_RELATIVE = re.compile(
    r"^(?:in|en|dentro de) "
    r"(?:(?P<half>half an hour|media hora)|(?P<n>\d+|[a-z]+) ?(?P<unit>[a-z]+))$")
_DAY_WORDS = {
    "today": 0, "hoy": 0, "tonight": 0, "esta noche": 0, "esta tarde": 0,
    "tomorrow": 1, "manana": 1, "day after tomorrow": 2, "the day after tomorrow": 2,
    "pasado manana": 2,
}


def _parse_oneshot(text: str, local_now: datetime) -> datetime | None:
    relative = _RELATIVE.match(text)
    if relative:
        if relative["half"]:
            return local_now.astimezone(UTC) + timedelta(minutes=30)
        amount, unit = _number(relative["n"]), relative["unit"]
        if amount is None or amount <= 0:
            raise ScheduleError(
                f'"{text}": say how long from now with a number, like "in 10 minutes"')
        if unit in _SECOND_UNITS:
            delta = timedelta(seconds=amount)
        elif unit in _MINUTE_UNITS:
            delta = timedelta(minutes=amount)
        elif unit in _HOUR_UNITS:
            delta = timedelta(hours=amount)
        elif unit in _DAY_UNITS:
            delta = timedelta(days=amount)
        elif unit in _WEEK_UNITS:
            delta = timedelta(weeks=amount)
        else:
            raise ScheduleError(
                f'"{text}": the unit "{unit}" is not seconds, minutes, hours, days or weeks')
        return local_now.astimezone(UTC) + delta

    bare = _next_time_of_day(text, local_now)
    if bare is not None:
        return bare
    for day_part, time_part in _split_at_time(text):
        offset = _day_offset(day_part, local_now.date())
        if offset is None:
            continue
        evening = day_part in ("tonight", "esta noche", "esta tarde")
        hours, minute = _parse_times(time_part, evening=evening)
        if len(hours) != 1:
            raise ScheduleError(f'"{text}" names more than one time; a one-shot runs once')
        day = local_now.date() + timedelta(days=offset)
        return _wall_time(day, hours[0], minute, local_now.tzinfo).astimezone(UTC)
    offset = _day_offset(text, local_now.date())
    if offset is not None:
        day = local_now.date() + timedelta(days=offset)
        return _wall_time(day, DEFAULT_HOUR, 0, local_now.tzinfo).astimezone(UTC)
    return None


# "next tuesday", "el próximo martes", "el martes que viene": the first one after today;
# "this friday", "este viernes": the first one from today.
_NEXT_WEEKDAY = re.compile(
    r"^(?:next|el proximo|proximo|el (?P<a>[a-z]+) (?:que viene|proximo))(?: (?P<b>[a-z]+))?$")
_THIS_WEEKDAY = re.compile(r"^(?:this|este) (?P<day>[a-z]+)$")


def _day_offset(text: str, today: date) -> int | None:
    """Days from today to the day `text` names ("tomorrow", "next tuesday"), or None."""
    if text in _DAY_WORDS:
        return _DAY_WORDS[text]
    following, this = _NEXT_WEEKDAY.match(text), _THIS_WEEKDAY.match(text)
    if following and not (following["a"] and following["b"]):
        name = following["a"] or following["b"]
    elif this:
        name = this["day"]
    else:
        return None
    cron_day = _WEEKDAY_NUMBERS.get(name)
    if cron_day is None:
        return None
    ahead = ((cron_day - 1) % 7 - today.weekday()) % 7  # cron's 0 is Sunday, Python's 6
    return ahead or (7 if following else 0)


_BARE_TIME = re.compile(r"^(?:(?:at|@|a las|a la|al|a) )?(?P<time>.+)$")


def _next_time_of_day(text: str, local_now: datetime) -> datetime | None:
    """"at noon", "a las 9", "midnight": that time's next occurrence, or None."""
    match = _BARE_TIME.match(text)
    if match is None or (match["time"] == text and text not in _NAMED_TIMES):
        return None  # a bare number is not a time without "at": it may be cron
    try:
        hours, minute = _parse_times(match["time"])
    except ScheduleError:
        return None
    if len(hours) != 1:
        return None
    moment = _wall_time(local_now.date(), hours[0], minute, local_now.tzinfo)
    if moment <= local_now:
        moment = _wall_time(local_now.date() + timedelta(days=1), hours[0], minute,
                            local_now.tzinfo)
    return moment.astimezone(UTC)


# -- parts of the day ----------------------------------------------------------------------


_PART = r"(?P<part>morning|afternoon|evening|night|manana|tarde|noche)s?"
_AT_TIME = r"(?: (?:at|@|a las|a la|a) (?P<time>.+))?"
# "every morning", "cada mañana", "todas las noches a las 10"
_EVERY_PART = re.compile(rf"^(?:every|each|cada|todas las) {_PART}{_AT_TIME}$")
# "tomorrow morning", "every monday evening at 7", "next tuesday in the afternoon"
_DAYS_THEN_PART_EN = re.compile(
    r"^(?P<lead>.+?) (?:in the )?(?P<part>morning|afternoon|evening|night)"
    r"(?: (?:at|@) (?P<time>.+))?$")
# "mañana por la mañana", "todos los lunes por la tarde a las 5"
_DAYS_THEN_PART_ES = re.compile(
    r"^(?P<lead>.+?) (?:por|en|de) la (?P<part>manana|tarde|noche)"
    r"(?: (?:a las|a la|a) (?P<time>.+))?$")
# "tonight", "esta mañana", "this evening"
_THIS_PART = re.compile(rf"^(?:tonight|(?:this|esta) {_PART}){_AT_TIME}$")
# A lead that ends in a time ("todos los sábados a las 8" + "de la tarde") is not a day.
_ENDS_IN_TIME = re.compile(
    r"(?:(?:^|\s)(?:at|@|a las|a la|al) \S+|(?:^|\s)a (?:mediodia|medianoche)|\d(?:am|pm)?"
    r"|\sat)$")


def _parts_of_day(text: str) -> str:
    """Say a part of the day as a time: "every morning" → "every day at 9", "tomorrow
    evening at 7" → "tomorrow at 7 de la tarde"; other text unchanged."""
    match = _EVERY_PART.match(text)
    if match:
        return f"every day at {_part_time(match['part'], match['time'])}"
    match = _THIS_PART.match(text)
    if match:
        part = match["part"] or "night"  # "tonight"
        return f"today at {_part_time(part, match['time'])}"
    for pattern in (_DAYS_THEN_PART_EN, _DAYS_THEN_PART_ES):
        match = pattern.match(text)
        if match and not _ENDS_IN_TIME.search(match["lead"]):
            return f"{match['lead']} at {_part_time(match['part'], match['time'])}"
    return text


def _part_time(part: str, time_text: str | None) -> str:
    """The time to write for `part`: its own hour, or the hour said read in that part
    ("7" in the evening → "7 de la tarde"); an hour already past noon stays as it is."""
    if time_text is None:
        return str(_PART_HOURS[part])
    clock = re.fullmatch(r"(\d{1,2})(?:[:.h]\d{2})?", time_text)
    if clock and 1 <= int(clock.group(1)) <= 12:
        return f"{time_text} de la {_PART_READING[part]}"
    return time_text


# -- times of day ------------------------------------------------------------------------


_TIME = re.compile(
    r"^(?P<h>\d{1,2})(?:[:.h](?P<m>\d{2}))?h?(?: ?(?P<ampm>am|pm))?"
    r"(?: (?:de|en|por) la (?P<part>manana|tarde|noche|madrugada))?(?: (?:en punto|o'?clock))?$")


def _parse_times(text: str, *, evening: bool = False) -> tuple[list[int], int]:
    """"9", "18:30", "8am", "9 y media", "noon", "9 and 18" → (hours, minute).

    Raises ScheduleError when a time is out of range or several times differ in minutes
    (one cron expression holds one minute)."""
    text = _spanish_time_phrases(text)
    pieces = [p for p in _LIST_SEPARATOR.split(text) if p]
    if not pieces:
        raise ScheduleError(f'"{text}" is not a time of day')
    times = [_parse_time(piece, evening=evening) for piece in pieces]
    minutes = {m for _, m in times}
    if len(minutes) > 1:
        raise ScheduleError(
            f'"{text}": several times in one task must share their minutes (9:00 and 18:00); '
            "make one task per time")
    return sorted({h for h, _ in times}), minutes.pop()


def _spanish_time_phrases(text: str) -> str:
    """Spanish ways of saying a time (and the English "in the evening") in _TIME's words."""
    for english, spanish in ((" in the morning", " de la manana"),
                             (" in the afternoon", " de la tarde"),
                             (" in the evening", " de la tarde"), (" at night", " de la noche")):
        text = text.replace(english, spanish)
    words = {w: str(n) for w, n in _NUMBER_WORDS.items() if 1 <= n <= 12 and len(w) > 2}

    def number(match: re.Match[str]) -> str:
        return words.get(match.group(0), match.group(0))

    text = re.sub(r"\b[a-z]+\b", number, text)
    text = re.sub(r"\b(\d{1,2}) y media\b", r"\1:30", text)
    text = re.sub(r"\b(\d{1,2}) y cuarto\b", r"\1:15", text)
    return re.sub(r"\b(\d{1,2}) menos cuarto\b",
                  lambda m: f"{(int(m.group(1)) - 1) % 24}:45", text)


_NAMED_TIMES = {"noon": (12, 0), "midday": (12, 0), "12 noon": (12, 0), "mediodia": (12, 0),
                "el mediodia": (12, 0), "midnight": (0, 0), "medianoche": (0, 0),
                "la medianoche": (0, 0)}


def _parse_time(text: str, *, evening: bool = False) -> tuple[int, int]:
    if text in _NAMED_TIMES:
        return _NAMED_TIMES[text]
    match = _TIME.match(text)
    if not match:
        raise ScheduleError(f'"{text}" is not a time of day (write 9, 18:30, 8am or noon)')
    hour, minute = int(match["h"]), int(match["m"] or 0)
    ampm, part = match["ampm"], match["part"]
    if minute > 59:
        raise ScheduleError(f'"{text}": minutes go from 00 to 59')
    if ampm or part:
        if not 1 <= hour <= 12:
            raise ScheduleError(f'"{text}": with am/pm the hour goes from 1 to 12')
        if ampm == "am" or part in ("manana", "madrugada"):
            hour = 0 if hour == 12 and ampm == "am" else hour
        elif ampm == "pm" or part == "tarde":
            hour = hour if hour == 12 else hour + 12
        elif part == "noche":
            hour = 0 if hour == 12 else hour + 12 if hour >= 6 else hour
    elif evening and 1 <= hour < 12:
        hour += 12
    if hour > 23:
        raise ScheduleError(f'"{text}": hours go from 0 to 23')
    return hour, minute


def _split_at_time(text: str) -> list[tuple[str, str]]:
    """Every way to read `text` as (days, time): "DAYS at TIME" or "at TIME DAYS"."""
    splits = []
    for marker in _TIME_MARKER.finditer(text):
        before, after = text[:marker.start()].strip(), text[marker.end():].strip()
        if before:
            splits.append((before, after))
        else:  # the time comes first: try every place the days could begin
            words = after.split(" ")
            splits.extend((" ".join(words[k:]), " ".join(words[:k])) for k in range(1, len(words)))
    return splits


# -- repeating schedules -------------------------------------------------------------------


def _parse_recurring(text: str) -> str | None:
    interval = _parse_interval(text)
    if interval is not None:
        return interval
    errors: list[ScheduleError] = []
    for day_part, time_part in _split_at_time(text):
        days = _parse_days(day_part)
        if days is None:
            if _parse_days(day_part, repeating=True) is not None:
                errors.append(ScheduleError(
                    f'"{text}" could mean that day once or every week: to repeat it say '
                    '"every monday at 9" ("cada lunes a las 9"); for once, give the date-time'))
            continue
        try:
            hours, minute = _parse_times(time_part)
        except ScheduleError as exc:
            errors.append(exc)
            continue
        dom, month, dow = days
        return f"{minute} {','.join(map(str, hours))} {dom} {month} {dow}"
    if errors:
        raise errors[0]
    days = _parse_days(text)
    if days is not None:
        dom, month, dow = days
        return f"0 {DEFAULT_HOUR} {dom} {month} {dow}"
    return None


_COUNT = r"\d+|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_INTERVAL = re.compile(
    r"^(?:every|each|cada) (?:(?P<half>half (?:an )?hour|media hora)"
    r"|(?P<quarter>quarter (?:of an )?hour|cuarto de hora)"
    rf"|(?:(?P<n>{_COUNT}) )?(?P<unit>[a-z]+))(?: (?P<days>.+))?$")
_HOURLY = re.compile(r"^(?:hourly|a cada hora)(?: (?P<days>.+))?$")


def _parse_interval(text: str) -> str | None:
    """"every 15 minutes", "every 2 hours", "every hour on weekdays", "cada media hora"."""
    hourly = _HOURLY.match(text)
    match = _INTERVAL.match(text)
    if hourly:
        minutes, unit_is_hours, days_text = 60, True, hourly["days"]
    elif match and (match["half"] or match["quarter"]):
        minutes, unit_is_hours, days_text = (30 if match["half"] else 15), False, match["days"]
    elif match and (match["unit"] in _MINUTE_UNITS or match["unit"] in _HOUR_UNITS):
        count = _number(match["n"]) if match["n"] else 1
        if count is None:
            return None
        unit_is_hours = match["unit"] in _HOUR_UNITS
        minutes, days_text = count * (60 if unit_is_hours else 1), match["days"]
    elif match and match["unit"] in _SECOND_UNITS:
        raise ScheduleError(f'"{text}": tasks repeat at most every minute; say "every minute"')
    else:
        return None
    dom, month, dow = "*", "*", "*"
    if days_text:
        days = (_parse_days(re.sub(r"^(?:on|de|entre) ", "", days_text), repeating=True)
                or _parse_days(days_text, repeating=True))
        if days is None:
            return None
        dom, month, dow = days
    if minutes <= 0:
        raise ScheduleError(f'"{text}": the interval must be at least a minute')
    if unit_is_hours or minutes % 60 == 0:
        hours = minutes // 60
        if 24 % hours:
            raise ScheduleError(
                f'"{text}": cron repeats within a day, so the hours must divide 24 '
                "(1, 2, 3, 4, 6, 8, 12)")
        hour_field = "*" if hours == 1 else "0" if hours == 24 else f"*/{hours}"
        return f"0 {hour_field} {dom} {month} {dow}"
    if 60 % minutes:
        raise ScheduleError(
            f'"{text}": cron repeats within an hour, so the minutes must divide 60 '
            "(1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)")
    return f"{'*' if minutes == 1 else f'*/{minutes}'} * {dom} {month} {dow}"


_EVERY = r"(?:every|each|cada|todos los|todas las|los|on|el)"
_DAY_PREFIX = re.compile(r"^(every|each|cada|todos los|todas las|los|on|el|from|de) ")
_REPEATING_CUES = ("every", "each", "cada", "todos los", "todas las", "los")
_DAILY = {"day", "days", "daily", "everyday", "dia", "dias", "diariamente", "a diario",
          "day of the week", "dias de la semana"}
_WEEKDAYS = {"weekday", "weekdays", "working day", "working days", "business day",
             "business days", "workday", "workdays", "dia laborable", "dias laborables",
             "laborable", "laborables", "dia habil", "dias habiles", "dia entre semana",
             "entre semana"}
_WEEKENDS = {"weekend", "weekends", "weekend day", "weekend days", "fin de semana",
             "fines de semana"}
_MONTHS = {
    name: number for number, names in enumerate((
        ("january", "jan", "enero", "ene"), ("february", "feb", "febrero"),
        ("march", "mar", "marzo"), ("april", "apr", "abril", "abr"), ("may", "mayo"),
        ("june", "jun", "junio"), ("july", "jul", "julio"), ("august", "aug", "agosto", "ago"),
        ("september", "sep", "sept", "septiembre", "setiembre"), ("october", "oct", "octubre"),
        ("november", "nov", "noviembre"), ("december", "dec", "diciembre", "dic")), start=1)
    for name in names
}
_YEARLY = (
    re.compile(r"^(?:every|each) (?:year on )?(?P<month>[a-z]+) (?P<day>\d{1,2})(?:st|nd|rd|th)?$"),
    re.compile(r"^(?:every|each) year on (?:the )?(?P<day>\d{1,2})(?:st|nd|rd|th)? "
               r"of (?P<month>[a-z]+)$"),
    re.compile(r"^(?:on )?(?:the )?(?P<day>\d{1,2})(?:st|nd|rd|th)? of (?P<month>[a-z]+) "
               r"every year$"),
    re.compile(r"^(?:cada|todos los) (?:anos? )?(?:el )?(?P<day>\d{1,2}) de (?P<month>[a-z]+)$"),
    re.compile(r"^el (?P<day>\d{1,2}) de (?P<month>[a-z]+) de cada ano$"),
)
_MONTHLY = (
    re.compile(r"^(?:on |every |each )?(?:the )?(?:day )?(?P<days>.+?) (?:day )?"
               r"of (?:every|each|the) month$"),
    re.compile(r"^(?:every|each) month on (?:the )?(?:day )?(?P<days>.+)$"),
    re.compile(r"^monthly on (?:the )?(?:day )?(?P<days>.+)$"),
    re.compile(r"^(?:el |los )?(?:dias? )?(?P<days>.+?) de (?:cada|todos los) mes(?:es)?$"),
    re.compile(r"^(?:cada|todos los) mes(?:es)? (?:el|los) (?:dias? )?(?P<days>.+)$"),
    re.compile(r"^cada (?:dia )?(?P<days>.+?) (?:del|de cada) mes$"),
)


def _parse_days(text: str, *, repeating: bool = False) -> tuple[str, str, str] | None:
    """(day-of-month, month, day-of-week) cron fields for the days part, or None.

    Weekdays need a sign that they repeat — "every monday", "cada lunes", "los lunes",
    "on mondays", "monday to friday" — or `repeating` (after "every hour"): "on monday at
    9" and "el lunes a las 9" could mean next Monday only, and are not guessed.
    """
    for pattern in _YEARLY:
        match = pattern.match(text)
        if match and match["month"] in _MONTHS:
            day, month = int(match["day"]), _MONTHS[match["month"]]
            if not croniter.is_valid(f"0 0 {day} {month} *", strict=True):
                raise ScheduleError(f'"{text}": that day never happens')
            return str(day), str(month), "*"
    for pattern in _MONTHLY:
        match = pattern.match(text)
        if match:
            dom = _parse_month_days(match["days"])
            if dom is not None:
                return dom, "*", "*"
    prefix = _DAY_PREFIX.match(text)
    cue = prefix.group(1) if prefix else ""
    stripped = text[prefix.end():] if prefix else text
    if text in _DAILY or stripped in _DAILY:
        return "*", "*", "*"
    if stripped in _WEEKDAYS:
        return "*", "*", "1-5"
    if stripped in _WEEKENDS:
        return "*", "*", "6,0"
    weekdays = _parse_weekdays(stripped)
    if weekdays is None:
        return None
    dow, is_range, plural = weekdays
    if cue in ("from", "de"):
        repeats = is_range
    else:
        repeats = repeating or cue in _REPEATING_CUES or is_range or plural
    return ("*", "*", dow) if repeats else None


def _weekday(word: str) -> int | None:
    if word in _WEEKDAY_NUMBERS:
        return _WEEKDAY_NUMBERS[word]
    if _is_plural_weekday(word):  # mondays, sabados
        return _WEEKDAY_NUMBERS[word[:-1]]
    return None


def _is_plural_weekday(word: str) -> bool:
    return word.endswith("s") and word[:-1] in _WEEKDAY_NUMBERS


def _parse_weekdays(text: str) -> tuple[str, bool, bool] | None:
    """"monday and thursday", "lunes, miercoles y viernes", "monday to friday" →
    (cron day-of-week, is a range, every name is plural), or None."""
    span = re.match(r"^(?P<a>[a-z]+)(?: (?:to|through|thru|a|hasta) | ?- ?)(?P<b>[a-z]+)$", text)
    if span:
        first, last = _weekday(span["a"]), _weekday(span["b"])
        if first is not None and last is not None:
            if first <= last:
                return _compress(list(range(first, last + 1))), True, False
            return _compress(list(range(first, 7)) + list(range(0, last + 1))), True, False
    words = [re.sub(rf"^{_EVERY} ", "", w) for w in _LIST_SEPARATOR.split(text) if w]
    days = [_weekday(w) for w in words]
    if not days or any(d is None for d in days):
        return None
    plural = all(_is_plural_weekday(w) for w in words)
    return _compress(sorted(set(days))), False, plural  # type: ignore[arg-type]


def _compress(days: list[int]) -> str:
    if len(days) > 2 and days == list(range(days[0], days[-1] + 1)):
        return f"{days[0]}-{days[-1]}"
    return ",".join(map(str, sorted(days)))


_ORDINAL = re.compile(r"^(?:the )?(?:day )?(\d{1,2})(?:st|nd|rd|th|o|º)?$")


def _parse_month_days(text: str) -> str | None:
    """"1st", "1st and 15th", "last day", "primero", "ultimo dia", "1 y 15" → cron dom."""
    if text in ("last", "last day", "ultimo", "ultimo dia", "el ultimo dia"):
        return "L"
    days = []
    for word in _LIST_SEPARATOR.split(text):
        word = re.sub(r"^(?:el|the|dia|day) ", "", word)
        if word in ("first", "primero", "1ro"):
            days.append(1)
            continue
        match = _ORDINAL.match(word)
        if not match:
            return None
        day = int(match.group(1))
        if not 1 <= day <= 31:
            raise ScheduleError(f'"{text}": days of the month go from 1 to 31')
        days.append(day)
    return ",".join(map(str, sorted(set(days)))) if days else None
