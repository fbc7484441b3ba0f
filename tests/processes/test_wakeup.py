"""An idle worker on PostgreSQL wakes on NOTIFY instead of waiting out its poll interval."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from scheduler_app.models import Job
from scheduler_app.scheduling import schedule
from tests.helpers import wait_until
from tests.testapp.models import Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

POLL_INTERVAL = 30


def other_backends() -> list[tuple[str, str]]:
    """Return (state, last query) of every other connection to the test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchall()


def worker_is_idle() -> bool:
    """Return True once the worker LISTENs and its loop's last query was the idle look-up."""
    backends = other_backends()
    listening = ("idle", "LISTEN scheduler_app_jobs") in backends
    waiting = any(
        state == "idle" and query.startswith('SELECT "scheduler_app_job"."run_at"')
        for state, query in backends
    )
    return listening and waiting


def test_idle_worker_wakes_on_notify(start_worker):
    """A job scheduled while the worker sleeps for its 30 s poll interval starts within seconds."""
    probe = schedule("tests.record")
    worker = start_worker("--poll-interval", str(POLL_INTERVAL))
    wait_until(
        lambda: Job.objects.filter(pk=probe.pk, status=Job.Status.SUCCEEDED).exists(),
        message="the probe job to succeed",
    )
    wait_until(worker_is_idle, message="the worker to go idle")

    scheduled = time.monotonic()
    job = schedule("tests.record")
    wait_until(
        lambda: Run.objects.filter(job_id=job.pk).exists(),
        timeout=POLL_INTERVAL,
        message="the job to start",
    )
    assert time.monotonic() - scheduled < 5
    assert worker.alive()
