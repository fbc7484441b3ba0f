"""The Celery executor's start: one guarded UPDATE consumes the relay's lease token."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from scheduler_app.celery.execution import renewing, run_published, start
from scheduler_app.db import backend
from scheduler_app.models import Job
from scheduler_app.scheduling import schedule
from scheduler_app.worker.execution import ClaimedJob, hand_back
from scheduler_app.worker.outcomes import record_one
from tests.helpers import database_url, wait_until
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = dt.timedelta(seconds=30)


def publish(job: Job) -> ClaimedJob:
    """Claim ``job`` as the relay does before publishing it."""
    (row,) = backend().claim_jobs(worker="relay", queues=[job.queue], limit=1, lease=LEASE)
    return ClaimedJob.from_row(row)


def test_start_consumes_the_token_so_a_second_delivery_is_refused():
    job = schedule("tests.record", {"n": 1}, queue="emails")
    published = publish(job)

    started, queue = start(job.pk, published.lease_token, worker_id="celery-a", lease=LEASE)
    assert (started.id, started.task_name, started.payload, queue) == (
        job.pk,
        "tests.record",
        {"n": 1},
        "emails",
    )
    assert started.lease_token == published.lease_token + 1
    assert start(job.pk, published.lease_token, worker_id="celery-b", lease=LEASE) is None
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.worker_id, stored.attempts) == ("running", "celery-a", 1)


def test_the_relays_token_no_longer_records_an_outcome_once_started():
    """A relay handing back a job a Celery worker already started changes nothing."""
    job = schedule("tests.record", {})
    published = publish(job)
    start(job.pk, published.lease_token, worker_id="celery-a", lease=LEASE)

    assert record_one(hand_back(published, "relay stopping"), worker="relay") == set()
    assert Job.objects.get(pk=job.pk).status == "running"


def test_a_message_of_a_handed_back_job_is_refused_and_runs_nothing():
    job = schedule("tests.record", {})
    published = publish(job)
    assert record_one(hand_back(published, "relay stopping"), worker="relay") == {published.fence}

    outcome = run_published(job.pk, published.lease_token, worker_id="celery-a", lease=LEASE)

    assert outcome == "refused"
    assert not Run.objects.exists()
    assert Job.objects.get(pk=job.pk).status == "pending"


def test_run_published_runs_and_records_the_job_once():
    job = schedule("tests.record", {})
    published = publish(job)

    assert run_published(job.pk, published.lease_token, worker_id="w", lease=LEASE) == "succeeded"
    assert run_published(job.pk, published.lease_token, worker_id="w", lease=LEASE) == "refused"

    assert Run.objects.filter(job_id=job.pk).count() == 1
    history = Job.objects.get().attempt_history()
    assert [(a.worker_id, a.outcome) for a in history] == [("w", "succeeded")]
    assert Job.objects.get(pk=job.pk).status == "succeeded"


@pytest.mark.postgres_only
def test_lease_renewal_outlives_a_database_that_refuses_writes(caplog):
    """A renewal the database refuses with an error other than a lost connection (a
    failover's old primary, now read-only) is retried on a new connection: the renewing
    thread lives on, and the lease moves on once writes are accepted again."""
    job = schedule("tests.record", {})
    published = publish(job)
    published_lease = Job.objects.get(pk=job.pk).lease_expires_at
    name = connection.settings_dict["NAME"]
    base = database_url().rsplit("/", 1)[0].replace("postgres://", "postgresql://")
    with psycopg.connect(base + "/postgres", autocommit=True) as admin:
        # New connections (the renewing thread's) start read-only; this one stays writable.
        admin.execute('ALTER DATABASE "%s" SET default_transaction_read_only = on' % name)
        try:
            with renewing(published, worker_id="relay", lease=dt.timedelta(seconds=0.6)):
                wait_until(
                    lambda: (
                        "cannot execute SELECT FOR UPDATE in a read-only transaction" in caplog.text
                    ),
                    timeout=5,
                    message="a renewal refused by the read-only database",
                )
                admin.execute('ALTER DATABASE "%s" RESET default_transaction_read_only' % name)
                wait_until(
                    lambda: Job.objects.get(pk=job.pk).lease_expires_at != published_lease,
                    timeout=5,
                    message="a renewal once writes are accepted",
                )
        finally:
            admin.execute('ALTER DATABASE "%s" RESET default_transaction_read_only' % name)
    assert "lease renewal failed, will retry job=%s worker=relay" % job.pk in caplog.text
