"""When a schedule's occurrences fall: cron in a time zone, or a fixed rate.

Cron is evaluated by cronsim, which follows Debian cron across DST changes:
in the hour that repeats (clocks go back) a fixed-time job runs once, while
"every N minutes" keeps going in real time; a time that does not exist
(clocks go forward) runs at the first minute after the change. A daily job is
neither doubled nor lost; no occurrence is ever before the moment asked about.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import zoneinfo
from collections.abc import Iterator
from typing import NamedTuple

from cronsim import CronSim, CronSimError

from scheduler_app import clock
from scheduler_app.exceptions import InvalidSchedule


class RunTime(NamedTuple):
    """One upcoming occurrence, in the schedule's time zone and in UTC."""

    local: dt.datetime
    utc: dt.datetime


class CronError(ValueError):
    """An invalid cron expression."""


def check_cron(expression: str) -> None:
    """Raise CronError unless ``expression`` is a valid 5-field cron expression."""
    if len(expression.split()) != 5:
        raise CronError("a cron expression has 5 fields (minute hour day month weekday)")
    try:
        next(CronSim(expression, dt.datetime(2000, 1, 1)))
    except CronSimError as exc:
        raise CronError(str(exc)) from exc
    except StopIteration:
        raise CronError("it never matches a date") from None


def cron_after(expression: str, tz: zoneinfo.ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
    """Yield the cron's occurrences strictly after ``after``, as aware UTC datetimes."""
    for local in CronSim(expression, after.astimezone(tz)):
        at = local.astimezone(dt.UTC)
        # cronsim finds a fixed-time expression's next run on the wall clock: from a moment
        # in the second pass of an hour that repeats, that is the first pass's, now past.
        if at > after:
            yield at


def fixed_rate_after(
    start: dt.datetime, interval: dt.timedelta, after: dt.datetime
) -> Iterator[dt.datetime]:
    """Yield start + k * interval strictly after ``after`` (k >= 0)."""
    first = 0 if after < start else (after - start) // interval + 1
    for k in itertools.count(first):
        yield start + k * interval


def occurrences_after(schedule, after: dt.datetime) -> Iterator[dt.datetime]:  # type: ignore[no-untyped-def]
    """Yield the occurrences of a cron or fixed-rate schedule strictly after ``after``.

    Raises InvalidSchedule for a stored cron expression or time zone that is
    not valid (saved without validation, or a zone removed from tzdata).
    """
    if schedule.kind == schedule.Kind.CRON:
        try:
            tz = zoneinfo.ZoneInfo(schedule.timezone)
            check_cron(schedule.cron)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidSchedule(
                "Schedule %r cannot be evaluated (cron %r, time zone %r): %s"
                % (schedule.name, schedule.cron, schedule.timezone, exc)
            ) from exc
        return cron_after(schedule.cron, tz, after)
    if schedule.kind == schedule.Kind.FIXED_RATE:
        start = schedule.start_at or schedule.created_at
        return fixed_rate_after(start, schedule.interval, after)
    raise ValueError("A fixed delay schedule has no occurrences until its previous run ends.")


def next_run_times(schedule, count: int = 10, after: dt.datetime | None = None) -> list[RunTime]:  # type: ignore[no-untyped-def]
    """Return the schedule's next ``count`` occurrences after ``after`` (default: now).

    Each in the schedule's own time zone and in UTC. A fixed delay schedule
    depends on when runs end, so only its known next run is listed.
    """
    after = after or clock.now()
    if schedule.kind == schedule.Kind.FIXED_DELAY:
        times = [schedule.next_run_at] if schedule.next_run_at else []
    else:
        times = list(itertools.islice(occurrences_after(schedule, after), count))
    tz = schedule.tz
    return [RunTime(local=at.astimezone(tz), utc=at.astimezone(dt.UTC)) for at in times]


def fixed_jitter(limit: dt.timedelta, key: str) -> dt.timedelta:
    """Return an offset in [0, limit) that looks random but is the same for the same key."""
    if limit <= dt.timedelta(0):
        return dt.timedelta(0)
    fraction = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return dt.timedelta(microseconds=int(limit / dt.timedelta(microseconds=1) * fraction))
