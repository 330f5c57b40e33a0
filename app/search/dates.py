"""Date arithmetic for instructed retrieval (app/search/instruction.py): the word lists and
patterns of time expressions, calendar steps (months, quarters, "n units ago") and `DateReader`,
which reads explicit dates ("March 3", "2026-06-15", "last Monday") and returns the [start, end)
they span at their own granularity: ISO dates and bare years by regex, the rest by dateparser.

dateparser costs about a millisecond of CPU a call, and a 2,000-character query can name
hundreds of dates (`"in 2023-02-30 " * 200`): one reading (a
query or an instruction) asks it about each distinct expression once, and about at most
MAX_PARSED of them; the rest are not read and counted in `skipped`."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
    "few": 3,
    "couple": 2,
}
MON = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
NUM = r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|twelve|few|couple(?: of)?)"
UNIT = r"(hours?|days?|weeks?|months?|quarters?|years?)"
# a date expression dateparser reads: "March", "March 3", "3 March 2026", "3 June, 2023", "December 1,2023",
# "the 3rd of March", "2026-06-15", "last Monday"; a day may be named with its weekday in front
# ("Friday, 23 January 2022", "Monday May 5"): NAMED_DATE
YEAR = r"(?:, ?| )\d{4}"  # ", 2023", ",2023" or " 2023" after a day or month
WEEKDAY = rf"(?:{'|'.join(WEEKDAYS)})"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"  # a day of the month, "3" or "3rd"
_ISO = r"\d{4}-\d{2}-\d{2}"
_DAY_FIRST = rf"(?:the )?{_DAY} (?:of )?{MON}"  # "3 March", "the 3rd of March"
_MONTH_DAY = rf"{MON} {_DAY}"  # "March 3"
NAMED_DATE = rf"{WEEKDAY},? (?:{_DAY_FIRST}(?:{YEAR})?|(?:the )?{_MONTH_DAY}(?:{YEAR})?)"
# a day with its month and year, read wherever it stands ("the receipt of January 23, 2022")
FULL_DATE = rf"(?:{_ISO}|{_DAY_FIRST}{YEAR}|{_MONTH_DAY}{YEAR})"
DATE = (
    rf"((?:{_ISO})|(?:{NAMED_DATE})|(?:{_DAY_FIRST}(?:{YEAR})?)|"
    rf"(?:{MON}(?: {_DAY})?(?:{YEAR})?)|(?:last {WEEKDAY})|\d{{4}})"
)
# A weekday (or "the") in front of an explicit date adds nothing to it (the date names the day) and is
# left out of what dateparser reads; a weekday that disagrees with its date cannot move it.
_WEEKDAY_FIRST = re.compile(rf"^(?:{WEEKDAY},? )?(?:the )?(?=\d|{MON})")


def day_start(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def month_start(y: int, m: int) -> date:
    return date(y + (m - 1) // 12, (m - 1) % 12 + 1, 1)


def add_months(d: date, n: int) -> date:
    m = d.month - 1 + n
    y, m = d.year + m // 12, m % 12 + 1
    last = (month_start(y, m + 1) - timedelta(days=1)).day
    return date(y, m, min(d.day, last))


def number(word: str) -> int:
    word = word.replace(" of", "")
    return int(word) if word.isdigit() else NUMBERS.get(word, 1)


@lru_cache(maxsize=1)
def _date_parser():
    from dateparser.date import DateDataParser

    return DateDataParser(
        languages=["en"],
        settings={"PREFER_DATES_FROM": "past", "PREFER_DAY_OF_MONTH": "first", "RETURN_AS_TIMEZONE_AWARE": False},
    )


def warm_up() -> None:
    """dateparser loads its language data on the first call (~100 ms): do it at start-up."""
    DateReader(datetime.now(UTC))("March 3")


# Distinct expressions one reading hands to dateparser. An instruction or query a person writes
# names one to three dates; the instruction bench's longest names two.
MAX_PARSED = 8
_YEAR_ONLY = re.compile(r"\d{4}")
_ISO_ONLY = re.compile(_ISO)
Span = tuple[date, date]


class DateReader:
    """[start, end) of date expressions at their own granularity ("June" -> the whole month), for
    one reading (one query or one instruction) against its `now`: each distinct expression is read
    once; ISO dates and bare years without dateparser; at most MAX_PARSED expressions by
    dateparser, the ones after that answer None and count in `skipped`."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.parsed = 0
        self.skipped = 0
        self._seen: dict[str, Span | None] = {}

    def __call__(self, expr: str) -> Span | None:
        expr = _WEEKDAY_FIRST.sub("", expr.strip())
        if expr in self._seen:
            return self._seen[expr]
        if _YEAR_ONLY.fullmatch(expr):
            y = int(expr)
            span = date(y, 1, 1), date(y + 1, 1, 1)
        elif _ISO_ONLY.fullmatch(expr):
            try:  # what dateparser answers for these, without its ~1 ms: the day, or nothing ("2023-02-30")
                d = date.fromisoformat(expr)
            except ValueError:
                span = None
            else:
                span = d, d + timedelta(days=1)
        elif self.parsed >= MAX_PARSED:
            self.skipped += 1
            span = None
        else:
            self.parsed += 1
            span = _dateparser_span(expr, self.now)
        self._seen[expr] = span
        return span


def _dateparser_span(expr: str, now: datetime) -> Span | None:
    p = _date_parser()
    p._settings.RELATIVE_BASE = now.replace(tzinfo=None)
    data = p.get_date_data(expr)
    if data is None or data.date_obj is None:
        return None
    d = data.date_obj.date()
    if data.period == "year":
        return date(d.year, 1, 1), date(d.year + 1, 1, 1)
    if data.period == "month":
        start = date(d.year, d.month, 1)
        return start, month_start(d.year, d.month + 1)
    return d, d + timedelta(days=1)


def ago(now: datetime, n: int, unit: str) -> datetime:
    if unit == "hour":
        return now - timedelta(hours=n)
    today = now.date()
    if unit == "day":
        return day_start(today - timedelta(days=n))
    if unit == "week":
        return day_start(today - timedelta(weeks=n))
    if unit in ("month", "quarter"):
        return day_start(add_months(today, -n * (3 if unit == "quarter" else 1)))
    return day_start(add_months(today, -12 * n))
