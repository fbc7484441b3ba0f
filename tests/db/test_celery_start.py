"""The Celery executor's start: one guarded UPDATE consumes the relay's lease token."""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import DatabaseError, connection

from scheduler_app.celery import execution
from scheduler_app.celery.execution import Started, record_outcomes, run_deliveries, step
from scheduler_app.celery.renewals import Renewer
from scheduler_app.db import backend
from scheduler_app.db.postgresql.jobs import START
from scheduler_app.db.postgresql.statements import bound_cursor
from scheduler_app.models import Job
from scheduler_app.scheduling import schedule, schedule_many
from scheduler_app.worker.execution import ClaimedJob, hand_back
from scheduler_app.worker.outcomes import record_one
from tests.helpers import database_url, wait_until
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = dt.timedelta(seconds=30)


def start(job_id: int, lease_token: int, *, worker_id: str, lease: dt.timedelta) -> Started:
    """Take a published job over from the relay as a Celery task does, with what other
    threads start at the same moment (execution.step); return it and its queue, or None."""
    _, started = step(
        None, (job_id, lease_token, worker_id, lease), worker_id=worker_id, within=lease / 2
    )
    if isinstance(started, DatabaseError):
        raise started
    return started


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

    outcomes = run_deliveries([(job.pk, published.lease_token)], worker_id="celery-a", lease=LEASE)

    assert outcomes == ["refused"]
    assert not Run.objects.exists()
    assert Job.objects.get(pk=job.pk).status == "pending"


def test_run_deliveries_runs_and_records_the_job_once():
    job = schedule("tests.record", {})
    published = publish(job)
    delivery = (job.pk, published.lease_token)

    assert run_deliveries([delivery], worker_id="w", lease=LEASE) == ["succeeded"]
    assert run_deliveries([delivery], worker_id="w", lease=LEASE) == ["refused"]

    assert Run.objects.filter(job_id=job.pk).count() == 1
    history = Job.objects.get().attempt_history()
    assert [(a.worker_id, a.outcome) for a in history] == [("w", "succeeded")]
    assert Job.objects.get(pk=job.pk).status == "succeeded"


def test_a_message_of_several_jobs_runs_each_once_and_refuses_a_spent_token():
    """run_deliveries runs the jobs of one message in turn; a handed-back job among them is
    refused and the others still run."""
    jobs = [publish(schedule("tests.record", {"n": n})) for n in range(3)]
    assert record_one(hand_back(jobs[1], "relay stopping"), worker="relay") == {jobs[1].fence}

    outcomes = run_deliveries(
        [(job.id, job.lease_token) for job in jobs], worker_id="w", lease=LEASE
    )

    assert outcomes == ["succeeded", "refused", "succeeded"]
    assert sorted(Run.objects.values_list("job_id", flat=True)) == [jobs[0].id, jobs[2].id]
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert [statuses[job.id] for job in jobs] == ["succeeded", "pending", "succeeded"]


