"""A claim whose commit went through but whose reply was lost costs no attempt."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from scheduler_app import controls, schedule
from scheduler_app.db import backend
from scheduler_app.models import Job, JobAttempt, WorkerHeartbeat
from tests.helpers import database_url, running_worker, wait_for_status, wait_until
from tests.testapp.models import Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def test_a_job_claimed_by_a_lost_reply_runs_on_its_only_attempt():
    """The claim committed under the worker's id, then its connection was lost before the
    reply arrived: the worker hands the job it never heard of back at once, refunded, and
    runs it, instead of leaving it to a rescue that charges the attempt (and fails a
    max_attempts=1 job that never ran)."""
    job = schedule("tests.record", {}, max_attempts=1)
    # The worker must not claim it itself: this test claims it in its name.
    controls.pause("task", "tests.record", reason="the test claims it")
    with running_worker(worker_id="w-lost", lease_seconds=10) as worker:
        # The worker is up, its connection open: the kill below must find it (a connection
        # opened after the kill would see no error, and the worker nothing to reconcile).
        wait_until(
            lambda: WorkerHeartbeat.objects.filter(worker_id="w-lost").exists(),
            message="the worker to start",
        )
        # What the lost reply leaves: the job claimed under the worker's id, unknown to it.
        (claimed,) = backend().claim_jobs(
            worker=worker.id, queues=["default"], limit=1, lease=dt.timedelta(seconds=10)
        )
        base = database_url().rsplit("/", 1)[0].replace("postgres://", "postgresql://")
        with psycopg.connect(base + "/postgres", autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> %s",
                [connection.settings_dict["NAME"], connection.connection.info.backend_pid],
            )
        wait_for_status(job, Job.Status.PENDING, timeout=8)  # handed back, refunded
        controls.resume("task", "tests.record")
        stored = wait_for_status(job, Job.Status.SUCCEEDED, timeout=15)

    assert (stored.attempts, stored.worker_id) == (1, "w-lost")
    assert list(Run.objects.filter(job_id=job.pk).values_list("attempt", flat=True)) == [1]
    reason = (
        "Worker w-lost claimed it, but the reply to the claim was lost with the database "
        "connection; handed back without using an attempt."
    )
    assert list(stored.recorded_attempts.values_list("attempt", "outcome", "error")) == [
        (1, JobAttempt.Outcome.INTERRUPTED, reason)
    ]
    assert claimed[0] == job.pk
