"""A runworker on a host whose clock is off judges leases and due times by the database's
clock, and writes its times from it: 10 s ahead it rescues no live job of another worker
and runs no job inside its undo window early; 20 s behind it does not run a deferred job
again at once. (PostgreSQL: on SQLite every process shares one host clock.)"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import CancelOutcome, cancel, schedule
from scheduler_app.db import database_now
from scheduler_app.models import Job, JobAttempt
from tests.helpers import wait_for_status, wait_until
from tests.testapp.models import Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

Status = Job.Status
SECOND = dt.timedelta(seconds=1)
AHEAD = "10"


def test_worker_ten_seconds_ahead_rescues_no_live_job_and_runs_nothing_inside_an_undo_window(
    start_worker,
):
    db_now = database_now()
    # Another worker's job, its lease renewed until 9.5 s from now (database time).
    live = Job.objects.create(
        task_name="tests.record",
        status=Status.RUNNING,
        worker_id="other-host:1:abc",
        lease_expires_at=db_now + 9.5 * SECOND,
        lease_token=1,
        attempts=1,
        scheduled_for=db_now,
        run_at=db_now,
        started_at=db_now,
    )
    # Runs 7 s (window) + 2 s (margin) from now: inside the skew, so a worker
    # trusting its own clock takes it at once, ahead of the marker (priority 0 < 1).
    undoable = schedule("tests.record", {"undoable": True}, undo_window=7)
    marker = schedule("tests.record", {"marker": True}, priority=1)

    worker = start_worker(
        "--concurrency", "1", "--worker-id", "ahead", env={"SCHEDULER_TEST_CLOCK_SKEW": AHEAD}
    )
    # The marker ran: the worker has rescued once and claimed once (in that order each turn).
    wait_for_status(marker, Status.SUCCEEDED)

    live = Job.objects.get(pk=live.pk)
    assert (live.status, live.worker_id, live.lease_token) == (
        Status.RUNNING,
        "other-host:1:abc",
        1,
    )
    assert not JobAttempt.objects.filter(job_id=live.pk).exists()
    assert Job.objects.get(pk=undoable.pk).attempts == 0
    assert cancel(undoable.pk) is CancelOutcome.CANCELLED  # the undo window is still open
    assert "lease expired" not in worker.output


def test_worker_twenty_seconds_behind_defers_and_starts_by_the_database_clock(start_worker):
    job = schedule("tests.record_then_retry_later", {"delay": 10})

    worker = start_worker("--concurrency", "1", env={"SCHEDULER_TEST_CLOCK_SKEW": "-20"})
    attempt = wait_until(
        JobAttempt.objects.filter(job_id=job.pk).first, message="the first attempt recorded"
    )
    db_now = database_now()

    stored = Job.objects.get(pk=job.pk)
    assert (attempt.outcome, stored.status) == (JobAttempt.Outcome.DEFERRED, Status.PENDING)
    # Ten seconds on by the database's clock, not ten seconds after a clock 20 s behind.
    assert stored.run_at > db_now + 5 * SECOND, (stored.run_at, db_now)
    assert abs(attempt.started_at - db_now) < 2 * SECOND, (attempt.started_at, db_now)
    assert Run.objects.filter(job_id=job.pk).count() == 1
    assert worker.alive(), worker.output
