"""Time in a query: whether it asks when (temporal_intent), the words that date
something (TIME_WORDS: a line holding one says when its event happened), and the
date range a query names (date_range), read against the session's "now"."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import numpy as np

# A question that asks when something happened, or for how long.
_TEMPORAL_RE = re.compile(
    r"(?i)(^\s*(when|since when|how long|what (year|date|day|month|time|week))\b|"
    r"\bhow (many|much) (days|weeks|months|years|time)\b|\bhow long ago\b|\bwhat (year|date|day)\b)")

# Words that date an event in conversation ("yesterday", "two weeks ago", "last
# Friday", "in May"). A temporal question is answered by the line that says when,
# and that line holds one of them; they are looked up as lexemes of the
# english text search configuration, so inflections match.
TIME_WORDS = (
    "yesterday today tonight tomorrow ago last next past recently since earlier later "
    "week weekend month year day morning evening night "
    "monday tuesday wednesday thursday friday saturday sunday "
    "january february march april june july august september october november december "
    "spring summer autumn winter")

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO_RE = re.compile(r"(?i)\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)\s+"
                     r"(day|week|month|year)s?\s+ago\b")
# (not "the last week of August": that week is read from the month)
_LAST_RE = re.compile(r"(?i)\b(last|past|previous)\s+(week|weekend|month|year|"
                      + "|".join(_WEEKDAYS) + r")\b(?!\s+of\b)")
# a month, with its year if one follows ("June", "May 2023", "February 1, 2023",
# "1 February, 2023") and its day if one is named; "may" only with a year (else it
# is the verb)
_MONTH_RE = re.compile(r"(?i)(?:\b(?P<day0>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?)?\b(?P<month>"
                       + "|".join(_MONTHS[:4] + _MONTHS[5:])
                       + r"|may(?=(?:\s+\d{1,2}(?:st|nd|rd|th)?)?,?\s+\d{4}))\b"
                       r"(?:(?:\s+(?P<day1>\d{1,2})(?:st|nd|rd|th)?)?,?\s+(?P<year>\d{4})\b)?")
_YEAR_RE = re.compile(r"(?i)\b(?:in|during|of)\s+((?:19|20)\d\d)\b")
_DAY_RE = re.compile(r"(?i)\b(yesterday|today)\b")


def temporal_intent(query: str | None) -> bool:
    """Whether the query asks when something happened (or how long ago)."""
    return bool(query and _TEMPORAL_RE.search(query))


def _day_start(ts: datetime) -> datetime:
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_range(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1)
    end = datetime(year + (month == 12), month % 12 + 1, 1)
    return start, end


def date_ranges(query: str | None, now: datetime) -> list[tuple[datetime, datetime] | tuple[int, None]]:
    """The date ranges the query names, read against `now` (the session's time):
    (start, end) for an absolute or relative range ("in May 2023", "in 2022", "two
    weeks ago", "last Tuesday", "yesterday"), or (month, None) for a month named
    without a year ("in June": that month in any year). Naive datetimes in now's
    time zone, each range padded by a day either side (an event told "yesterday" is
    recorded a day late). Empty when it names none."""
    if not query:
        return []
    now = now.replace(tzinfo=None)
    today = _day_start(now)
    out: list = []
    for m in _AGO_RE.finditer(query):
        n = int(m.group(1)) if m.group(1).isdigit() else _NUMBERS[m.group(1).lower()]
        days = n * _UNIT_DAYS[m.group(2).lower()]
        slack = max(days // 4, 1)
        out.append((today - timedelta(days=days + slack), today - timedelta(days=days - slack - 1)))
    for m in _LAST_RE.finditer(query):
        unit = m.group(2).lower()
        if unit in _WEEKDAYS:
            back = (today.weekday() - _WEEKDAYS.index(unit)) % 7 or 7
            day = today - timedelta(days=back)
            out.append((day, day + timedelta(days=1)))
        elif unit in ("week", "weekend"):
            out.append((today - timedelta(days=14), today))
        elif unit == "month":
            first = today.replace(day=1)
            prev = (first - timedelta(days=1)).replace(day=1)
            out.append((prev, first))
        else:
            out.append((datetime(today.year - 1, 1, 1), datetime(today.year, 1, 1)))
    for m in _DAY_RE.finditer(query):
        day = today - timedelta(days=1 if m.group(1).lower() == "yesterday" else 0)
        out.append((day, day + timedelta(days=1)))
    for m in _MONTH_RE.finditer(query):
        month = _MONTHS.index(m.group("month").lower()) + 1
        day = m.group("day0") or m.group("day1")
        if m.group("year") and day:
            # a day named: that day (what happened on it is often told a day or a week
            # later: the lines that date something reach back, retrieval.fuse_candidates)
            try:
                start = datetime(int(m.group("year")), month, int(day))
                out.append((start, start + timedelta(days=1)))
                continue
            except ValueError:  # no such day: the month
                pass
        if m.group("year"):
            out.append(_month_range(int(m.group("year")), month))
        else:
            out.append((month, None))
    for m in _YEAR_RE.finditer(query):
        year = int(m.group(1))
        out.append((datetime(year, 1, 1), datetime(year + 1, 1, 1)))
    pad = timedelta(days=1)
    return [(a - pad, b + pad) if b is not None else (a, None) for a, b in out]


def in_date_ranges(epochs: np.ndarray, ranges: list, reach: np.ndarray | float = 0.0) -> np.ndarray:
    """Whether each time (epoch seconds, UTC; NaN: none) falls in one of date_ranges'
    ranges, or, `reach` seconds (per time, or one for all) back from it, did: a line
    that says "yesterday" or "last week" tells of a time before it was said."""
    epochs = np.asarray(epochs, dtype=np.float64)
    hit = np.zeros(len(epochs), dtype=bool)
    if not ranges or not len(epochs):
        return hit
    known = ~np.isnan(epochs)
    earliest = epochs - np.asarray(reach, dtype=np.float64)

    def month_of(t: np.ndarray) -> np.ndarray:  # months since January 1970
        m = np.zeros(len(t), dtype=np.int64)
        m[known] = t[known].astype("datetime64[s]").astype("datetime64[M]").astype(np.int64)
        return m

    first, last = month_of(earliest), month_of(epochs)
    for start, end in ranges:
        if end is None:  # the month in any year: one the span from earliest to the time covers
            k = (start - 1 - first) % 12
            hit |= known & (first + k <= last)
        else:
            lo = start.replace(tzinfo=UTC).timestamp()
            hi = end.replace(tzinfo=UTC).timestamp()
            hit |= known & (epochs >= lo) & (earliest < hi)
    return hit
