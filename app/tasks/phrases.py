"""The words of a schedule, per language: what app/tasks/schedule.py's grammar reads.

Each table is said once in English and once in Spanish, then joined; the parser never
asks which language a schedule is in. Words are as `normalise` leaves them: lower case,
without accents ("mañana" → "manana"). A language is added here, its words beside the
others, and its examples join the refusal's.
"""

from __future__ import annotations

import unicodedata
from datetime import date

__all__ = ["normalise", "WEEKDAY_NUMBERS", "NUMBER_WORDS", "SECOND_UNITS", "MINUTE_UNITS",
           "HOUR_UNITS", "DAY_UNITS", "WEEK_UNITS", "DAILY", "DAY", "WEEKDAYS", "WEEKENDS",
           "WEEKLY", "WEEK", "WEEKLY_DAY", "MONTHLY", "MONTH", "MONTHLY_DAY", "EVERY_OTHER_DAY",
           "SKIPPED_WEEKS", "SKIPPED_WEEK_PREFIXES", "MONTHS", "DAY_WORDS", "PAST_DAY_WORDS",
           "PAST_DAY_PREFIXES", "PAST_DAY_SUFFIXES", "DEFAULT_HOUR", "PART_HOURS", "PART_READING",
           "NAMED_TIMES", "LINKING_WORDS", "EXAMPLES_EN", "EXAMPLES_ES", "EXAMPLE_CRON",
           "examples_text"]


