"""Cron in a time zone across the 2026 DST changes of London and New York.

Chosen behaviour (Debian cron, via cronsim; see schedules/recurrence.py):
a fixed-time job whose local time is skipped (clocks go forward) runs at the
first minute after the change; one whose local time happens twice (clocks go
back) runs once, at the first; "every 15 minutes" keeps going in real time,
so each UTC instant runs once whatever the wall clock says.

Each test steps a frozen clock 5 minutes at a time from 3 hours before the
change to 26 hours after it, calls enqueue_due_occurrences() at every step
and marks the jobs succeeded, then compares the UTC instants enqueued with
the expected ones and with next_run_times().
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from scheduler_app.schedules.recurrence import cron_after, next_run_times
from tests.schedules.steps import (
    Outcome,
    enqueued_times,
    every,
    finish_all,
    jobs_of,
    make_schedule,
    outcome_times,
    utc,
)

STEP = dt.timedelta(minutes=5)
QUARTER = dt.timedelta(minutes=15)
BEFORE = dt.timedelta(hours=3)
AFTER = dt.timedelta(hours=26)

# zone, instant of the change (UTC), the daily jobs' UTC instants on the day
# of the change and the day after, and the wall-clock labels of "every 15
# minutes" over the two hours of real time around the change.
CASES = {
    "london-spring-forward": (
        "Europe/London",
        utc(2026, 3, 29, 1),  # 01:00 GMT -> 02:00 BST: 01:xx does not exist
        {
            # 01:30 does not exist on the 29th: runs at 02:00 BST, the first minute after.
            "30 1 * * *": [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
            "30 2 * * *": [utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 1, 30)],
        },
        "00:00 GMT 00:15 GMT 00:30 GMT 00:45 GMT 02:00 BST 02:15 BST 02:30 BST 02:45 BST",
    ),
    "london-fall-back": (
        "Europe/London",
        utc(2026, 10, 25, 1),  # 02:00 BST -> 01:00 GMT: 01:xx happens twice
        {
            # 01:30 happens twice on the 25th: runs once, at 01:30 BST.
            "30 1 * * *": [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)],
            "30 2 * * *": [utc(2026, 10, 25, 2, 30), utc(2026, 10, 26, 2, 30)],
        },
        "01:00 BST 01:15 BST 01:30 BST 01:45 BST 01:00 GMT 01:15 GMT 01:30 GMT 01:45 GMT",
    ),
    "new-york-spring-forward": (
        "America/New_York",
        utc(2026, 3, 8, 7),  # 02:00 EST -> 03:00 EDT: 02:xx does not exist
        {
            "30 1 * * *": [utc(2026, 3, 8, 6, 30), utc(2026, 3, 9, 5, 30)],
            # 02:30 does not exist on the 8th: runs at 03:00 EDT, the first minute after.
            "30 2 * * *": [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)],
        },
        "01:00 EST 01:15 EST 01:30 EST 01:45 EST 03:00 EDT 03:15 EDT 03:30 EDT 03:45 EDT",
    ),
    "new-york-fall-back": (
        "America/New_York",
        utc(2026, 11, 1, 6),  # 02:00 EDT -> 01:00 EST: 01:xx happens twice
        {
            # 01:30 happens twice on the 1st: runs once, at 01:30 EDT.
            "30 1 * * *": [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)],
            "30 2 * * *": [utc(2026, 11, 1, 7, 30), utc(2026, 11, 2, 7, 30)],
        },
        "01:00 EDT 01:15 EDT 01:30 EDT 01:45 EDT 01:00 EST 01:15 EST 01:30 EST 01:45 EST",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
def test_cron_across_dst_change_neither_doubles_nor_loses_an_occurrence(case):
    zone, change, daily, quarter_labels = CASES[case]
    start, end = change - BEFORE, change + AFTER
    with frozen_clock(start) as clock:
        schedules = {
            cron: make_schedule("dst-%s" % i, cron=cron, timezone=zone)
            for i, cron in enumerate([*daily, "*/15 * * * *"])
        }
        now = start
        while now <= end:
            enqueue_due_occurrences()
            finish_all(now)
            now = clock.advance(STEP)

    quarterly = schedules.pop("*/15 * * * *")
    # Every 15 minutes of real time, none doubled and none missing.
    expected_quarters = every(start, QUARTER, int((end - start) / QUARTER) + 1)
    assert enqueued_times(quarterly) == expected_quarters
    hour = dt.timedelta(hours=1)
    around_change = [at for at in enqueued_times(quarterly) if change - hour <= at < change + hour]
    labels = " ".join(at.astimezone(quarterly.tz).strftime("%H:%M %Z") for at in around_change)
    assert labels == quarter_labels

    for cron, expected in daily.items():
        schedule = schedules[cron]
        assert enqueued_times(schedule) == expected, cron
        # The preview lists the same instants.
        preview = next_run_times(schedule, len(expected), after=start)
        assert [run.utc for run in preview] == expected, cron
        assert [run.local for run in preview] == [at.astimezone(schedule.tz) for at in expected]
    preview = next_run_times(
        quarterly, len(expected_quarters), after=start - dt.timedelta(seconds=1)
    )
    assert [run.utc for run in preview] == expected_quarters

    for schedule in [*schedules.values(), quarterly]:
        for outcome in (Outcome.SKIPPED_MISFIRE, Outcome.SKIPPED_OVERLAP, Outcome.ERROR):
            assert outcome_times(schedule, outcome) == [], (schedule.cron, outcome)
        # One enqueued record per job, and (no jitter) each job runs at its occurrence.
        assert outcome_times(schedule, Outcome.ENQUEUED) == enqueued_times(schedule)
        assert [job.run_at for job in jobs_of(schedule)] == enqueued_times(schedule)


@pytest.mark.parametrize(
    ("zone", "cron", "after", "first"),
    [
        # 01:10 GMT is in the second pass of 01:xx; 01:30 BST (00:30 UTC) has passed.
        ("Europe/London", "30 1 * * *", utc(2026, 10, 25, 1, 10), utc(2026, 10, 26, 1, 30)),
        # Lord Howe goes back half an hour at 02:00 (+11) -> 01:30 (+10:30).
        ("Australia/Lord_Howe", "45 1 * * *", utc(2026, 4, 4, 15, 5), utc(2026, 4, 5, 15, 15)),
    ],
)
def test_cron_after_a_moment_in_the_repeated_hour_never_yields_the_past(zone, cron, after, first):
    """cronsim starts a fixed-time expression from the wall clock, so inside the hour that
    repeats it offered the first pass's run, which is before ``after``."""
    times = cron_after(cron, zoneinfo.ZoneInfo(zone), after)
    assert next(times) == first


@pytest.mark.django_db
def test_a_schedule_created_in_the_repeated_hour_does_not_run_what_passed_before_it():
    created = utc(2026, 10, 25, 1, 10)  # 01:10 GMT, after 01:30 BST
    with frozen_clock(created) as clock:
        schedule = make_schedule("made-at-01-10", cron="30 1 * * *", timezone="Europe/London")
        for _ in range(12):
            enqueue_due_occurrences()
            clock.advance(STEP)
        assert enqueued_times(schedule) == []
        assert [run.utc for run in next_run_times(schedule, 1)] == [utc(2026, 10, 26, 1, 30)]
