"""Driving schedules by hand: a frozen clock, one enqueue_due_occurrences() per step.

Jobs are "run" by updating their status and timestamps, as a worker would,
so a test controls exactly how long each run takes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from scheduler_app import task
from scheduler_app.models import Job, Schedule, ScheduleOccurrence

MINUTE = dt.timedelta(minutes=1)
TASK = "tests.schedules.tick"
Status = Job.Status
Outcome = ScheduleOccurrence.Outcome


@task(name=TASK)
def tick(ctx):
    return None


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


def make_schedule(name: str, **fields: Any) -> Schedule:
    """Create a schedule of the tests' no-op task (defaults: the model's)."""
    return Schedule.objects.create(name=name, **{"task_name": TASK, **fields})


def finish_all(now: dt.datetime) -> int:
    """Mark every unfinished job succeeded at ``now``; return how many."""
    return Job.objects.unfinished().update(status=Status.SUCCEEDED, started_at=now, finished_at=now)


def jobs_of(schedule: Schedule) -> list[Job]:
    """Return the schedule's jobs, in the order they were created."""
    return list(Job.objects.filter(schedule_occurrences__schedule=schedule).order_by("id"))


def enqueued_times(schedule: Schedule) -> list[dt.datetime]:
    """Return the scheduled_for of the schedule's jobs, in creation order."""
    return [job.scheduled_for for job in jobs_of(schedule)]


def outcome_times(schedule: Schedule, outcome: str) -> list[dt.datetime]:
    """Return the occurrence times recorded with ``outcome``, oldest first."""
    return list(
        ScheduleOccurrence.objects.filter(schedule=schedule, outcome=outcome)
        .order_by("occurrence_at")
        .values_list("occurrence_at", flat=True)
    )


def every(start: dt.datetime, step: dt.timedelta, count: int) -> list[dt.datetime]:
    return [start + i * step for i in range(count)]
