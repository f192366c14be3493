"""What Hilo indexes about an event besides its text — who said it and when, in the
words people ask with — and how a question's words map onto those labels.

Index side: the view `event_labels` (migrations/0009_event_labels.sql) gives every
event one line of labels: its role, then its date as year, month (English and
Spanish), day of the month, weekday (both; "weekend" on Saturdays and Sundays), season
(both) and part of the day (both). The FTS5 table `event_labels_fts` indexes that
line, kept in sync with `events` by triggers; the stored text is never touched. The
words come from the migration's `calendar_words` table, which holds CALENDAR_WORDS
below (a test keeps the two equal). Times are UTC, as stored, and seasons are those of
the northern hemisphere: a user far from UTC sees parts of the day shifted.

Query side: `read_question` finds the times a question names — "in May", "on 13
October 2023", "last summer", "el martes por la tarde", "yesterday" — and whether it
names the user (by the name in their profile), and turns them into a LabelQuery (in a
ReadQuestion, with where in the question they were named): the
label words an event must carry, which retrieval checks against its candidates and
searches `event_labels_fts` with. Relative times ("yesterday", "last summer") are
resolved against the time the question is asked, and only when it names no date.
Numeric dates are day first unless the user's locale writes the month first
(`month_first`). Read with the patterns below, not a date library: dateparser takes
0.9 s to import and 7 ms a question, and dateutil finds one date a text, with no span
and no Spanish (BENCHMARKS.md, issue 28).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache

from app.fts import quote_term

__all__ = ["MONTHS", "WEEKDAYS", "SEASONS", "PARTS_OF_DAY", "CALENDAR_WORDS", "event_labels",
           "stored_labels", "LabelQuery", "MONTH_FIRST_REGIONS", "month_first", "ReadQuestion", "read_question"]

# English first: the query side writes the English word, the index carries both.
MONTHS: tuple[tuple[str, ...], ...] = (
    ("january", "enero"), ("february", "febrero"), ("march", "marzo"), ("april", "abril"),
    ("may", "mayo"), ("june", "junio"), ("july", "julio"), ("august", "agosto"),
    ("september", "septiembre", "setiembre"), ("october", "octubre"),
    ("november", "noviembre"), ("december", "diciembre"))
# In strftime('%w') order: 0 is Sunday.
WEEKDAYS: tuple[tuple[str, ...], ...] = (
    ("sunday", "domingo", "weekend"), ("monday", "lunes"), ("tuesday", "martes"),
    ("wednesday", "miércoles"), ("thursday", "jueves"), ("friday", "viernes"),
    ("saturday", "sábado", "weekend"))
_WINTER, _SPRING = ("winter", "invierno"), ("spring", "primavera")
_SUMMER, _AUTUMN = ("summer", "verano"), ("autumn", "fall", "otoño")
# By month, northern hemisphere (meteorological seasons: whole months).
SEASONS: tuple[tuple[str, ...], ...] = (
    _WINTER, _WINTER, _SPRING, _SPRING, _SPRING, _SUMMER, _SUMMER, _SUMMER,
    _AUTUMN, _AUTUMN, _AUTUMN, _WINTER)
_NIGHT, _MORNING = ("night", "noche"), ("morning", "mañana")
_AFTERNOON, _EVENING = ("afternoon", "tarde"), ("evening", "tarde")
_LATE_EVENING = ("evening", "night", "noche")
# By hour (UTC): 0-4 night, 5-11 morning, 12-17 afternoon, 18-20 evening, 21-23 both.
PARTS_OF_DAY: tuple[tuple[str, ...], ...] = (
    (_NIGHT,) * 5 + (_MORNING,) * 7 + (_AFTERNOON,) * 6 + (_EVENING,) * 3
    + (_LATE_EVENING,) * 3)

# kind -> [(number, words)]: the rows of the migration's calendar_words table.
CALENDAR_WORDS: dict[str, list[tuple[int, str]]] = {
    "month": [(n, " ".join(words)) for n, words in enumerate(MONTHS, start=1)],
    "weekday": [(n, " ".join(words)) for n, words in enumerate(WEEKDAYS)],
    "season": [(n, " ".join(words)) for n, words in enumerate(SEASONS, start=1)],
    "hour": [(n, " ".join(words)) for n, words in enumerate(PARTS_OF_DAY)],
}


def event_labels(role: str, created_at: datetime) -> list[str]:
    """The label words the index holds for an event (as the view computes them)."""
    weekday = (created_at.weekday() + 1) % 7
    return [role, str(created_at.year), *MONTHS[created_at.month - 1], str(created_at.day),
            *WEEKDAYS[weekday], *SEASONS[created_at.month - 1],
            *PARTS_OF_DAY[created_at.hour]]


# created_at as Hilo writes it (app/timeutil.py): UTC, to the second or finer. Only these
# are labelled here; the view reads any other text as SQLite does (an offset, a day that
# does not exist).
_STORED_TIME = re.compile(r"[1-9]\d{3}-\d\d-\d\dT(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?Z")


def stored_labels(role: str, created_at: str) -> frozenset[str] | None:
    """The label words the view gives an event stored with this role and `created_at`
    (the column's text), or None when that text is not in the form Hilo writes: then
    read the view. Reading them here costs a turn a tenth of what the view does."""
    if _STORED_TIME.fullmatch(created_at) is None:
        return None
    return _hour_labels(role, created_at[:13])


@lru_cache(maxsize=4096)
def _hour_labels(role: str, hour: str) -> frozenset[str] | None:
    """The labels of a role at an hour ("2023-05-08T13"): they hold nothing finer."""
    try:
        when = datetime.strptime(hour, "%Y-%m-%dT%H")
    except ValueError:  # no such day (30 February): SQLite moves it on, the view says where
        return None
    return frozenset(event_labels(role, when))


@dataclass(frozen=True)
class LabelQuery:
    """What a question says about when and by whom: an event matches when it carries
    every word of at least one of `times` (any event, if there are none) and the role."""

    times: tuple[frozenset[str], ...] = ()
    role: str | None = None

    def holds(self, labels: set[str]) -> bool:
        if self.role is not None and self.role not in labels:
            return False
        return not self.times or any(words <= labels for words in self.times)

    def match(self) -> str:
        """The FTS5 expression for event_labels_fts (every label word quoted)."""
        parts = []
        if self.times:
            parts.append(" OR ".join(
                "(" + " AND ".join(quote_term(w) for w in sorted(words)) + ")"
                for words in self.times))
        if self.role is not None:
            parts.append(quote_term(self.role))
        return " AND ".join(f"({part})" for part in parts)


# -- reading times in a question ---------------------------------------------------------

_MONTH_NUMBER = {word: n for n, words in enumerate(MONTHS, start=1) for word in words}
_MONTH_NUMBER.update({word[:3]: n for n, words in enumerate(MONTHS, start=1)
                      for word in words[:1] if word != "may"})
_MONTH_NUMBER["sept"] = 9
_WEEKDAY_LABEL = {word: words[0] for words in WEEKDAYS for word in words[:2]}
_WEEKDAY_LABEL.update({"sabado": "saturday", "miercoles": "wednesday"})
_SEASON_MONTHS = {"winter": (12, 1, 2), "spring": (3, 4, 5), "summer": (6, 7, 8),
                  "autumn": (9, 10, 11)}
_SEASON_LABEL = {"winter": "winter", "invierno": "winter", "spring": "spring",
                 "primavera": "spring", "summer": "summer", "verano": "summer",
                 "autumn": "autumn", "fall": "autumn", "otono": "autumn"}
_PART_LABEL = {"morning": "morning", "afternoon": "afternoon", "evening": "evening",
               "night": "night", "tonight": "night"}
_SPANISH_PART = {"manana": "morning", "tarde": "afternoon", "noche": "night"}

_MONTH = (r"(?P<{0}>january|february|march|april|may|june|july|august|september|october"
          r"|november|december|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre"
          r"|setiembre|octubre|noviembre|diciembre|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct"
          r"|nov|dec)\.?")
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th|º)?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"
_FULL_DATES = [
    # 13 October 2023, 13th of October, 1 February, 2023; 13 de octubre de 2023
    re.compile(r"\b" + _DAY.format("day") + r"\s+(?:of\s+|de\s+)?" + _MONTH.format("month")
               + r"(?:,?\s+(?:de\s+|del\s+)?" + _YEAR.format("year") + r")?\b"),
    # October 13, 2023; October 13th
    re.compile(r"\b" + _MONTH.format("month") + r"\s+" + _DAY.format("day")
               + r"(?:,?\s+" + _YEAR.format("year") + r")?\b(?!:)"),
    # 2023-10-13, 2023/10/13, 2023.10.13: the year first is always year, month, day
    re.compile(r"(?<![\d./-])" + _YEAR.format("year") + r"(?P<sep>[-/.])(?P<month>[01]?\d)"
               r"(?P=sep)(?P<day>[0-3]?\d)(?![\d/-]|\.\d)"),
]
# 21.01.2024, 21/01/24, 21-1-2024: day first, or month first in a month-first locale
# (read_question's `month_first`); one that is only a date the other way round is read
# that way (13/04 is the 13th of April anywhere). Written dates, not arithmetic: the
# same separator twice, and a number may not run on.
_NUMERIC_DATE = re.compile(r"(?<![\d./-])(?P<first>[0-3]?\d)(?P<sep>[-/.])(?P<second>[0-3]?\d)"
                           r"(?P=sep)(?P<year>(?:19|20)?\d\d)(?![\d/-]|\.\d)")
# 21/01 without a year, only after a word that introduces a date: "1/2" alone is a half.
_NUMERIC_DAY = re.compile(r"\b(?:on|since|until|by|before|after|el|del|desde|hasta|antes"
                          r"\s+del?)\s+(?P<first>[0-3]?\d)/(?P<second>[0-3]?\d)(?![\d/])")
_MONTH_YEAR = re.compile(r"\b" + _MONTH.format("month") + r",?\s+(?:de\s+|del\s+)?"
                         + _YEAR.format("year") + r"\b")
# A month name on its own: "may" and "march" are words too, so they count only in a
# phrase about time ("in May", "since March", "last may").
_MONTH_ALONE = re.compile(r"\b(?:(?P<lead>in|of|since|until|till|during|by|early|late|mid"
                          r"|last|this|next|en|de|desde|hasta|durante)\s+)?"
                          + _MONTH.format("month") + r"\b")
_AMBIGUOUS_MONTHS = {"may", "march", "mar", "jan", "dec", "sep", "oct", "nov", "aug", "jun",
                     "jul", "feb", "apr", "sept"}
_YEAR_ALONE = re.compile(r"(?<![\d-])" + _YEAR.format("year") + r"(?![\d-])")
_SEASON = re.compile(r"\b(?:(?P<lead>in|the|this|last|next|el|este|en|pasado)\s+)?"
                     r"(?P<season>winter|spring|summer|autumn|fall|invierno|primavera"
                     r"|verano|otono)\b(?:\s+(?P<after>pasado|of|de|del)\b)?")
_WEEKDAY_WORDS = ("monday|tuesday|wednesday|thursday|friday|saturday|sunday|lunes|martes"
                  "|miercoles|jueves|viernes|sabado|domingo")
_WEEKDAY = re.compile(r"\b(?P<weekday>" + _WEEKDAY_WORDS + r")s?\b")
_WEEKEND = re.compile(r"\b(?:weekend|fin de semana|finde)\b")
_PART = re.compile(r"\b(?P<part>morning|afternoon|evening|night|tonight)s?\b")
_SPANISH_PART_RE = re.compile(r"\b(?:por|a|en|esta|de)\s+la\s+(?P<part>manana|tarde|noche)\b"
                              r"|\besta\s+(?P<this>manana|tarde|noche)\b")

_RELATIVE = re.compile(
    r"\b(?:last|(?:el|the)\s+(?:previous|past))\s+(?P<last_weekday>" + _WEEKDAY_WORDS
    + r")\b|\bel\s+(?P<pasado_weekday>" + _WEEKDAY_WORDS + r")\s+pasado\b"
    r"|\b(?P<what>the day before yesterday|yesterday|ayer|anteayer|today|hoy|last night|anoche"
    r"|this week|esta semana|this month|este mes|this year|este ano"
    r"|this morning|esta manana"
    r"|last week|la semana pasada|last weekend|el fin de semana pasado"
    r"|last month|el mes pasado|last year|el ano pasado"
    r"|last (?:winter|spring|summer|autumn|fall)"
    r"|(?:el |la )?(?:invierno|primavera|verano|otono) pasad[oa])\b"
    r"|\b(?P<count>\d+|a|an|one|two|three|four|five|six|un|una|dos|tres|cuatro|cinco|seis)"
    r"\s+(?P<unit>days?|weeks?|months?|years?)\s+ago\b"
    r"|\bhace\s+(?P<hcount>\d+|un|una|dos|tres|cuatro|cinco|seis)\s+"
    r"(?P<hunit>d[ií]as?|semanas?|mes|meses|anos?)\b")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "un": 1, "una": 1, "two": 2, "dos": 2, "three": 3,
            "tres": 3, "four": 4, "cuatro": 4, "five": 5, "cinco": 5, "six": 6, "seis": 6}


# Regions that write the month first (CLDR: the United States and a few that follow it).
MONTH_FIRST_REGIONS = frozenset({"us", "ph", "fm", "mh", "pw", "um", "as", "gu", "mp", "pr",
                                 "vi"})


def month_first(locale: str | None) -> bool:
    """Whether a locale ("en-US", "en_US.UTF-8", "US") writes numeric dates month first;
    none given: day first, as most of the world does."""
    if not locale:
        return False
    tag = re.split(r"[.@]", locale.strip())[0]
    region = re.split(r"[-_]", tag)[-1].casefold()
    return region in MONTH_FIRST_REGIONS


def _fold(text: str) -> str:
    """Lower case without accents (the index folds them the same way)."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return unicodedata.normalize("NFC", "".join(c for c in decomposed
                                                if unicodedata.category(c) != "Mn"))


