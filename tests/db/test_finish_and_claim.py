"""finish_and_claim(): a worker records one batch's outcomes and claims the next batch in
one round trip and one transaction (issue #14, decision 3)."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.db import connection
from psycopg import pq

from scheduler_app import clock, schedule_many
from scheduler_app.db import backend
from scheduler_app.models import Job
from scheduler_app.worker import leases
from scheduler_app.worker.execution import ClaimedJob, Finish

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
LEASE = dt.timedelta(seconds=30)


def claim(limit: int) -> list[ClaimedJob]:
    rows = backend().claim_jobs(worker="w", queues=["default"], limit=limit, lease=LEASE)
    return [ClaimedJob.from_row(row) for row in rows]


def succeeded(job: ClaimedJob) -> tuple:
    return Finish(
        job=job, status="succeeded", outcome="succeeded", finished_at=clock.now()
    ).as_row()


def retried(job: ClaimedJob, *, run_at: dt.datetime, error: str) -> Finish:
    """The outcome of an attempt that failed and is to run again at ``run_at``."""
    return Finish(
        job=job,
        status="pending",
        outcome="retried",
        finished_at=clock.now(),
        run_at=run_at,
        error=error,
    )


def claim_arguments(limit: int) -> dict:
    return {
        "worker": "w",
        "queues": ["default"],
        "limit": limit,
        "lease": LEASE,
    }


def test_finish_and_claim_records_outcomes_and_claims_the_next_jobs():
    schedule_many("tests.record", [{}] * 4)
    first = claim(2)

    accepted, rows = backend().finish_and_claim(
        [succeeded(job) for job in first], **claim_arguments(10)
    )

    assert accepted == {job.fence for job in first}
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == 2
    assert sorted(row[0] for row in rows) == sorted(
        Job.objects.filter(status=Status.RUNNING).values_list("id", flat=True)
    )
    assert len(rows) == 2


def test_stale_outcomes_are_refused_and_the_claim_still_happens():
    schedule_many("tests.record", [{}] * 2)
    [job] = claim(1)
    Job.objects.filter(pk=job.id).update(lease_token=job.lease_token + 1)  # rescued meanwhile

    accepted, rows = backend().finish_and_claim([succeeded(job)], **claim_arguments(10))

    assert accepted == set()
    assert Job.objects.get(pk=job.id).status == Status.RUNNING
    assert len(rows) == 1


def rescued_and_claimed_again(job: ClaimedJob) -> ClaimedJob:
    """Let ``job``'s lease expire, rescue it, and claim it again: its next attempt."""
    Job.objects.filter(pk=job.id).update(lease_expires_at=clock.now() - dt.timedelta(seconds=1))
    assert leases.rescue_expired("rescuer") == 1
    [again] = claim(1)
    assert (again.id, again.lease_token) == (job.id, job.lease_token + 1)
    return again


@pytest.mark.parametrize("together", [False, True], ids=["finish_jobs", "finish_and_claim"])
def test_a_stale_outcome_in_the_batch_of_its_jobs_current_one_leaves_no_trace(together):
    """A worker can hold a stale attempt's outcome and the next attempt's of the same job in
    one batch (a flush that met a lost connection keeps both). The lease token refuses the
    stale one: it writes no history row, and only the current attempt is reported accepted."""
    schedule_many("tests.record", [{}])
    [stale] = claim(1)
    current = rescued_and_claimed_again(stale)
    rows = [
        retried(stale, run_at=clock.now() + dt.timedelta(minutes=1), error="stale").as_row(),
        succeeded(current),
    ]

    if together:
        accepted, _ = backend().finish_and_claim(rows, **claim_arguments(1))
    else:
        accepted = backend().finish_jobs(rows, worker="w")

    stored = Job.objects.get(pk=stale.id)
    assert (stored.status, stored.attempts, stored.last_error) == (Status.SUCCEEDED, 2, "")
    assert list(stored.recorded_attempts.order_by("id").values_list("attempt", "outcome")) == [
        (1, "lease_expired"),
        (2, "succeeded"),
    ]
    assert accepted == {current.fence}


@pytest.mark.postgres_only
def test_finish_and_claim_commit_together_in_one_transaction():
    schedule_many("tests.record", [{}] * 2)
    [done] = claim(1)

    accepted, [row] = backend().finish_and_claim([succeeded(done)], **claim_arguments(1))

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, xmin::text FROM scheduler_app_job WHERE id IN (%s, %s)", [done.id, row[0]]
        )
        xmins = dict(cursor.fetchall())
    assert accepted == {done.fence}
    assert xmins[done.id] == xmins[row[0]]  # written by the same transaction


