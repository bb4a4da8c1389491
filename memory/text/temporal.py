"""Temporal intent in a search query: the time window a query names, relative to a reference
date ("now" unless the request's `reference_date` says otherwise). Pure functions, no database.

Understood (case-insensitive, English): today, yesterday, last night; this / last / past /
previous week, month, year; N days / weeks / months / years ago; the past / last N days, weeks,
months, years; a month with or without its year ("in May 2023", "in May": the latest May not
after the reference); a year ("in 2023"); a date ("on 7 May 2023", "May 7, 2023", "2023-05-07");
last / on <weekday>; and any of the month, year or date forms after "before", "after" or
"since". The first expression found wins. Anything else ("before she moved") is no window.

Search demotes memories whose event time (the add request's `timestamp`, else when it was
stored) falls outside the window; see memory.retrieval.search.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
UNITS = {
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
}
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
    "a couple of": 2,
    "a few": 3,
    "couple of": 2,
    "few": 3,
}
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST_EPOCH = 253402300799  # 9999-12-31T23:59:59Z
LATEST = datetime(9999, 12, 30, tzinfo=UTC)

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY = "|".join(WEEKDAYS)
_NUMBER = r"\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True))
_UNIT = "|".join(UNITS)
_YEAR = r"(?:19|20)\d\d"
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
# The date, month and year forms, also after before / after / since.
_POINT = (
    rf"(?P<iso>{_YEAR}-\d\d-\d\d)"
    rf"|(?P<d1>{_DAY})\s+(?:of\s+)?(?P<m1>{_MONTH})\.?,?\s+(?P<y1>{_YEAR})"
    rf"|(?P<m2>{_MONTH})\.?\s+(?P<d2>{_DAY}),?\s+(?P<y2>{_YEAR})"
    rf"|(?P<m3>{_MONTH})\.?,?\s+(?:of\s+)?(?P<y3>{_YEAR})"
    rf"|(?:in|during)\s+(?P<m4>{_MONTH})\b(?!\s*\d)"
    rf"|(?P<y4>{_YEAR})\b"
)
_PATTERNS = [
    ("relative", re.compile(r"\b(?P<which>today|yesterday|last night|tonight)\b", re.I)),
    ("bound", re.compile(rf"\b(?P<bound>before|after|since|until)\s+(?:{_POINT})", re.I)),
    ("point", re.compile(rf"\b(?:{_POINT})", re.I)),
    (
        "ago",
        re.compile(rf"\b(?P<n>{_NUMBER})\s+(?P<unit>{_UNIT})\s+ago\b", re.I),
    ),
    (
        "past",
        re.compile(
            rf"\b(?:the\s+)?(?:past|last|previous)\s+(?P<n>{_NUMBER})\s+(?P<unit>{_UNIT})\b", re.I
        ),
    ),
    (
        "period",
        re.compile(r"\b(?P<which>this|last|past|previous)\s+(?P<unit>week|month|year)\b", re.I),
    ),
    ("weekday", re.compile(rf"\b(?P<which>last|on|this)\s+(?P<day>{_WEEKDAY})\b", re.I)),
]


@dataclass(frozen=True)
class Window:
    """[start, end): the event times a query asks about, and the words that asked."""

    start: datetime
    end: datetime
    phrase: str

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def reference_moment(value: Any) -> datetime:
    """A search's `reference_date` as Mem0 accepts it: epoch seconds (int or float), a date
    ("2023-05-08") or an ISO datetime; a naive value is UTC. ValueError if it is none of
    these or out of range."""
    if isinstance(value, bool):
        raise ValueError("expected epoch seconds, a date (YYYY-MM-DD) or an ISO datetime")
    if isinstance(value, int | float):
        if not 0 <= value <= LATEST_EPOCH:  # NaN fails too
            raise ValueError(f"epoch seconds must be from 0 to {LATEST_EPOCH}")
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str) and 0 < len(value) <= 40:
        text = value.strip()
        try:
            if re.fullmatch(r"\d{4}-\d\d-\d\d", text):
                return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as error:
            raise ValueError(
                "expected epoch seconds, a date (YYYY-MM-DD) or an ISO datetime"
            ) from error
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    raise ValueError("expected epoch seconds, a date (YYYY-MM-DD) or an ISO datetime")


def time_window(query: str, now: datetime) -> Window | None:
    """The window the query's first temporal expression names, relative to `now`; or None."""
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    found: list[tuple[int, Window]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            try:
                window = _window(kind, match, now)
            except (OverflowError, ValueError):
                window = None  # a reference date at the edge of the calendar (year 1, 9999)
            if window is not None:
                found.append((match.start(), window))
                break
    if not found:
        return None
    return min(found, key=lambda pair: pair[0])[1]


def _day(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    start = _day(date(year, month, 1))
    end = _day(date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1))
    return start, end


def _shift_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _count(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else NUMBERS.get(text, 0)


def _unit_window(unit: str, day: date) -> tuple[datetime, datetime]:
    """The calendar day, week (Monday first), month or year that contains `day`."""
    if unit == "day":
        return _day(day), _day(day + timedelta(days=1))
    if unit == "week":
        monday = day - timedelta(days=day.weekday())
        return _day(monday), _day(monday + timedelta(days=7))
    if unit == "month":
        return _month_window(day.year, day.month)
    return _day(date(day.year, 1, 1)), _day(date(day.year + 1, 1, 1))


def _point(match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:  # noqa: PLR0911
    """The day, month or year a date, month or year form names."""
    groups = match.groupdict()
    try:
        if groups.get("iso"):
            day = date.fromisoformat(groups["iso"])
            return _day(day), _day(day + timedelta(days=1))
        for d, m, y in (("d1", "m1", "y1"), ("d2", "m2", "y2")):
            if groups.get(d):
                number = int(re.sub(r"\D", "", groups[d]))
                day = date(int(groups[y]), MONTHS[groups[m].lower()], number)
                return _day(day), _day(day + timedelta(days=1))
        if groups.get("m3"):
            return _month_window(int(groups["y3"]), MONTHS[groups["m3"].lower()])
        if groups.get("m4"):
            month = MONTHS[groups["m4"].lower()]
            year = now.year if month <= now.month else now.year - 1
            return _month_window(year, month)
        if groups.get("y4"):
            year = int(groups["y4"])
            return _day(date(year, 1, 1)), _day(date(year + 1, 1, 1))
    except ValueError:
        return None  # 31 February
    return None


def _window(kind: str, match: re.Match[str], now: datetime) -> Window | None:
    phrase = match.group(0)
    today = now.astimezone(UTC).date()
    if kind == "relative":
        which = match.group("which").lower()
        day = today if which in ("today", "tonight") else today - timedelta(days=1)
        span: tuple[datetime, datetime] | None = (_day(day), _day(day + timedelta(days=1)))
    elif kind in ("point", "bound"):
        span = _point(match, now)
        if span is not None and kind == "bound":
            span = _bounded(match.group("bound").lower(), span)
    elif kind in ("ago", "past"):
        span = _counted(kind, match, now, today)
    elif kind == "period":
        span = _period(match.group("which").lower(), match.group("unit").lower(), now, today)
    else:  # weekday
        weekday = WEEKDAYS[match.group("day").lower()]
        last = match.group("which").lower() == "last"
        back = (today.weekday() - weekday) % 7 or (7 if last else 0)
        span = _unit_window("day", today - timedelta(days=back))
    return None if span is None else Window(span[0], span[1], phrase)


def _bounded(bound: str, span: tuple[datetime, datetime]) -> tuple[datetime, datetime]:
    """before / until / after / since a day, month or year."""
    if bound in ("before", "until"):
        return EARLIEST, span[0] if bound == "before" else span[1]
    return span[1] if bound == "after" else span[0], LATEST


def _counted(
    kind: str, match: re.Match[str], now: datetime, today: date
) -> tuple[datetime, datetime] | None:
    """N units ago (that calendar unit), or the past N units (from that day up to now)."""
    n, unit = _count(match.group("n")), UNITS[match.group("unit").lower()]
    if not 0 < n <= 1000:
        return None
    if unit == "day":
        back = today - timedelta(days=n)
    elif unit == "week":
        back = today - timedelta(weeks=n)
    elif unit == "month":
        back = _shift_months(today, -n)
    else:
        back = date(max(1, today.year - n), 1, 1)
    if kind == "ago":
        return _unit_window(unit, back)
    return _unit_window("day", back)[0], now + timedelta(microseconds=1)


def _period(which: str, unit: str, now: datetime, today: date) -> tuple[datetime, datetime]:
    """this / last / previous week, month or year (calendar units); the past week, month or
    year (the last 7, 30 or 365 days up to now)."""
    if which == "past":
        days = {"week": 7, "month": 30, "year": 365}[unit]
        return now - timedelta(days=days), now + timedelta(microseconds=1)
    if which == "this":
        return _unit_window(unit, today)
    if unit == "week":
        return _unit_window("week", today - timedelta(weeks=1))
    if unit == "month":
        return _unit_window("month", _shift_months(today, -1))
    return _unit_window("year", date(today.year - 1, 1, 1))
