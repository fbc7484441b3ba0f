"""Per-item schedules: "N days after an event, at a local wall-clock time, plus jitter".

The failed-payment retry pattern: each customer gets one job at 09:00 in
their own time zone three days after the failure. One unique key per item
makes a second call a no-op and lets ``cancel_by_key`` find the job later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zoneinfo
from collections.abc import Iterable
from typing import Any

from scheduler_app import clock
from scheduler_app.exceptions import InvalidSchedule
from scheduler_app.models import Job
from scheduler_app.registry import TaskSpec
from scheduler_app.schedules.recurrence import fixed_jitter
from scheduler_app.scheduling import LATEST_RUN_AT, JobRequest, schedule_many


@dataclasses.dataclass(frozen=True, kw_only=True)
class Item:
    """One item to schedule: its key, payload, when its event happened and where."""

    key: str
    event_at: dt.datetime
    timezone: str
    payload: Any = None


def local_run_time(
    *,
    event_at: dt.datetime,
    now: dt.datetime,
    timezone: str,
    days_after: int,
    at: dt.time,
    jitter: dt.timedelta = dt.timedelta(0),
    jitter_key: str = "",
) -> dt.datetime:
    """Return (in UTC) ``at`` local time, ``days_after`` local days after ``event_at``.

    Days are counted on the calendar of ``timezone`` (a failure at 23:59 local
    time belongs to that local day, whatever the UTC date). A wall-clock time
    that does not exist that day (clocks went forward) runs that much later;
    one that happens twice (clocks went back) runs at the first. A time that
    is already past ``now`` moves to the next day. ``jitter`` adds an offset
    up to that long, fixed for ``jitter_key``.
    """
    if event_at.tzinfo is None or now.tzinfo is None:
        raise InvalidSchedule("event_at and now must be timezone-aware.")
    if days_after < 0:
        raise InvalidSchedule("days_after must not be negative; got %s." % days_after)
    try:
        tz = clock.time_zone(timezone)
    except zoneinfo.ZoneInfoNotFoundError as exc:
        raise InvalidSchedule("Unknown time zone %r." % timezone) from exc
    try:
        day = event_at.astimezone(tz).date() + dt.timedelta(days=days_after)
    except OverflowError:
        day = dt.date.max
    offset = fixed_jitter(jitter, jitter_key)
    while True:
        if day >= LATEST_RUN_AT.date():
            raise InvalidSchedule(
                "days_after puts the run time after %s, the latest allowed; got %s."
                % (LATEST_RUN_AT.isoformat(), days_after)
            )
        local = dt.datetime.combine(day, at, tzinfo=tz)
        # Round-trip through UTC so a non-existent local time lands after the gap.
        run_at = local.astimezone(dt.UTC) + offset
        if run_at >= now:
            return run_at
        day += dt.timedelta(days=1)


def schedule_per_item(
    task: TaskSpec | str,
    items: Iterable[Item],
    *,
    now: dt.datetime,
    days_after: int,
    at: dt.time,
    jitter: dt.timedelta = dt.timedelta(0),
    key_prefix: str = "",
) -> list[Job]:
    """Schedule one job per item at its local run time; return the jobs.

    Each job's unique key is ``key_prefix + item.key``: calling again while
    the jobs are unfinished creates nothing, and ``cancel_by_key(task,
    key_prefix + item.key)`` cancels one.
    """
    requests = []
    for item in items:
        key = key_prefix + item.key
        run_at = local_run_time(
            event_at=item.event_at,
            now=now,
            timezone=item.timezone,
            days_after=days_after,
            at=at,
            jitter=jitter,
            jitter_key=key,
        )
        requests.append(JobRequest(payload=item.payload, at=run_at, unique_key=key))
    return schedule_many(task, requests)