def _day_labels(day: date) -> frozenset[str]:
    return frozenset({str(day.year), MONTHS[day.month - 1][0], str(day.day)})


def _month_labels(year: int, month: int) -> frozenset[str]:
    return frozenset({str(year), MONTHS[month - 1][0]})


def _days(first: date, count: int) -> list[frozenset[str]]:
    return [_day_labels(first + timedelta(days=i)) for i in range(count)]


def _last_season(season: str, today: date) -> list[frozenset[str]]:
    """The months of the latest such season that has begun before today's month."""
    months = _SEASON_MONTHS[season]
    year, month = today.year, today.month
    for _ in range(24):
        month -= 1
        if month == 0:
            year, month = year - 1, 12
        if month == months[-1]:
            break
    found = []
    for m in reversed(months):  # walk back from the season's last month
        found.append(_month_labels(year, m))
        if m == 1:
            year -= 1
    return found


def _shift_month(year: int, month: int, back: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) - back
    return index // 12, index % 12 + 1


def _relative(match: re.Match, today: date) -> list[frozenset[str]]:
    weekday = match.group("last_weekday") or match.group("pasado_weekday")
    if weekday is not None:  # "last Tuesday": the latest Tuesday before today
        number = [w[0] for w in WEEKDAYS].index(_WEEKDAY_LABEL[weekday])  # 0 is Sunday
        back = (today.weekday() + 1 - number) % 7 or 7
        return [_day_labels(today - timedelta(days=back))]
    what = match.group("what")
    if what is not None:
        what = " ".join(what.split())
        if what in ("yesterday", "ayer", "last night", "anoche"):
            return [_day_labels(today - timedelta(days=1))]
        if what in ("anteayer", "the day before yesterday"):
            return [_day_labels(today - timedelta(days=2))]
        if what in ("today", "hoy", "this morning", "esta manana"):
            return [_day_labels(today)]
        if what in ("last week", "la semana pasada"):
            return _days(today - timedelta(days=today.weekday() + 7), 7)
        if what in ("this week", "esta semana"):  # from Monday to today
            return _days(today - timedelta(days=today.weekday()), today.weekday() + 1)
        if what in ("this month", "este mes"):
            return [_month_labels(today.year, today.month)]
        if what in ("this year", "este ano"):
            return [frozenset({str(today.year)})]
        if what in ("last weekend", "el fin de semana pasado"):
            saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
            return _days(saturday, 2)
        if what in ("last month", "el mes pasado"):
            return [_month_labels(*_shift_month(today.year, today.month, 1))]
        if what in ("last year", "el ano pasado"):
            return [frozenset({str(today.year - 1)})]
        season = what.split()[1] if what.startswith("last ") else what.split()[-2]
        return _last_season(_SEASON_LABEL[season], today)
    count = match.group("count") or match.group("hcount")
    unit = (match.group("unit") or match.group("hunit"))[:1]
    n = int(count) if count.isdigit() else _NUMBERS[count]
    if unit == "d":
        return [_day_labels(today - timedelta(days=n))]
    if unit in ("w", "s"):  # weeks, semanas: the seven days around that day
        return _days(today - timedelta(days=7 * n + 3), 7)
    if unit == "m":
        return [_month_labels(*_shift_month(today.year, today.month, n))]
    return [frozenset({str(today.year - n)})]


