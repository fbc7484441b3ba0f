"""An idle worker on PostgreSQL wakes on NOTIFY instead of waiting out its poll interval."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler_app.models import Job
from scheduler_app.scheduling import schedule
from tests.helpers import pickup_seconds, wait_until

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
    """Return True once the worker LISTENs and none of its connections is busy."""
    backends = other_backends()
    listening = ("idle", "LISTEN scheduler_app_jobs") in backends
    return listening and all(state == "idle" for state, _ in backends)


def test_idle_worker_wakes_on_notify(start_worker):
    """Jobs scheduled while the worker sleeps start within milliseconds, not at a poll.

    The worker also wakes once a second to read the kill switches, so a
    single fast pickup could be luck; five in a row under 200 ms is not.
    """
    probe = schedule("tests.record")
    # No alert evaluation: its statements would follow the LISTEN on the side connection the
    # listener shares, and worker_is_idle() looks for the LISTEN as that connection's last.
    worker = start_worker("--poll-interval", str(POLL_INTERVAL), "--no-alerts")
    wait_until(
        lambda: Job.objects.filter(pk=probe.pk, status=Job.Status.SUCCEEDED).exists(),
        message="the probe job to succeed",
    )
    pickups = pickup_seconds(worker_is_idle, timeout=POLL_INTERVAL)
    assert max(pickups) < 0.2, pickups
    assert worker.alive()
