"""next_run_times(): the next N runs in the schedule's own time zone and in UTC."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Schedule
from scheduler_app.schedules.recurrence import next_run_times
from tests.schedules.steps import MINUTE, utc

LONDON = zoneinfo.ZoneInfo("Europe/London")


def test_cron_preview_in_its_zone_and_in_utc_across_a_dst_change():
    """Weekdays at 09:00 in London: 09:00 UTC until 29 March, then 08:00 UTC (BST)."""
    schedule = Schedule(name="weekday-report", cron="0 9 * * 1-5", timezone="Europe/London")
    runs = next_run_times(schedule, 10, after=utc(2026, 3, 25, 12, 0))

    days = [26, 27, 30, 31, 1, 2, 3, 6, 7, 8]  # Thu 26 March ... Wed 8 April
    months = [3, 3, 3, 3, 4, 4, 4, 4, 4, 4]
    assert [run.local for run in runs] == [
        dt.datetime(2026, month, day, 9, 0, tzinfo=LONDON)
        for month, day in zip(months, days, strict=True)
    ]
    assert [run.local.strftime("%a %d %b %H:%M %Z") for run in runs][:4] == [
        "Thu 26 Mar 09:00 GMT",
        "Fri 27 Mar 09:00 GMT",
        "Mon 30 Mar 09:00 BST",
        "Tue 31 Mar 09:00 BST",
    ]
    assert [run.local.tzinfo for run in runs] == [LONDON] * 10
    assert [run.utc for run in runs] == [
        utc(2026, 3, 26, 9),
        utc(2026, 3, 27, 9),
        utc(2026, 3, 30, 8),
        utc(2026, 3, 31, 8),
        utc(2026, 4, 1, 8),
        utc(2026, 4, 2, 8),
        utc(2026, 4, 3, 8),
        utc(2026, 4, 6, 8),
        utc(2026, 4, 7, 8),
        utc(2026, 4, 8, 8),
    ]
    assert all(run.utc.tzinfo is dt.UTC for run in runs)


def test_preview_defaults_to_now_and_lists_strictly_later_runs():
    schedule = Schedule(name="tokyo", cron="0 9 * * *", timezone="Asia/Tokyo")
    with frozen_clock(utc(2026, 6, 1, 0, 0)):  # 09:00 in Tokyo: that run is not "next"
        runs = next_run_times(schedule, 3)
    assert [run.utc for run in runs] == [utc(2026, 6, 2), utc(2026, 6, 3), utc(2026, 6, 4)]
    assert [run.local.isoformat() for run in runs] == [
        "2026-06-02T09:00:00+09:00",
        "2026-06-03T09:00:00+09:00",
        "2026-06-04T09:00:00+09:00",
    ]


def test_fixed_rate_preview_follows_start_at():
    schedule = Schedule(
        name="rate",
        kind=Schedule.Kind.FIXED_RATE,
        interval=7 * MINUTE,
        start_at=utc(2026, 6, 1, 10, 0),
        timezone="America/New_York",
    )
    runs = next_run_times(schedule, 3, after=utc(2026, 6, 1, 10, 14))
    assert [run.utc for run in runs] == [
        utc(2026, 6, 1, 10, 21),
        utc(2026, 6, 1, 10, 28),
        utc(2026, 6, 1, 10, 35),
    ]
    assert runs[0].local.isoformat() == "2026-06-01T06:21:00-04:00"


@pytest.mark.parametrize(
    ("next_run_at", "expected"), [(None, []), (utc(2026, 6, 1, 10, 5), [utc(2026, 6, 1, 10, 5)])]
)
def test_fixed_delay_preview_lists_only_its_known_next_run(next_run_at, expected):
    schedule = Schedule(
        name="delay", kind=Schedule.Kind.FIXED_DELAY, interval=5 * MINUTE, next_run_at=next_run_at
    )
    assert [run.utc for run in next_run_times(schedule, 10, after=utc(2026, 6, 1))] == expected