def normalise(text: str) -> str:
    """Lower case, no accents ("mañana" → "manana"), single spaces, no final full stop."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    plain = plain.replace("a.m.", "am").replace("p.m.", "pm")
    return " ".join(plain.split()).rstrip(".!")


def _joined(*tables: dict) -> dict:
    return {key: value for table in tables for key, value in table.items()}


# -- days of the week (cron's numbers: Sunday is 0) -----------------------------------------

_WEEKDAYS_EN = {
    "sunday": 0, "sun": 0, "monday": 1, "mon": 1, "tuesday": 2, "tue": 2, "tues": 2,
    "wednesday": 3, "wed": 3, "thursday": 4, "thu": 4, "thur": 4, "thurs": 4,
    "friday": 5, "fri": 5, "saturday": 6, "sat": 6,
}
_WEEKDAYS_ES = {
    "domingo": 0, "dom": 0, "lunes": 1, "lun": 1, "martes": 2, "mar": 2,
    "miercoles": 3, "mie": 3, "jueves": 4, "jue": 4, "viernes": 5, "vie": 5,
    "sabado": 6, "sab": 6,
}
WEEKDAY_NUMBERS = _joined(_WEEKDAYS_EN, _WEEKDAYS_ES)

# -- numbers said in words -----------------------------------------------------------------

_NUMBERS_EN = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "fifteen": 15, "twenty": 20, "thirty": 30,
}
_NUMBERS_ES = {
    "un": 1, "uno": 1, "una": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6,
    "siete": 7, "ocho": 8, "nueve": 9, "diez": 10, "once": 11, "doce": 12, "quince": 15,
    "veinte": 20, "treinta": 30,
}
NUMBER_WORDS = _joined(_NUMBERS_EN, _NUMBERS_ES)

# -- units of time -------------------------------------------------------------------------

SECOND_UNITS = {"s", "sec", "secs", "second", "seconds"} | {"segundo", "segundos"}
MINUTE_UNITS = {"m", "min", "mins", "minute", "minutes"} | {"minuto", "minutos"}
HOUR_UNITS = {"h", "hr", "hrs", "hour", "hours"} | {"hora", "horas"}
DAY_UNITS = {"d", "day", "days"} | {"dia", "dias"}
WEEK_UNITS = {"w", "week", "weeks"} | {"semana", "semanas"}

# -- which days ----------------------------------------------------------------------------

# Said alone ("daily"), or after a word that repeats it ("every day", "cada día"); a
# bare "day" is no schedule ("plan my day").
DAILY = {"daily", "everyday"} | {"diariamente", "a diario"}
DAY = {"day", "days", "day of the week"} | {"dia", "dias", "dias de la semana"}
WEEKDAYS = ({"weekday", "weekdays", "working day", "working days", "business day",
             "business days", "workday", "workdays"}
            | {"dia laborable", "dias laborables", "laborable", "laborables", "dia habil",
               "dias habiles", "dia entre semana", "entre semana"})
WEEKENDS = ({"weekend", "weekends", "weekend day", "weekend days"}
            | {"fin de semana", "fines de semana"})
# Once a week, said without the day: Monday, the week's first (the echo says so).
WEEKLY = ({"weekly", "once a week"}
          | {"semanalmente", "una vez por semana", "una vez a la semana"})
WEEK = {"week", "weeks"} | {"semana", "semanas"}
WEEKLY_DAY = 1
# Once a month, said without the day: the 1st.
MONTHLY = {"monthly", "once a month"} | {"mensualmente", "una vez al mes"}
MONTH = {"month", "months"} | {"mes", "meses"}
MONTHLY_DAY = 1
# Every other day in Spanish idiom ("every other day" reads through NUMBER_WORDS).
EVERY_OTHER_DAY = {"dia por medio", "un dia si y otro no", "dia si dia no"}
# Weeks skipped: cron has no way to say them.
SKIPPED_WEEKS = ({"fortnightly", "biweekly", "every other week", "every two weeks",
                  "every 2 weeks"}
                 | {"cada dos semanas", "cada 2 semanas", "semana por medio",
                    "quincenalmente"})
SKIPPED_WEEK_PREFIXES = ("every other ", "every second ", "cada dos ", "cada 2 ")

_MONTHS_EN = (("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
              ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
              ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
              ("december", "dec"))
_MONTHS_ES = (("enero", "ene"), ("febrero",), ("marzo",), ("abril", "abr"), ("mayo",),
              ("junio",), ("julio",), ("agosto", "ago"), ("septiembre", "setiembre"),
              ("octubre",), ("noviembre",), ("diciembre", "dic"))
MONTHS = {name: number for months in (_MONTHS_EN, _MONTHS_ES)
          for number, names in enumerate(months, start=1) for name in names}

# -- one day -------------------------------------------------------------------------------

# Days from today.
DAY_WORDS = _joined(
    {"today": 0, "tonight": 0, "tomorrow": 1, "day after tomorrow": 2,
     "the day after tomorrow": 2},
    {"hoy": 0, "esta noche": 0, "esta tarde": 0, "manana": 1, "pasado manana": 2},
)
# Days gone: a task runs at a time to come.
PAST_DAY_WORDS = ({"yesterday", "the day before yesterday", "last night", "last week"}
                  | {"ayer", "anteayer", "antes de ayer", "anoche", "la semana pasada"})
PAST_DAY_PREFIXES = ("last ", "el pasado ")
PAST_DAY_SUFFIXES = (" pasado", " pasada")

# -- times of day --------------------------------------------------------------------------

# A day named without a time ("daily", "tomorrow", "next tuesday") runs at this hour.
DEFAULT_HOUR = 9
# The time a part of the day stands for, said alone ("every morning")...
PART_HOURS = _joined({"morning": 9, "afternoon": 15, "evening": 18, "night": 21},
                     {"manana": 9, "tarde": 16, "noche": 21})
# ...and how it reads an hour said with it ("every evening at 7" is 19:00), in the
# words the parser's clock times understand ("7 de la tarde").
PART_READING = _joined(
    {"morning": "manana", "afternoon": "tarde", "evening": "tarde", "night": "noche"},
    {"manana": "manana", "tarde": "tarde", "noche": "noche"})
NAMED_TIMES = _joined(
    {"noon": (12, 0), "midday": (12, 0), "12 noon": (12, 0), "midnight": (0, 0)},
    {"mediodia": (12, 0), "el mediodia": (12, 0), "medianoche": (0, 0),
     "la medianoche": (0, 0)})

# Words that only join the others ("every", "at", "de la"): a schedule made of these and
# the tables above, whatever their order, is one the grammar might read; a word outside
# them is what it did not understand.
LINKING_WORDS = (
    {"every", "each", "on", "at", "in", "the", "of", "and", "to", "through", "thru", "from",
     "next", "this", "that", "then", "after", "before", "once", "twice", "half", "quarter",
     "am", "pm", "o'clock", "oclock", "year", "years", "hourly", "month", "months",
     "monthly", "last", "first", "st", "nd", "rd", "th", "@", "other"}
    | {"cada", "todos", "todas", "los", "las", "el", "la", "al", "a", "de", "del", "en",
       "y", "e", "hasta", "entre", "por", "dentro", "proximo", "que", "viene", "este",
       "esta", "media", "cuarto", "menos", "punto", "ano", "anos", "primero", "ultimo",
       "madrugada", "semana", "fin", "fines", "medio", "si", "no", "otro"}
)

# -- examples ------------------------------------------------------------------------------

# Every example parses (a test says so), whenever it is read; each line stays short.
EXAMPLES_EN = ("every day at 9", "every weekday at 18:30", "weekly", "in 10 minutes")
EXAMPLES_ES = ("cada día a las 9", "cada lunes a las 8", "cada semana", "en 10 minutos")
EXAMPLE_CRON = "30 18 * * 1-5"


def examples_text() -> str:
    """The lines a refusal ends with: examples that work, one short line each."""
    # An ISO example in the future: a fixed date would turn into a refused one-shot.
    iso = f"{date.today().year + 1}-12-01 09:00"
    return "\n".join((
        "Write it like: " + " · ".join(EXAMPLES_EN),
        "En español: " + " · ".join(EXAMPLES_ES),
        f"Or cron (minute hour day month weekday): {EXAMPLE_CRON}, or {iso}",
    ))