def _names_a_day(words: frozenset[str]) -> bool:
    return any(w.isdigit() and len(w) <= 2 for w in words)


def _name_pattern(names: list[str]) -> re.Pattern | None:
    words = sorted({_fold(w) for name in names for w in re.findall(r"\w{2,}", name)},
                   key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")(?:'s)?\b")


@dataclass(frozen=True)
class ReadQuestion:
    """A question's labels and the stretches of its text they were read from, as
    (start, end) offsets: where it names a time, and where it names the user."""

    labels: LabelQuery | None
    time_spans: tuple[tuple[int, int], ...] = ()
    name_spans: tuple[tuple[int, int], ...] = ()


def _numeric_day(match: re.Match, month_first: bool, today: date) -> frozenset[str] | None:
    """The labels of the day a numeric date names, read in the locale's order, or the
    other order when only that one is a date; None when neither is."""
    first, second = int(match.group("first")), int(match.group("second"))
    year_text = match.groupdict().get("year")
    year = int(year_text) if year_text else 2000  # a leap year: 29/02 is a day
    if year_text and len(year_text) == 2:  # "21.01.24": this century unless that is ahead
        year += 2000 if 2000 + year <= today.year + 1 else 1900
    orders = [(second, first), (first, second)]  # (month, day), the locale's first
    for month, day in orders[::-1] if month_first else orders:
        try:
            labels = _day_labels(date(year, month, day))
        except ValueError:
            continue
        return labels if year_text else labels - {str(year)}
    return None


