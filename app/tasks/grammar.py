"""Plain English and Spanish read into a schedule: a moment ("tomorrow at 9", "en 10
minutos") or cron fields ("every weekday at 18:30", "cada lunes a las 8"), and when
neither, a refusal naming what was not understood.

The words are app/tasks/phrases.py's; what is read is turned into a Schedule by
app/tasks/schedule.py, which also reads cron expressions and ISO date-times.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import NoReturn
from zoneinfo import ZoneInfo

from croniter import croniter

from app.errors import InvalidInput
from app.tasks.phrases import (
    DAILY,
    DAY,
    DAY_UNITS,
    DAY_WORDS,
    DEFAULT_HOUR,
    EVERY_OTHER_DAY,
    HOUR_UNITS,
    LINKING_WORDS,
    MINUTE_UNITS,
    MONTH,
    MONTHLY,
    MONTHLY_DAY,
    MONTHS,
    NAMED_TIMES,
    NUMBER_WORDS,
    PART_HOURS,
    PART_READING,
    PAST_DAY_PREFIXES,
    PAST_DAY_SUFFIXES,
    PAST_DAY_WORDS,
    SECOND_UNITS,
    SKIPPED_WEEK_PREFIXES,
    SKIPPED_WEEKS,
    WEEK,
    WEEK_UNITS,
    WEEKDAY_NUMBERS,
    WEEKDAYS,
    WEEKENDS,
    WEEKLY,
    WEEKLY_DAY,
    examples_text,
    normalise,
)

__all__ = ["ScheduleError", "read_words", "read_moment", "read_repeating", "refuse", "wall_time",
           "MAX_EVERY_FEW_DAYS"]

# Words that introduce a time of day: "at 9", "a las 9", "a la 1", "al mediodía", "a mediodía".
_TIME_MARKER = re.compile(r"(?:^|\s)(?:at|@|a las|a la|al|a)\s")
_LIST_SEPARATOR = re.compile(r"\s*(?:,|&|\band\b|\by\b|\be\b)\s*")


class ScheduleError(InvalidInput, ValueError):
    """A schedule that cannot be understood or can never run: str() is one short line
    naming what was not understood (`problem`), then short lines of examples."""

    code = "invalid_task"

    def __init__(self, problem: str, *, examples: bool = True) -> None:
        super().__init__(f"{problem}\n{examples_text()}" if examples else problem)
        self.problem = problem


# ----------------------------------------------------------------------------- reading


def read_words(original: str) -> str:
    """`original` as the grammar reads it: normalised, a part of the day said as a time
    ("every morning" → "every day at 9")."""
    return _parts_of_day(normalise(original))


def read_moment(words: str, local_now: datetime) -> datetime | None:
    """The one moment `words` names (UTC), or None when they name none."""
    return _parse_oneshot(words, local_now)


def read_repeating(words: str) -> str | None:
    """The 5-field cron expression `words` repeat on (unvalidated), or None."""
    return _parse_recurring(words)


def refuse(original: str, words: str) -> NoReturn:
    """The ScheduleError for what neither reading understood: a day in the past said as
    such, else the words no schedule has."""
    _refuse_a_past_day(words)
    raise ScheduleError(_not_understood(original))


# ----------------------------------------------------------------------------- helpers


def _number(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    return NUMBER_WORDS.get(word)


def wall_time(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    """That wall-clock time in `zone`; a time skipped by a DST jump becomes the first
    minute after the gap (as croniter does for repeating schedules)."""
    naive = datetime(day.year, day.month, day.day, hour, minute)
    for step in range(0, 24 * 60):
        candidate = (naive + timedelta(minutes=step)).replace(tzinfo=zone)
        round_trip = candidate.astimezone(UTC).astimezone(zone)
        if round_trip.replace(tzinfo=None) == candidate.replace(tzinfo=None):
            return candidate
    raise AssertionError("no time zone skips a whole day")  # pragma: no cover


# -- one-shots -----------------------------------------------------------------------------


_RELATIVE = re.compile(
    r"^(?:in|en|dentro de) "
    r"(?:(?P<half>half an hour|media hora)|(?P<n>\d+|[a-z]+) ?(?P<unit>[a-z]+))$")

def _parse_oneshot(text: str, local_now: datetime) -> datetime | None:
    relative = _RELATIVE.match(text)
    if relative:
        if relative["half"]:
            return local_now.astimezone(UTC) + timedelta(minutes=30)
        amount, unit = _number(relative["n"]), relative["unit"]
        if amount is None or amount <= 0:
            raise ScheduleError(
                f'"{text}": say how long from now with a number, like "in 10 minutes"')
        if unit in SECOND_UNITS:
            delta = timedelta(seconds=amount)
        elif unit in MINUTE_UNITS:
            delta = timedelta(minutes=amount)
        elif unit in HOUR_UNITS:
            delta = timedelta(hours=amount)
        elif unit in DAY_UNITS:
            delta = timedelta(days=amount)
        elif unit in WEEK_UNITS:
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
        return wall_time(day, hours[0], minute, local_now.tzinfo).astimezone(UTC)
    offset = _day_offset(text, local_now.date())
    if offset is not None:
        day = local_now.date() + timedelta(days=offset)
        return wall_time(day, DEFAULT_HOUR, 0, local_now.tzinfo).astimezone(UTC)
    return None


# "next tuesday", "el próximo martes", "el martes que viene": the first one after today;
# "this friday", "este viernes": the first one from today.
_NEXT_WEEKDAY = re.compile(
    r"^(?:next|el proximo|proximo|el (?P<a>[a-z]+) (?:que viene|proximo))(?: (?P<b>[a-z]+))?$")
_THIS_WEEKDAY = re.compile(r"^(?:this|este) (?P<day>[a-z]+)$")


def _day_offset(text: str, today: date) -> int | None:
    """Days from today to the day `text` names ("tomorrow", "next tuesday"), or None."""
    if text in DAY_WORDS:
        return DAY_WORDS[text]
    following, this = _NEXT_WEEKDAY.match(text), _THIS_WEEKDAY.match(text)
    if following and not (following["a"] and following["b"]):
        name = following["a"] or following["b"]
    elif this:
        name = this["day"]
    else:
        return None
    cron_day = WEEKDAY_NUMBERS.get(name)
    if cron_day is None:
        return None
    ahead = ((cron_day - 1) % 7 - today.weekday()) % 7  # cron's 0 is Sunday, Python's 6
    return ahead or (7 if following else 0)


_BARE_TIME = re.compile(r"^(?:(?:at|@|a las|a la|al|a) )?(?P<time>.+)$")
_CLOCK = re.compile(r"\d{1,2}(?:[:.h]\d{2})?h?(?: ?(?:am|pm))?")


def _next_time_of_day(text: str, local_now: datetime) -> datetime | None:
    """"at noon", "a las 9", "midnight": that time's next occurrence, or None."""
    match = _BARE_TIME.match(text)
    if match is None or (match["time"] == text and text not in NAMED_TIMES):
        return None  # a bare number is not a time without "at": it may be cron
    try:
        hours, minute = _parse_times(match["time"])
    except ScheduleError:
        if match["time"] != text and _CLOCK.fullmatch(match["time"]):
            raise  # "at 25:00": a time, wrongly said
        return None
    if len(hours) != 1:
        return None
    moment = wall_time(local_now.date(), hours[0], minute, local_now.tzinfo)
    if moment <= local_now:
        moment = wall_time(local_now.date() + timedelta(days=1), hours[0], minute,
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
        return str(PART_HOURS[part])
    clock = re.fullmatch(r"(\d{1,2})(?:[:.h]\d{2})?", time_text)
    if clock and 1 <= int(clock.group(1)) <= 12:
        return f"{time_text} de la {PART_READING[part]}"
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
    words = {w: str(n) for w, n in NUMBER_WORDS.items() if 1 <= n <= 12 and len(w) > 2}

    def number(match: re.Match[str]) -> str:
        return words.get(match.group(0), match.group(0))

    text = re.sub(r"\b[a-z]+\b", number, text)
    text = re.sub(r"\b(\d{1,2}) y media\b", r"\1:30", text)
    text = re.sub(r"\b(\d{1,2}) y cuarto\b", r"\1:15", text)
    return re.sub(r"\b(\d{1,2}) menos cuarto\b",
                  lambda m: f"{(int(m.group(1)) - 1) % 24}:45", text)



def _parse_time(text: str, *, evening: bool = False) -> tuple[int, int]:
    if text in NAMED_TIMES:
        return NAMED_TIMES[text]
    match = _TIME.match(text)
    if not match:
        raise ScheduleError(f'"{text}" is not a time of day: write 9, 18:30, 8am or noon')
    hour, minute = int(match["h"]), int(match["m"] or 0)
    ampm, part = match["ampm"], match["part"]
    if minute > 59:
        raise ScheduleError(f'"{text}" is not a time of day: minutes go from 00 to 59')
    if ampm or part:
        if not 1 <= hour <= 12:
            raise ScheduleError(f'"{text}" is not a time of day: with am/pm the hour goes '
                                'from 1 to 12')
        if ampm == "am" or part in ("manana", "madrugada"):
            hour = 0 if hour == 12 and ampm == "am" else hour
        elif ampm == "pm" or part == "tarde":
            hour = hour if hour == 12 else hour + 12
        elif part == "noche":
            hour = 0 if hour == 12 else hour + 12 if hour >= 6 else hour
    elif evening and 1 <= hour < 12:
        hour += 12
    if hour > 23:
        raise ScheduleError(f'"{text}" is not a time of day: hours go from 0 to 23')
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


_COUNT = r"\d+|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
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
    elif match and (match["unit"] in MINUTE_UNITS or match["unit"] in HOUR_UNITS):
        count = _number(match["n"]) if match["n"] else 1
        if count is None:
            return None
        unit_is_hours = match["unit"] in HOUR_UNITS
        minutes, days_text = count * (60 if unit_is_hours else 1), match["days"]
    elif match and match["unit"] in SECOND_UNITS:
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
# "weekly on friday", "cada semana el viernes"
_WEEKLY_ON = re.compile(r"^(?:(?:every|each|cada) week|weekly|cada semana|todas las semanas"
                        r"|semanalmente) (?:on |el |los )?(?P<days>.+)$")
# "every other day", "every 3 days", "cada dos días"
_EVERY_FEW_DAYS = re.compile(rf"^(?:every|each|cada) (?:(?P<other>other|second)|(?P<n>{_COUNT})) "
                             r"(?:day|days|dia|dias)$")
# Cron's day of month counts within a month: every N days beyond this is not "every N days".
MAX_EVERY_FEW_DAYS = 15


def _every_few_days(text: str) -> str | None:
    """The day-of-month field of "every other day", "every 3 days", "cada dos días", or
    None. Cron's */2 runs on odd days of the month: the 31st and the 1st are back to back.
    Skipping weeks is refused: cron has no way to say it."""
    if text in SKIPPED_WEEKS or (text.startswith(SKIPPED_WEEK_PREFIXES) and (
            _weekday(text.split(" ", 2)[2]) is not None
            or text.split(" ", 2)[2] in WEEK_UNITS)):
        raise ScheduleError(
            f'"{text}": a schedule cannot skip weeks; try "every monday" or '
            '"the 1st and 15th of every month"')
    if text in EVERY_OTHER_DAY:
        return "*/2"
    match = _EVERY_FEW_DAYS.match(text)
    if match is None:
        return None
    days = 2 if match["other"] else _number(match["n"])
    if days is None:
        return None
    if not 1 <= days <= MAX_EVERY_FEW_DAYS:
        raise ScheduleError(
            f'"{text}": at most every {MAX_EVERY_FEW_DAYS} days (cron counts days within '
            'a month)')
    return "*" if days == 1 else f"*/{days}"
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
        if match and match["month"] in MONTHS:
            day, month = int(match["day"]), MONTHS[match["month"]]
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
    repeated = cue in _REPEATING_CUES
    if text in DAILY or stripped in DAILY or (repeated and stripped in DAY):
        return "*", "*", "*"
    if text in WEEKLY or (repeated and stripped in WEEK):
        return "*", "*", str(WEEKLY_DAY)
    if text in MONTHLY or (repeated and stripped in MONTH):
        return str(MONTHLY_DAY), "*", "*"
    weekly = _WEEKLY_ON.match(text)
    if weekly:
        return _parse_days(weekly["days"], repeating=True)
    every_few = _every_few_days(text)
    if every_few is not None:
        return every_few, "*", "*"
    if stripped in WEEKDAYS:
        return "*", "*", "1-5"
    if stripped in WEEKENDS:
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
    if word in WEEKDAY_NUMBERS:
        return WEEKDAY_NUMBERS[word]
    if _is_plural_weekday(word):  # mondays, sabados
        return WEEKDAY_NUMBERS[word[:-1]]
    return None


def _is_plural_weekday(word: str) -> bool:
    return word.endswith("s") and word[:-1] in WEEKDAY_NUMBERS


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


# -- refusals ------------------------------------------------------------------------------


def _refuse_a_past_day(text: str) -> None:
    """"yesterday at 9", "ayer", "last monday": said as such, not as not understood."""
    for day_part in [text, *(day for day, _ in _split_at_time(text))]:
        if _is_past_day(day_part):
            raise ScheduleError(f'"{day_part}" is in the past: say a time to come ("today at '
                                '9", "tomorrow at 9")')


def _is_past_day(text: str) -> bool:
    if text in PAST_DAY_WORDS:
        return True
    for prefix in PAST_DAY_PREFIXES:
        rest = text.removeprefix(prefix)
        if rest != text and (_weekday(rest) is not None or rest in WEEK_UNITS | {"month", "year"}):
            return True
    for suffix in PAST_DAY_SUFFIXES:
        rest = re.sub(r"^(?:el|la) ", "", text.removesuffix(suffix))
        if text.endswith(suffix) and (_weekday(rest) is not None or rest in WEEK_UNITS | {"mes", "ano"}):
            return True
    return False


_KNOWN_TOKEN = re.compile(
    r"\d{1,2}(?:[:.h]\d{2})?h?(?:am|pm)?|\d{1,2}(?:st|nd|rd|th|o|º)?|\d{4}-\d{2}-\d{2}"
    r"|[\d*/,\-?lw#]+")


def _known_words() -> frozenset[str]:
    phrases = (DAILY | DAY | WEEKDAYS | WEEKENDS | WEEKLY | WEEK | MONTHLY | MONTH
               | EVERY_OTHER_DAY | SKIPPED_WEEKS
               | PAST_DAY_WORDS | set(DAY_WORDS) | set(NAMED_TIMES) | set(PART_HOURS))
    words = {word for phrase in phrases for word in phrase.split()}
    words |= {f"{part}s" for part in PART_HOURS}
    words |= {f"{day}s" for day in WEEKDAY_NUMBERS}
    return frozenset(words | LINKING_WORDS | set(WEEKDAY_NUMBERS) | set(NUMBER_WORDS)
                     | set(MONTHS) | SECOND_UNITS | MINUTE_UNITS | HOUR_UNITS | DAY_UNITS
                     | WEEK_UNITS)


_KNOWN_WORDS = _known_words()


def _not_understood(original: str) -> str:
    """The refusal's first line: the words of `original` no schedule has, as said."""
    said, words = original.split(), normalise(original).split()
    if len(said) != len(words):
        said = words
    unknown: list[list[str]] = []
    for index, word in enumerate(words):
        if word in _KNOWN_WORDS or _KNOWN_TOKEN.fullmatch(word):
            continue
        if unknown and unknown[-1][0] == index - 1:
            unknown[-1] = [index, f"{unknown[-1][1]} {said[index]}"]
        else:
            unknown.append([index, said[index]])
    if not unknown:
        return (f'could not understand "{original}": say the days, then the time '
                '("every monday at 9")')
    if len(unknown) == 1 and unknown[0][1] == " ".join(said):
        return f'could not understand "{original}": it names no day, time or interval'
    parts = ", ".join(f'"{text}"' for _, text in unknown)
    return f'could not understand {parts} in "{original}": not a day, a time or an interval'
