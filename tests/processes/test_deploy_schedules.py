"""A rolling deploy: a worker of the older release that ticks a schedule of a task only the
newer release knows leaves the occurrence for a newer worker, which runs it exactly once."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest

from scheduler_app.db import database_now
from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from tests.helpers import REPO, database_url, wait_until
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

#: A process of the older release: its registry lacks the task; it ticks the schedules.
OLDER_RELEASE_TICKS = """
from scheduler_app import registry
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
del registry._registry["tests.record"]
print("enqueued", enqueue_due_occurrences())
"""


def tick_as_the_older_release() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "django", "shell", "--settings=tests.settings"],
        input=OLDER_RELEASE_TICKS,
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url()},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout + result.stderr


def test_an_occurrence_an_older_worker_cannot_enqueue_runs_once_on_a_newer_one(start_worker):
    due = database_now() - dt.timedelta(seconds=1)
    schedule = Schedule.objects.create(
        name="from-the-newer-release",
        task_name="tests.record",
        kind=Schedule.Kind.FIXED_RATE,
        interval=dt.timedelta(hours=1),
        start_at=due,
        next_run_at=due,
    )

    output = tick_as_the_older_release()

    assert "enqueued 0" in output, output
    assert (
        "occurrence left for a worker that knows its task schedule=from-the-newer-release "
        "error=No task is registered as 'tests.record'." in output
    ), output
    schedule.refresh_from_db()
    assert schedule.next_run_at == due
    assert not ScheduleOccurrence.objects.exists()
    assert not Job.objects.exists()

    start_worker("--concurrency", "1")
    job = wait_until(
        Job.objects.filter(status=Job.Status.SUCCEEDED).first, message="the occurrence to run"
    )

    occurrence = ScheduleOccurrence.objects.get()
    assert (occurrence.occurrence_at, occurrence.outcome, occurrence.job_id) == (
        due,
        "enqueued",
        job.pk,
    )
    assert Job.objects.count() == 1
    assert list(Run.objects.values_list("job_id", flat=True)) == [job.pk]
    schedule.refresh_from_db()
    assert schedule.next_run_at == due + dt.timedelta(hours=1)