class _Reading:
    """A question's folded text and the stretches of it already read, so no two
    patterns read the same words."""

    def __init__(self, folded: str):
        self.folded = folded
        self.spans: list[tuple[int, int]] = []
        self._taken = [False] * len(folded)

    def take(self, match: re.Match) -> bool:
        start, end = match.span()
        if any(self._taken[start:end]):
            return False
        self._taken[start:end] = [True] * (end - start)
        self.spans.append((start, end))
        return True

    def all(self, pattern: re.Pattern) -> list[re.Match]:
        return [m for m in pattern.finditer(self.folded) if self.take(m)]


def _full_dates(reading: _Reading) -> list[frozenset[str]]:
    """"March 3rd, 2023", "3 de marzo": the days named with a month and a day."""
    times = []
    for pattern in _FULL_DATES:
        for m in pattern.finditer(reading.folded):
            month_word = m.group("month")
            month = int(month_word) if month_word.isdigit() else _MONTH_NUMBER[month_word]
            day = int(m.group("day"))
            if not 1 <= month <= 12 or not 1 <= day <= 31 or not reading.take(m):
                continue
            words = {MONTHS[month - 1][0], str(day)}
            if m.group("year"):
                words.add(m.group("year"))
            times.append(frozenset(words))
    return times


def _numeric_dates(reading: _Reading, today: date, month_first: bool) -> list[frozenset[str]]:
    times = []
    for pattern in (_NUMERIC_DATE, _NUMERIC_DAY):
        for m in pattern.finditer(reading.folded):
            labels = _numeric_day(m, month_first, today)
            if labels is not None and reading.take(m):
                times.append(labels)
    return times


