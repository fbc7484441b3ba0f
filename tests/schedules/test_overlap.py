"""A run slower than its interval, under each overlap policy and each kind of schedule.

Every job takes 12 minutes on a 5-minute schedule. The clock steps one
minute at a time for 40 minutes; at each step runs that reached 12 minutes
finish, the scheduler ticks, and due jobs start. The outcomes follow
schedules/policy.py:

- overlap skip: an occurrence is skipped (recorded skipped_overlap) while the
  previous run is pending or running, so cron and fixed rate run at 0, 15
  and 30 and skip the four-fifths in between;
- overlap allow: every occurrence runs, in parallel;
- fixed delay never overlaps under either policy: the next run is due the
  interval after the previous one finished (0, 12+5=17, 29+5=34).
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, Schedule
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.schedules.steps import (
    MINUTE,
    Outcome,
    Status,
    jobs_of,
    make_schedule,
    outcome_times,
    utc,
)

T0 = utc(2026, 6, 1, 10, 0)
INTERVAL = 5 * MINUTE
RUN_TIME = 12 * MINUTE
WINDOW = 40  # minutes
ALL_FIVES = list(range(0, WINDOW + 1, 5))

KINDS = {
    "cron": {"kind": Schedule.Kind.CRON, "cron": "*/5 * * * *", "timezone": "Europe/London"},
    "fixed_rate": {"kind": Schedule.Kind.FIXED_RATE, "interval": INTERVAL, "start_at": T0},
    "fixed_delay": {"kind": Schedule.Kind.FIXED_DELAY, "interval": INTERVAL, "start_at": T0},
}

# kind, overlap policy -> minutes (after T0) of the occurrences enqueued, and skipped_overlap.
OUTCOMES = [
    ("cron", "skip", [0, 15, 30], [5, 10, 20, 25, 35, 40]),
    ("cron", "allow", ALL_FIVES, []),
    ("fixed_rate", "skip", [0, 15, 30], [5, 10, 20, 25, 35, 40]),
    ("fixed_rate", "allow", ALL_FIVES, []),
    ("fixed_delay", "skip", [0, 17, 34], []),
    ("fixed_delay", "allow", [0, 17, 34], []),
]


def minutes(times):
    return [int((at - T0) / MINUTE) for at in times]


def run_jobs(now):
    """Finish runs that have taken RUN_TIME; start pending jobs that are due."""
    for job in Job.objects.running():
        if job.started_at + RUN_TIME <= now:
            Job.objects.filter(pk=job.pk).update(
                status=Status.SUCCEEDED, finished_at=job.started_at + RUN_TIME
            )
    Job.objects.due(now).update(status=Status.RUNNING, started_at=now)


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "overlap", "enqueued", "skipped"), OUTCOMES)
def test_run_slower_than_interval_follows_the_overlap_policy(kind, overlap, enqueued, skipped):
    with frozen_clock(T0) as clock:
        schedule = make_schedule("slow", overlap_policy=overlap, **KINDS[kind])
        for minute in range(WINDOW + 1):
            now = T0 + minute * MINUTE
            clock.set(now)
            run_jobs(now)
            enqueue_due_occurrences()
            run_jobs(now)

    jobs = jobs_of(schedule)
    assert minutes(job.scheduled_for for job in jobs) == enqueued
    assert minutes(outcome_times(schedule, Outcome.ENQUEUED)) == enqueued
    assert minutes(outcome_times(schedule, Outcome.SKIPPED_OVERLAP)) == skipped
    assert outcome_times(schedule, Outcome.SKIPPED_MISFIRE) == []
    # Each job started on time, at its occurrence.
    assert [job.started_at for job in jobs] == [job.scheduled_for for job in jobs]
    if overlap == "skip" or kind == "fixed_delay":
        # Never two runs at once.
        for previous, following in itertools.pairwise(jobs):
            assert previous.finished_at <= following.started_at
    if kind == "fixed_delay":
        # Each run is due the interval after the previous one finished.
        for previous, following in itertools.pairwise(jobs):
            assert following.scheduled_for == previous.finished_at + INTERVAL
    if overlap == "allow" and kind != "fixed_delay":
        # Runs of 12 minutes every 5 minutes: up to three at once.
        running_at_once = max(
            sum(1 for job in jobs if job.started_at <= at < job.started_at + RUN_TIME)
            for at in (T0 + m * MINUTE for m in range(WINDOW + 1))
        )
        assert running_at_once == 3


@pytest.mark.django_db
def test_fixed_delay_counts_from_when_the_run_finished_not_when_it_started():
    """A fixed delay run that took 47 minutes is next due 5 minutes after it ended."""
    with frozen_clock(T0) as clock:
        schedule = make_schedule("delay", **KINDS["fixed_delay"])
        assert enqueue_due_occurrences() == 1
        job = Job.objects.get()
        Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, started_at=T0)
        clock.set(T0 + 30 * MINUTE)
        assert enqueue_due_occurrences() == 0  # still running: nothing is due yet
        finished = T0 + dt.timedelta(minutes=47, seconds=13)
        Job.objects.filter(pk=job.pk).update(status=Status.SUCCEEDED, finished_at=finished)
        clock.set(finished + dt.timedelta(seconds=1))
        assert enqueue_due_occurrences() == 0
        schedule.refresh_from_db()
        assert schedule.next_run_at == finished + INTERVAL
        clock.set(finished + INTERVAL - dt.timedelta(microseconds=1))
        assert enqueue_due_occurrences() == 0
        clock.set(finished + INTERVAL)
        assert enqueue_due_occurrences() == 1
    assert [job.scheduled_for for job in jobs_of(schedule)] == [T0, finished + INTERVAL]
