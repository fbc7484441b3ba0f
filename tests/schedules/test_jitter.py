"""Jitter: each occurrence runs at occurrence + a fixed offset in [0, jitter).

The handler still sees the occurrence as scheduled_for, so a cleanup job
computes the same cutoff whenever (and however often) it actually runs.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import task
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, ScheduleOccurrence
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.helpers import running_worker, wait_until
from tests.schedules.steps import finish_all, jobs_of, make_schedule, utc

HOUR = dt.timedelta(hours=1)
JITTER = dt.timedelta(minutes=10)
TEN = utc(2026, 6, 1, 10, 0)
SEEN: dict[int, dt.datetime] = {}


@task(name="tests.schedules.record_scheduled_for")
def record_scheduled_for(ctx):
    SEEN[ctx.job_id] = ctx.scheduled_for


@pytest.mark.django_db
def test_jittered_run_time_is_within_bounds_and_the_same_every_time():
    with frozen_clock(TEN) as clock:
        schedule = make_schedule("hourly", cron="0 * * * *", jitter=JITTER)
        assert enqueue_due_occurrences() == 1
        first = Job.objects.get()
        assert first.scheduled_for == TEN
        assert dt.timedelta(0) <= first.run_at - TEN < JITTER

        # The same occurrence enqueued again (e.g. after its first attempt was
        # rolled back) gets the same offset.
        ScheduleOccurrence.objects.all().delete()
        Job.objects.all().delete()
        schedule.next_run_at = TEN
        schedule.save(update_fields=["next_run_at"])
        assert enqueue_due_occurrences() == 1
        again = Job.objects.get()
        assert (again.scheduled_for, again.run_at) == (first.scheduled_for, first.run_at)

        # Fixed per occurrence, not per schedule: the next hour has its own offset.
        finish_all(TEN)
        clock.advance(HOUR)
        assert enqueue_due_occurrences() == 1
    second = jobs_of(schedule)[-1]
    assert second.scheduled_for == TEN + HOUR
    assert dt.timedelta(0) <= second.run_at - second.scheduled_for < JITTER
    assert second.run_at - second.scheduled_for != first.run_at - TEN


@pytest.mark.django_db
def test_jitter_spreads_many_schedules_on_the_same_minute():
    with frozen_clock(TEN):
        for i in range(40):
            make_schedule("top-of-hour-%02d" % i, cron="0 * * * *", jitter=JITTER)
        assert enqueue_due_occurrences() == 40
    offsets = [job.run_at - job.scheduled_for for job in Job.objects.all()]
    assert {job.scheduled_for for job in Job.objects.all()} == {TEN}
    assert all(dt.timedelta(0) <= offset < JITTER for offset in offsets)
    assert len(set(offsets)) == 40
    assert max(offsets) - min(offsets) > JITTER / 2


@pytest.mark.django_db(transaction=True)
def test_handler_sees_the_occurrence_not_the_jittered_run_time():
    SEEN.clear()
    with frozen_clock(TEN) as clock:
        make_schedule(
            "cleanup", task_name=record_scheduled_for.name, cron="0 * * * *", jitter=JITTER
        )
        assert enqueue_due_occurrences() == 1
        job = Job.objects.get()
        assert job.run_at > TEN  # jittered (fixed for this occurrence key)
        clock.set(job.run_at)
        with running_worker():
            wait_until(lambda: job.pk in SEEN, message="the handler to run")
            wait_until(
                lambda: Job.objects.filter(pk=job.pk, status=Job.Status.SUCCEEDED).exists(),
                message="the job to succeed",
            )
    assert {job.pk: TEN} == SEEN
    job.refresh_from_db()
    assert job.started_at == job.run_at  # ran at its jittered time; saw the occurrence