def _months_alone(reading: _Reading, text: str) -> list[int]:
    """Months named without a day; "may" and "march" only when they read as a month."""
    months = []
    for m in _MONTH_ALONE.finditer(reading.folded):
        word = m.group("month")
        if word in _AMBIGUOUS_MONTHS and not m.group("lead") and not (
                text[m.start("month")].isupper() and m.start("month") > 0):
            continue
        if reading.take(m):
            months.append(_MONTH_NUMBER[word])
    return months


def _seasons(reading: _Reading) -> list[str]:
    seasons = []
    for m in _SEASON.finditer(reading.folded):
        word = m.group("season")
        # "fall" and "spring" are other words too: only "the fall", "this spring",
        # "fall of 2022" count.
        if word in ("fall", "spring") and not (m.group("lead") or m.group("after")):
            continue
        if reading.take(m):
            seasons.append(_SEASON_LABEL[word])
    return seasons


def _with_each(alternatives: list[frozenset[str]], extra: list[str],
               keep: Callable[[frozenset[str]], bool]) -> list[frozenset[str]]:
    """Each alternative once per extra word, the word added unless `keep` says not."""
    if not extra:
        return alternatives
    return [a if keep(a) else a | {w} for a in alternatives or [frozenset()] for w in extra]


def _has_year(words: frozenset[str]) -> bool:
    return any(w.isdigit() and len(w) == 4 for w in words)