@pytest.mark.postgres_only
def test_a_jobs_outcome_and_the_next_jobs_start_commit_together():
    """Of two jobs in one message, the first's outcome is recorded by the transaction that
    starts the second: one commit per job, not two."""
    first, second = [publish(schedule("tests.row_version", {"n": n})) for n in range(2)]

    outcomes = run_deliveries(
        [(first.id, first.lease_token), (second.id, second.lease_token)],
        worker_id="w",
        lease=LEASE,
    )

    assert outcomes == ["succeeded", "succeeded"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM scheduler_app_job WHERE id = %s", [first.id])
        (first_finished_by,) = cursor.fetchone()
    second_started_by = Job.objects.get(pk=second.id).result
    assert first_finished_by == second_started_by


@pytest.mark.postgres_only
def test_a_start_reads_only_the_rows_it_starts():
    """START finds its rows by primary key: not by the index of running jobs, which holds
    every job waiting in the broker."""
    schedule_many("tests.record", [{}] * 2000)
    with connection.cursor() as cursor:
        # Statistics read before the burst (as autoanalyze leaves them): nothing runs, so
        # the index of running jobs looks the cheapest way to every running row.
        cursor.execute("ANALYZE scheduler_app_job")
    waiting = backend().claim_jobs(
        worker="relay", queues=["default"], limit=1000, lease=LEASE, started=False
    )
    job = ClaimedJob.from_row(waiting[0])
    with bound_cursor() as cursor:
        cursor.execute(
            "EXPLAIN (FORMAT JSON) " + START,
            {
                "ids": [job.id],
                "tokens": [job.lease_token],
                "worker": "w",
                "frozen": None,
                "lease": LEASE,
            },
        )
        plan = json.dumps(cursor.fetchone()[0])
    assert "scheduler_job_leases" not in plan
    assert "Seq Scan" not in plan
    assert "scheduler_app_job_pkey" in plan


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
            with Renewer().holding(published, worker_id="relay", lease=dt.timedelta(seconds=0.6)):
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
    assert "lease renewal failed, will retry jobs=[%s] worker=relay" % job.pk in caplog.text


def waiting_on_a_lock() -> int:
    """Return how many sessions of the test database wait on a lock (read afresh: a
    transaction of its own would keep reading its first snapshot of the statistics)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def started_at(job: ClaimedJob):
    return Job.objects.get(pk=job.id).started_at


@pytest.mark.postgres_only
def test_starts_that_arrive_together_commit_in_one_statement(other_connection):
    """While one start waits on the database, the deliveries that arrive meanwhile are
    started together by the next statement (one statement_timestamp), and a second delivery
    of the same message in that group is refused."""
    jobs = [publish(schedule("tests.record", {"n": n})) for n in range(5)]
    first, rest = jobs[0], jobs[1:]
    deliveries = [*rest, rest[0]]  # rest[0]'s message delivered twice
    locker = other_connection()
    locker.execute("SELECT 1 FROM scheduler_app_job WHERE id = %s FOR UPDATE", [first.id])

    def start_one(job: ClaimedJob):
        started = start(job.id, job.lease_token, worker_id="celery-a", lease=LEASE)
        connection.close()
        return started

    with ThreadPoolExecutor(len(deliveries) + 1) as pool:
        try:
            leader = pool.submit(start_one, first)
            wait_until(waiting_on_a_lock, message="the first start to wait on the row lock")
            followers = [pool.submit(start_one, job) for job in deliveries]
            wait_until(
                lambda: len(execution._steps._waiting) == len(deliveries),
                message="the other deliveries to wait for the first start",
            )
        finally:
            locker.commit()
        assert leader.result(timeout=10)[0].id == first.id
        results = [f.result(timeout=10) for f in followers]

    assert [r is not None for r in results] == [True] * len(rest) + [False]
    assert {started_at(job) for job in rest} == {started_at(rest[0])}
    assert started_at(first) != started_at(rest[0])
    assert set(Job.objects.values_list("status", "worker_id", "attempts")) == {
        ("running", "celery-a", 1)
    }


@pytest.mark.postgres_only
def test_a_group_of_outcomes_the_database_refuses_is_recorded_one_by_one():
    """One unstorable outcome in a group costs the others nothing: they are recorded as
    they were, and the one at fault without its text."""
    jobs = [publish(schedule("tests.record", {"n": n})) for n in range(3)]
    started = [start(job.id, job.lease_token, worker_id="w", lease=LEASE)[0] for job in jobs]
    finishes = [hand_back(job, "handed back %s" % job.id) for job in started]
    finishes[1] = hand_back(started[1], "a NUL \x00 the database refuses")

    assert record_outcomes([(finish, "w") for finish in finishes]) == [True, True, True]

    errors = dict(Job.objects.values_list("pk", "last_error"))
    assert errors[started[0].id] == "handed back %s" % started[0].id
    assert errors[started[2].id] == "handed back %s" % started[2].id
    assert "\x00" not in errors[started[1].id]
    assert "could not be stored as it was" in errors[started[1].id]
    assert set(Job.objects.values_list("status", flat=True)) == {"pending"}


@pytest.mark.postgres_only
def test_one_renewer_renews_every_held_lease_and_lets_go_of_finished_jobs():
    short = dt.timedelta(seconds=0.6)
    held, released = [publish(schedule("tests.record", {"n": n})) for n in range(2)]
    leases_at_claim = dict(Job.objects.values_list("pk", "lease_expires_at"))
    renewer = Renewer()
    with renewer.holding(held, worker_id="relay", lease=short):
        with renewer.holding(released, worker_id="relay", lease=short):
            wait_until(
                lambda: all(
                    Job.objects.get(pk=job.id).lease_expires_at != leases_at_claim[job.id]
                    for job in (held, released)
                ),
                timeout=5,
                message="both leases renewed",
            )
        # A renewal computed before the release may still land: the first renewal of the held
        # job after it (same statement, or a later one) settles the released one's lease.
        wait_for_a_renewal(held)
        after_release = Job.objects.get(pk=released.id).lease_expires_at
        wait_for_a_renewal(held)
    assert Job.objects.get(pk=released.id).lease_expires_at == after_release


def wait_for_a_renewal(job: ClaimedJob) -> None:
    before = Job.objects.get(pk=job.id).lease_expires_at
    wait_until(
        lambda: Job.objects.get(pk=job.id).lease_expires_at > before,
        timeout=5,
        message="a renewal of job %s" % job.id,
    )
