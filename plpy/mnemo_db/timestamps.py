"""Timestamps read from the database as Python datetimes, for every module (compile,
formation, lifecycle sweeps): one conversion that never fails."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

# What a Python datetime holds (years 1 to 9999), as epoch seconds, a day inside its
# ends: a sweep that adds an hour's margin to a clamped time stays in range.
EPOCH_MIN = datetime(1, 1, 2, tzinfo=UTC).timestamp()
EPOCH_MAX = datetime(9999, 12, 30, tzinfo=UTC).timestamp()


def utc_datetime(epoch: float | None) -> datetime | None:
    """A timestamp read as epoch seconds (`extract(epoch FROM ...)`, timezone-
    independent). The API refuses timestamps outside years 2 to 9998
    (mnemo_internal.checked_timestamp), but a row stored before that check, or by
    hand, may hold anything PostgreSQL does (up to year 294276, BC dates,
    +-infinity): such a value is clamped to what a datetime holds, so one row never
    fails a whole compile, extraction or sweep."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(min(max(epoch, EPOCH_MIN), EPOCH_MAX), UTC)


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")


def day_text(ts: datetime | None) -> str:
    """A day as notes write it, "8 May 2023" ('' without one): English month names
    whatever the server's locale, so that said_day_at_end reads it back anywhere."""
    return f"{ts.day} {MONTHS[ts.month - 1]} {ts.year}" if ts else ""


def said_suffix(ts: datetime | None) -> str:
    """What closes an extracted note (extract.py): the day it was said, " (said 8 May
    2023)" ('' without one)."""
    return f" (said {day_text(ts)})" if ts else ""


_SAID_SUFFIX = re.compile(r" \(said (\d{1,2}) ([A-Z][a-z]+) (\d{4})\)$")


def said_day_at_end(text: str) -> tuple[int, date] | None:
    """Where a note's closing said_suffix starts and the day it names, if it has one."""
    m = _SAID_SUFFIX.search(text)
    if m is None or m.group(2) not in MONTHS:
        return None
    try:
        return m.start(), date(int(m.group(3)), MONTHS.index(m.group(2)) + 1, int(m.group(1)))
    except ValueError:
        return None
