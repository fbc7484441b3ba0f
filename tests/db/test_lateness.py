"""lateness_by_task(): count, interpolated p50/p95 and max per task, the same on both databases.

The attempt rows are written directly with known lateness (started_at -
due_at), so the expected numbers are worked out by hand below.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.lateness import TaskLateness, lateness_by_task
from scheduler_app.models import Job, JobAttempt

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
SINCE = T0
UNTIL = T0 + dt.timedelta(hours=1)

EVEN = "tests.outcomes.late_even"  # lateness 0, 1, ..., 9 s
SKEWED = "tests.outcomes.late_skewed"  # lateness 0.5, 3.25, 10, 100 s
SINGLE = "tests.outcomes.late_single"  # lateness 7.125 s

# percentile_cont(f) over n sorted values: the value at position f * (n - 1),
# interpolated linearly between its neighbours.
EXPECTED = {
    # position 4.5 -> 4.5; position 8.55 -> 8 + 0.55 * (9 - 8)
    EVEN: TaskLateness(task_name=EVEN, count=10, p50=4.5, p95=8.55, max=9.0),
    # position 1.5 -> 3.25 + 0.5 * 6.75; position 2.85 -> 10 + 0.85 * 90
    SKEWED: TaskLateness(task_name=SKEWED, count=4, p50=6.625, p95=86.5, max=100.0),
    SINGLE: TaskLateness(task_name=SINGLE, count=1, p50=7.125, p95=7.125, max=7.125),
}


def add_attempt(task_name, *, started_at, lateness):
    due_at = started_at - dt.timedelta(seconds=lateness)
    job = Job.objects.create(task_name=task_name, scheduled_for=due_at, run_at=due_at)
    return JobAttempt.objects.create(
        job=job,
        attempt=1,
        task_name=task_name,
        worker_id="w",
        due_at=due_at,
        started_at=started_at,
        finished_at=started_at + dt.timedelta(seconds=1),
        outcome=JobAttempt.Outcome.SUCCEEDED,
    )


@pytest.fixture
def history():
    """Attempts inside [SINCE, UNTIL), plus decoys just outside it."""
    # Inserted out of order, so nothing depends on insertion order.
    for minute, lateness in zip(range(10), [9, 3, 0, 7, 1, 8, 2, 6, 4, 5], strict=True):
        add_attempt(EVEN, started_at=SINCE + dt.timedelta(minutes=minute), lateness=lateness)
    add_attempt(SKEWED, started_at=SINCE, lateness=100)  # the range includes its start
    add_attempt(SKEWED, started_at=SINCE + dt.timedelta(minutes=30), lateness=0.5)
    add_attempt(SKEWED, started_at=SINCE + dt.timedelta(minutes=31), lateness=10)
    add_attempt(SKEWED, started_at=UNTIL - dt.timedelta(microseconds=1), lateness=3.25)
    add_attempt(SINGLE, started_at=SINCE + dt.timedelta(minutes=5), lateness=7.125)
    # Outside the range: started just before it, and exactly at its (excluded) end.
    add_attempt(EVEN, started_at=SINCE - dt.timedelta(microseconds=1), lateness=1000)
    add_attempt(SKEWED, started_at=UNTIL, lateness=1000)
    add_attempt(SINGLE, started_at=UNTIL + dt.timedelta(days=1), lateness=1000)


def approx(row):
    return TaskLateness(
        task_name=row.task_name,
        count=row.count,
        p50=pytest.approx(row.p50, abs=1e-6),
        p95=pytest.approx(row.p95, abs=1e-6),
        max=pytest.approx(row.max, abs=1e-6),
    )


@pytest.mark.django_db
def test_lateness_per_task_has_count_interpolated_percentiles_and_max(history):
    rows = lateness_by_task(SINCE, UNTIL)

    assert rows == [approx(EXPECTED[EVEN]), approx(EXPECTED[SINGLE]), approx(EXPECTED[SKEWED])]
    assert [type(row.count) for row in rows] == [int, int, int]


@pytest.mark.django_db
def test_lateness_filters_by_task(history):
    assert lateness_by_task(SINCE, UNTIL, task_name=SKEWED) == [approx(EXPECTED[SKEWED])]
    assert lateness_by_task(SINCE, UNTIL, task_name="tests.outcomes.never_ran") == []


@pytest.mark.django_db
def test_lateness_covers_only_attempts_started_in_the_range(history):
    # The first half hour holds the ten EVEN attempts, SINGLE, and SKEWED's 100 s at SINCE.
    rows = lateness_by_task(SINCE, SINCE + dt.timedelta(minutes=30))
    assert rows == [
        approx(EXPECTED[EVEN]),
        approx(EXPECTED[SINGLE]),
        approx(TaskLateness(task_name=SKEWED, count=1, p50=100.0, p95=100.0, max=100.0)),
    ]
    # Only the decoys lie outside: a range covering them counts them.
    everything = lateness_by_task(SINCE - dt.timedelta(days=1), UNTIL + dt.timedelta(days=2))
    assert [(row.task_name, row.count, row.max) for row in everything] == [
        (EVEN, 11, pytest.approx(1000.0)),
        (SINGLE, 2, pytest.approx(1000.0)),
        (SKEWED, 5, pytest.approx(1000.0)),
    ]
    assert lateness_by_task(UNTIL + dt.timedelta(days=3), UNTIL + dt.timedelta(days=4)) == []
