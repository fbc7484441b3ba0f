"""One clock: a host whose clock is off writes the times other hosts compare (retry and hold
times, started_at, schedule()'s run times, the enqueuer's due occurrences) from the database's
clock.

PostgreSQL only: on SQLite every process shares one host clock, which is the database's.
The host's clock is skewed as tests/skewed_clock.py does for worker subprocesses; the
workers here are real Workers in threads of this process.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from scheduler_app import RetryLater, clock, schedule, schedule_many, task
from scheduler_app.db import database_now
from scheduler_app.models import Job, JobAttempt
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from scheduler_app.scheduling import JobRequest
from tests.helpers import running_worker, wait_until
from tests.schedules.steps import make_schedule

pytestmark = pytest.mark.postgres_only

SECOND = dt.timedelta(seconds=1)
Status = Job.Status
Outcome = JobAttempt.Outcome
#: How far from the database's clock a time written "now" may be: the test's own steps.
CLOSE = 2 * SECOND


@pytest.fixture
def host_clock_off(monkeypatch):
    """Return a function that sets how many seconds this host's clock is off."""
    real = clock.now

    def skew(seconds: float) -> None:
        monkeypatch.setattr(clock, "now", lambda: real() + dt.timedelta(seconds=seconds))

    return skew


def near(value: dt.datetime, expected: dt.datetime) -> bool:
    return abs(value - expected) < CLOSE


@task(name="tests.clock.retry_later", max_attempts=1)
def retry_later(ctx):
    raise RetryLater(10, reason="come back in 10s")


#: Set by a test: how to step this host's clock from inside a handler.
STEP_CLOCK: list = []


@task(name="tests.clock.stepped_then_retry_later", max_attempts=1)
def stepped_then_retry_later(ctx):
    STEP_CLOCK[0](3600)  # NTP steps this host's clock an hour on mid-attempt
    raise RetryLater(10, reason="come back in 10s")


RELEASE = threading.Event()


@task(name="tests.clock.hangs", timeout=0.1, max_attempts=2)
def hangs(ctx):
    assert RELEASE.wait(20), "the test never released the handler"


@pytest.fixture
def hung_handler():
    RELEASE.clear()
    yield
    RELEASE.set()


@pytest.mark.django_db(transaction=True)
def test_a_worker_20s_behind_defers_by_the_database_clock_and_records_its_start(host_clock_off):
    host_clock_off(-20)
    job = schedule("tests.clock.retry_later")
    with running_worker():
        attempt = wait_until(
            JobAttempt.objects.filter(job_id=job.pk).first, message="the first attempt"
        )
        db_now = database_now()
        row = Job.objects.get(pk=job.pk)

    assert (attempt.outcome, row.status, row.attempts) == (Outcome.DEFERRED, Status.PENDING, 0)
    # Not due at once (20 s behind, it would run again back to back): 10 s on.
    assert near(row.run_at, attempt.finished_at + 10 * SECOND), (row.run_at, attempt.finished_at)
    assert row.run_at > db_now + 5 * SECOND
    assert near(attempt.started_at, db_now) and near(attempt.finished_at, db_now)
    assert JobAttempt.objects.filter(job_id=job.pk).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_host_clock_stepped_mid_attempt_moves_none_of_the_times_the_attempt_writes(
    host_clock_off,
):
    """The attempt's times follow the database's clock as the claim read it, moved on by
    this host's monotonic clock: a step of the host's clock (NTP, a VM resumed) in the
    middle of an attempt shifted its retry time and finished_at by the step."""
    STEP_CLOCK[:] = [host_clock_off]
    job = schedule("tests.clock.stepped_then_retry_later")
    with running_worker():
        attempt = wait_until(
            JobAttempt.objects.filter(job_id=job.pk).first, message="the first attempt"
        )
        db_now = database_now()
        row = Job.objects.get(pk=job.pk)

    assert near(attempt.finished_at, db_now), (attempt.finished_at, db_now)
    assert near(row.run_at, db_now + 10 * SECOND), (row.run_at, db_now)


@pytest.mark.django_db(transaction=True)
def test_a_worker_20s_behind_holds_an_abandoned_job_ahead_of_the_database_clock(
    host_clock_off, hung_handler
):
    host_clock_off(-20)
    job = schedule("tests.clock.hangs")
    with running_worker(lease_seconds=10, timeout_grace=0.2):
        wait_until(
            JobAttempt.objects.filter(job_id=job.pk).exists, message="the hung attempt recorded"
        )
        # Sample the row for a second: the hold is never in the past, nothing claims it.
        held_until = time.monotonic() + 1
        while time.monotonic() < held_until:
            row = Job.objects.get(pk=job.pk)
            assert row.run_at > database_now() + 5 * SECOND, "held until %s" % row.run_at
            time.sleep(0.05)  # sampling the row, not waiting for an event
        RELEASE.set()
    assert list(JobAttempt.objects.filter(job_id=job.pk).values_list("outcome", flat=True)) == [
        Outcome.RETRIED
    ]


@pytest.mark.django_db
def test_schedule_on_a_host_20s_behind_runs_now_and_after_a_delay_by_the_database_clock(
    host_clock_off,
):
    host_clock_off(-20)
    db_now = database_now()
    now = schedule("tests.noop")
    later = schedule("tests.noop", delay=30)
    many = schedule_many("tests.noop", [None, JobRequest(delay=30)])

    for job in (now, many[0]):
        stored = Job.objects.get(pk=job.pk)
        assert near(stored.run_at, db_now) and near(stored.scheduled_for, db_now), stored.run_at
    for job in (later, many[1]):
        stored = Job.objects.get(pk=job.pk)
        assert near(stored.run_at, db_now + 30 * SECOND), stored.run_at
    assert all(near(job.created_at, db_now) for job in Job.objects.all())


@pytest.mark.django_db
def test_the_enqueuer_on_a_host_20s_ahead_enqueues_no_occurrence_early(host_clock_off):
    soon = database_now() + 10 * SECOND
    make_schedule("soon", cron="0 0 1 1 *", next_run_at=soon)
    host_clock_off(20)

    assert enqueue_due_occurrences() == 0
    assert not Job.objects.exists()
