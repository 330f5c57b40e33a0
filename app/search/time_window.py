"""The time an instruction or a plain search query names: "last quarter", "since March 3",
"between August 11 and August 15 2023", "in June" (a month without a year). `read_times` applies
ordered patterns to a `Reading`, each consuming the span it read, with `DateReader` (app.search.dates)
for explicit dates; the instruction reader (app.search.instruction) runs it among its other rules
on the same `Reading`, and `query_window` runs it alone on a query, where search uses the window as
a ranking signal, never as a filter (app.search.service)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

from app.search.dates import DATE as _DATE
from app.search.dates import FULL_DATE as _FULL_DATE
from app.search.dates import MON as _MON
from app.search.dates import NAMED_DATE as _NAMED_DATE
from app.search.dates import NUM as _NUM
from app.search.dates import UNIT as _UNIT
from app.search.dates import WEEKDAY as _WEEKDAY
from app.search.dates import DateReader
from app.search.dates import add_months as _add_months
from app.search.dates import ago as _ago
from app.search.dates import day_start as _day
from app.search.dates import month_start as _month_start
from app.search.dates import number as _num

_YEAR = re.compile(r"\d{4}")


@dataclass
class Reading:
    """An instruction or query being read: its text, with each span a rule read blanked out, and
    the filter fields read so far (`f`) with what was refused (`ignored`)."""

    text: str  # lower-cased instruction or query; consumed spans are blanked out
    now: datetime
    f: dict = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    yearless: bool = False  # the last date read named a month or day but no year ("in June")
    dates: DateReader | None = None  # reads explicit dates, a bounded number per reading (set by read_times)

    def take(self, m: re.Match) -> None:
        s, e = m.span()
        self.text = self.text[:s] + " " * (e - s) + self.text[e:]

    def each(self, pattern: str, fn) -> None:
        """`fn` on every match of `pattern`; the match is consumed unless `fn` returns False."""
        for m in list(re.finditer(pattern, self.text)):
            try:
                used = fn(m) is not False
            except (ValueError, OverflowError):  # "in the past 99999999999 days", "q4 9999"
                self.ignored.append(f"{m.group(0).strip()!r}: a date out of range")
                used = True
            if used:
                self.take(m)

    def add(self, name: str, *values: str) -> None:
        cur = self.f.setdefault(name, [])
        cur.extend(v for v in values if v not in cur)


def _window(st: Reading, since: date | datetime | None, until: date | datetime | None) -> None:
    for name, v in (("since", since), ("until", until)):
        if v is not None:
            st.f[name] = v if isinstance(v, datetime) else _day(v)


def read_times(st: Reading) -> None:
    """since/until into `st.f` (and `st.yearless`) from the time expressions in `st.text`, each consumed."""
    now, today = st.now, st.now.date()
    parse_date = st.dates = DateReader(now)
    q_start = _month_start(today.year, (today.month - 1) // 3 * 3 + 1)

    sub = st.each

    def between(m: re.Match) -> bool:
        first, year = m.group(2), _YEAR.search(m.group(3))  # "August 11 and August 15 2023": one year
        first = f"{first} {year.group(0)}" if year and not _YEAR.search(first) else first
        a, b = parse_date(first), parse_date(m.group(3))
        if not a or not b:
            return False
        _window(st, a[0], b[1])
        return True

    sub(rf"\b(between|from) {_DATE} (?:and|to|until|through|till) {_DATE}\b", between)

    def half(m: re.Match) -> None:
        y = int(m.group(2)) if m.group(2) else today.year
        first = m.group(1) == "first"
        _window(st, date(y, 1 if first else 7, 1), date(y, 7, 1) if first else date(y + 1, 1, 1))

    sub(r"\b(?:in )?(?:the )?(first|second) half(?: of (\d{4}))?\b", half)

    def quarter(m: re.Match) -> None:
        q, y = int(m.group(1)), int(m.group(2)) if m.group(2) else today.year
        _window(st, date(y, 3 * q - 2, 1), _month_start(y, 3 * q + 1))

    sub(r"\bq([1-4])(?: of)? (\d{4})\b", quarter)
    sub(r"\b(?:in |during |from )?q([1-4])()\b(?! (?:board|meeting|results|report|plan|review|okr))", quarter)

    def period(m: re.Match) -> None:
        which, unit = m.group(1), m.group(2)
        last = which in ("last", "previous", "past", "prior")
        if unit == "week":
            start = today - timedelta(days=today.weekday())
            _window(st, start - timedelta(days=7) if last else start, start if last else None)
        elif unit == "month":
            start = date(today.year, today.month, 1)
            _window(st, _add_months(start, -1) if last else start, start if last else None)
        elif unit == "quarter":
            _window(st, _add_months(q_start, -3) if last else q_start, q_start if last else None)
        else:
            start = date(today.year, 1, 1)
            _window(st, date(today.year - 1, 1, 1) if last else start, start if last else None)

    sub(r"\b(?:from |during |in |over )?(?:the )?(last|previous|prior|this|current) (week|month|quarter|year)(?:'s)?\b", period)
    sub(r"\b(?:year to date|ytd)\b", lambda m: _window(st, date(today.year, 1, 1), None))

    def past_n(m: re.Match) -> None:
        n, unit = _num(m.group(1)), m.group(2).rstrip("s")
        _window(st, _ago(now, n, unit), None)

    sub(rf"\b(?:in |within |over |from |during )?(?:the )?(?:past|last|previous) {_NUM} {_UNIT}\b", past_n)

    def older(m: re.Match) -> None:
        _window(st, None, _ago(now, _num(m.group(1)), m.group(2).rstrip("s")))

    sub(rf"\bolder than {_NUM} {_UNIT}\b", older)
    sub(r"\b(?:over )?the past (week|month|year)\b", lambda m: _window(st, _ago(now, 1, m.group(1)), None))
    sub(r"\b(?:from |on )?yesterday(?:'s)?\b", lambda m: _window(st, today - timedelta(days=1), today))
    sub(r"\b(?:from |on )?today(?:'s)?\b", lambda m: _window(st, today, None))
    sub(
        r"\b(?:this )?past weekend\b",
        lambda m: _window(st, today - timedelta(days=today.weekday() + 2), today - timedelta(days=today.weekday())),
    )
    sub(r"\b(?:recent(?:ly)?|lately|latest)\b", lambda m: _window(st, today - timedelta(days=30), None))

    def bound(m: re.Match) -> bool:
        word, span = m.group(1), parse_date(m.group(2))
        if span is None:
            return False
        if word in ("since", "from", "starting"):
            _window(st, span[0], None)
        elif word == "after":
            _window(st, span[1], None)
        elif word == "before":
            _window(st, None, span[0])
        else:  # until, through, till, up to, by: inclusive of the named day / month
            _window(st, None, span[1])
        return True

    sub(rf"\b(since|starting|after|before|until|till|through|up to) {_DATE}\b", bound)
    sub(rf"\b(by) ({_FULL_DATE})\b", bound)  # "won by July 10, 2022"; "by May" may name a person

    def during(m: re.Match) -> bool:
        span = parse_date(m.group(1))
        if span is None:
            return False
        _window(st, span[0], span[1])
        st.yearless = not _YEAR.search(m.group(1)) and not m.group(1).startswith("last ")
        return True

    # "last Friday on 23 January, 2022": the weekday names the day the date gives (not last week's Friday)
    sub(rf"\b(?:(?:last )?{_WEEKDAY},? )?(?:in|during|on|from|for) {_DATE}\b", during)
    sub(rf"\b({_NAMED_DATE}|{_FULL_DATE}|{_MON} \d{{4}}|last {_WEEKDAY})\b", during)


class TimeWindow(NamedTuple):
    since: datetime | None
    until: datetime | None
    yearless: bool = False  # a month or day without a year ("in June"): read in the latest year up to now


def query_window(query: str, *, now: datetime | None = None) -> TimeWindow | None:
    """[since, until) of the time a plain search query names ("in May 2023", "on 3 June, 2023",
    "last week", "before April 10, 2023"), read by the same rules as an instruction's; None when
    it names none. Search uses it as a ranking signal, never as a filter (app.search.service)."""
    st = Reading(normalised(query), now or datetime.now(UTC))
    read_times(st)
    since, until = st.f.get("since"), st.f.get("until")
    return TimeWindow(since, until, st.yearless) if since is not None or until is not None else None


def normalised(text: str) -> str:
    """Lower-cased, one space between words, padded with a space at each end (patterns anchor on \\b)."""
    return " " + re.sub(r"\s+", " ", text.lower().replace("’", "'")).strip(" .!?") + " "
