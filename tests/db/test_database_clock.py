"""One clock: leases, rescue, due times and undo deadlines follow the database's clock.

Frozen (``clock.frozen_clock``), DatabaseNow is the frozen time exactly, on both
databases. On PostgreSQL a host whose own clock is off (clock.now() patched to
run 10 s ahead or behind) still claims, renews, rescues and undoes by the
database's clock.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from scheduler_app import clock, schedule
from scheduler_app.db import DatabaseNow, backend, database_now
from scheduler_app.models import Job
from scheduler_app.worker import leases

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
LEASE = dt.timedelta(seconds=30)
Status = Job.Status


def running_job(*, lease_expires_at, worker_id="other-host:1:abc"):
    return Job.objects.create(
        task_name="tests.noop",
        status=Status.RUNNING,
        worker_id=worker_id,
        lease_expires_at=lease_expires_at,
        lease_token=1,
        attempts=1,
        scheduled_for=lease_expires_at - LEASE,
        run_at=lease_expires_at - LEASE,
        started_at=lease_expires_at - LEASE,
    )


def claim():
    rows = backend().claim_jobs(worker="w", queues=["default"], limit=10, lease=LEASE)
    return sorted(row[0] for row in rows)


@pytest.fixture
def skewed(monkeypatch):
    """Return a function that sets how far this host's clock is off the real time."""
    real = clock.now

    def skew(seconds):
        monkeypatch.setattr(clock, "now", lambda: real() + dt.timedelta(seconds=seconds))

    return skew


# --- Frozen clock: both databases ---------------------------------------------------------


@pytest.mark.django_db
def test_frozen_clock_is_the_database_clock_exactly():
    with clock.frozen_clock(T0):
        assert database_now() == T0
        assert database_now(LEASE) == T0 + LEASE
        job = schedule("tests.noop", at=T0)
        Job.objects.filter(pk=job.pk).update(lease_expires_at=DatabaseNow(LEASE))
        assert Job.objects.filter(pk=job.pk, run_at__lte=DatabaseNow()).exists()
        assert not Job.objects.filter(pk=job.pk, run_at__lt=DatabaseNow()).exists()
    assert Job.objects.get(pk=job.pk).lease_expires_at == T0 + LEASE


@pytest.mark.django_db
def test_claim_under_a_frozen_clock_takes_due_jobs_and_leases_from_the_frozen_time():
    due = schedule("tests.noop", at=T0)
    later = schedule("tests.noop", at=T0 + dt.timedelta(microseconds=1))

    with clock.frozen_clock(T0):
        assert claim() == [due.pk]

    assert Job.objects.get(pk=due.pk).lease_expires_at == T0 + LEASE
    assert Job.objects.get(pk=later.pk).status == Status.PENDING


@pytest.mark.django_db
def test_renew_and_rescue_under_a_frozen_clock_follow_the_frozen_time():
    live = running_job(lease_expires_at=T0, worker_id="w")
    expired = running_job(lease_expires_at=T0 - dt.timedelta(microseconds=1))

    with clock.frozen_clock(T0):
        assert leases.rescue_expired("rescuer") == 1
        assert leases.renew("w", [live.pk], LEASE) == 1

    assert Job.objects.get(pk=expired.pk).status == Status.PENDING
    live = Job.objects.get(pk=live.pk)
    assert (live.status, live.lease_expires_at) == (Status.RUNNING, T0 + LEASE)


@pytest.mark.django_db
def test_undo_window_is_measured_from_the_frozen_clock():
    with clock.frozen_clock(T0):
        job = schedule("tests.noop", undo_window=10)
    assert (job.undo_deadline, job.run_at) == (T0 + 10 * SECOND, T0 + 12 * SECOND)


# --- A host whose clock is off: PostgreSQL ------------------------------------------------


def statement_timestamp():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


@pytest.mark.postgres_only
@pytest.mark.django_db
@pytest.mark.parametrize("skew", [10, -10])
def test_database_now_ignores_the_host_clock(skewed, skew):
    skewed(skew)
    before = statement_timestamp()
    value = database_now()
    after = statement_timestamp()
    assert before <= value <= after
    assert abs(clock.now() - value - skew * SECOND) < SECOND


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_host_clock_ahead_neither_claims_early_nor_rescues_a_live_lease(skewed):
    db_now = database_now()
    due = schedule("tests.noop", at=db_now - SECOND)
    not_yet = schedule("tests.noop", at=db_now + 5 * SECOND)
    live = running_job(lease_expires_at=db_now + 5 * SECOND)
    skewed(10)

    assert claim() == [due.pk]
    assert leases.rescue_expired("ahead") == 0

    assert Job.objects.get(pk=not_yet.pk).status == Status.PENDING
    lease = Job.objects.get(pk=due.pk).lease_expires_at
    assert db_now + LEASE <= lease < db_now + LEASE + 5 * SECOND
    live = Job.objects.get(pk=live.pk)
    assert (live.status, live.worker_id) == (Status.RUNNING, "other-host:1:abc")


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_host_clock_behind_renews_and_rescues_by_the_database_clock(skewed):
    db_now = database_now()
    mine = running_job(lease_expires_at=db_now + SECOND, worker_id="behind")
    dead = running_job(lease_expires_at=db_now - SECOND)
    skewed(-10)

    assert leases.renew("behind", [mine.pk], LEASE) == 1
    assert leases.rescue_expired("behind") == 1

    assert Job.objects.get(pk=mine.pk).lease_expires_at >= db_now + LEASE
    assert Job.objects.get(pk=dead.pk).status == Status.PENDING


@pytest.mark.postgres_only
@pytest.mark.django_db
@pytest.mark.parametrize("skew", [10, -10])
def test_undo_window_starts_at_the_database_clock_whatever_the_host_clock(skewed, skew):
    skewed(skew)
    before = database_now()
    job = schedule("tests.noop", undo_window=30)
    after = database_now()

    assert before + 30 * SECOND <= job.undo_deadline <= after + 30 * SECOND
    assert job.run_at == job.undo_deadline + 2 * SECOND