def _time_alternatives(reading: _Reading, text: str, today: date,
                       month_first: bool) -> list[frozenset[str]]:
    """The times a question names, as alternative sets of labels (a match needs all of one)."""
    times = _full_dates(reading) + _numeric_dates(reading, today, month_first)
    times += [_month_labels(int(m.group("year")), _MONTH_NUMBER[m.group("month")])
              for m in reading.all(_MONTH_YEAR)]
    months = _months_alone(reading, text)
    years = [int(m.group("year")) for m in reading.all(_YEAR_ALONE)]
    relative = ([labels for m in reading.all(_RELATIVE) for labels in _relative(m, today)]
                if not times and not months else [])
    seasons = _seasons(reading)
    weekdays = [_WEEKDAY_LABEL[m.group("weekday")] for m in reading.all(_WEEKDAY)]
    weekdays += ["weekend" for _ in reading.all(_WEEKEND)]
    parts = [_PART_LABEL[m.group("part")] for m in reading.all(_PART)]
    parts += [_SPANISH_PART[m.group("part") or m.group("this")]
              for m in reading.all(_SPANISH_PART_RE)]

    alternatives = times + relative + [frozenset({MONTHS[n - 1][0]}) for n in months]
    if not alternatives and seasons:
        alternatives = [frozenset({s}) for s in seasons]
    alternatives = _with_each(alternatives, [str(y) for y in years], _has_year)
    # A day already named fixes its weekday ("the weekend before April 10" is not April 10).
    alternatives = _with_each(alternatives, weekdays, _names_a_day)
    return _with_each(alternatives, parts, _names_a_day)


def read_question(text: str, now: datetime, user_names: list[str] = (), *,
                  month_first: bool = False) -> ReadQuestion:
    """The times and the user a question names, as a LabelQuery (None if neither).
    `month_first`: numeric dates are written month first (a US locale: see month_first)."""
    folded = _fold(text)
    if len(folded) != len(text):  # folding changed offsets: spans would be wrong
        folded = text.lower()
    reading = _Reading(folded)
    alternatives = _time_alternatives(reading, text, now.date(), month_first)
    time_spans = tuple(sorted(reading.spans))
    reading.spans.clear()
    pattern = _name_pattern(list(user_names))
    if pattern is not None:
        reading.all(pattern)
    role = "user" if reading.spans else None
    unique = tuple(dict.fromkeys(a for a in alternatives if a))
    if not unique and role is None:
        return ReadQuestion(None)
    return ReadQuestion(LabelQuery(unique, role), time_spans, tuple(sorted(reading.spans)))
