"""Timestamps read from the database as Python datetimes, for every module (compile,
formation, lifecycle sweeps): one conversion that never fails."""

from __future__ import annotations

from datetime import UTC, datetime

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