@pytest.mark.postgres_only
def test_finish_and_claim_wait_for_the_server_once(tmp_path):
    """One round trip per turn: the statements and the sync that commits them go out
    together, then the results come back. Reading the results inside psycopg's pipeline
    block waited for them first, then once more for the commit at the block's end."""
    schedule_many("tests.record", [{}] * 4)
    done = claim(2)
    raw = connection.connection
    protocol = tmp_path / "protocol.txt"
    with protocol.open("w") as trace:
        raw.pgconn.trace(trace.fileno())
        raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            accepted, rows = backend().finish_and_claim(
                [succeeded(job) for job in done], **claim_arguments(2)
            )
        finally:
            raw.pgconn.untrace()

    assert (accepted, len(rows)) == ({job.fence for job in done}, 2)
    # Each message is a line that starts with who sent it: F (us) or B (the server).
    lines = protocol.read_text().splitlines()
    senders = [line[0] for line in lines if line[:2] in ("F\t", "B\t")]
    waits = sum(1 for pair in itertools.pairwise(senders) if pair == ("F", "B"))
    assert waits == 1, senders


@pytest.mark.postgres_only
def test_a_failing_claim_leaves_the_outcomes_unrecorded():
    schedule_many("tests.record", [{}] * 2)
    [done] = claim(1)
    arguments = {**claim_arguments(1), "limit": -1}  # LIMIT -1: an error in the claim

    with pytest.raises(Exception, match="LIMIT must not be negative"):
        backend().finish_and_claim([succeeded(done)], **arguments)

    assert Job.objects.get(pk=done.id).status == Status.RUNNING


def test_a_claimed_row_carries_the_jobs_times_as_the_orm_reads_them(database_time_zone):
    """The claim reads timestamps with psycopg's own loader where it gives what Django's
    gives (see native_timestamps): the same instants, to the microsecond, with the same
    tzinfo, whatever the database's time zone."""
    run_at = clock.now().replace(microsecond=123456) - dt.timedelta(minutes=3)
    [job] = schedule_many("tests.record", [{}], at=run_at)
    stored = Job.objects.get(pk=job.pk)

    [claimed] = claim(1)

    assert (claimed.scheduled_for, claimed.due_at) == (stored.scheduled_for, stored.run_at)
    assert claimed.due_at == run_at
    assert claimed.due_at.tzinfo is stored.run_at.tzinfo is connection.timezone
    assert claimed.scheduled_for.tzinfo is stored.scheduled_for.tzinfo
    assert claimed.retry_later_deadline is None


def test_outcomes_with_and_without_an_attempt_row_are_recorded_whole_in_one_batch():
    """FINISH's parameters leave out what a row does not need (its None values, and the
    history columns of a first success): both kinds together still record every column."""
    schedule_many("tests.record", [{}] * 2)
    first, second = claim(2)
    retry = retried(second, run_at=clock.now() + dt.timedelta(minutes=5), error="boom")

    accepted, _ = backend().finish_and_claim(
        [succeeded(first), retry.as_row()], **claim_arguments(0)
    )

    assert accepted == {first.fence, second.fence}
    done = Job.objects.get(pk=first.id)
    assert (done.status, done.worker_id, done.result, done.last_error) == (
        Status.SUCCEEDED,
        "w",
        None,
        "",
    )
    assert not done.recorded_attempts.exists()
    again = Job.objects.get(pk=second.id)
    assert (again.status, again.run_at, again.last_error) == (
        Status.PENDING,
        retry.run_at,
        "boom",
    )
    [row] = again.recorded_attempts.all()
    assert (row.attempt, row.task_name, row.worker_id, row.outcome, row.error) == (
        1,
        "tests.record",
        "w",
        "retried",
        "boom",
    )
    assert (row.due_at, row.started_at, row.finished_at) == (
        second.due_at,
        second.started_at,
        retry.finished_at,
    )


def test_outcomes_are_reported_when_there_is_nothing_left_to_claim():
    """A turn that records outcomes and finds nothing due still reports what it recorded."""
    schedule_many("tests.record", [{}] * 2)
    jobs = claim(2)

    accepted, rows = backend().finish_and_claim(
        [succeeded(job) for job in jobs], **claim_arguments(10)
    )

    assert (accepted, rows) == ({job.fence for job in jobs}, [])
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == 2


def test_a_job_a_retry_makes_due_now_can_be_claimed_again_in_the_same_turn():
    """The claim sees what the finish wrote in the same transaction: a job put back to
    pending and due now can be taken again at once. (Finish and claim as one statement
    would not: its parts share one snapshot.)"""
    schedule_many("tests.record", [{}] * 2)
    first, second = claim(2)
    now_due = retried(second, run_at=clock.now() - dt.timedelta(seconds=1), error="try again now")

    accepted, rows = backend().finish_and_claim(
        [succeeded(first), now_due.as_row()], **claim_arguments(10)
    )

    assert accepted == {first.fence, second.fence}
    assert [row[0] for row in rows] == [second.id]
    assert Job.objects.get(pk=second.id).status == Status.RUNNING
