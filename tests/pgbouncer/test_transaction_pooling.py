"""Workers, web calls and sends through PgBouncer in transaction-pooling mode: jobs drain
exactly once, schedules tick, a send completes, cancel and undo answer right; LISTEN goes to
a direct connection (SCHEDULER_APP['LISTEN_DATABASE'])."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db import connection
from django.db.models import Count

from scheduler_app.db import database_now
from scheduler_app.models import Job, Schedule, ScheduleOccurrence, SendBatch
from scheduler_app.scheduling import schedule, schedule_many
from tests.helpers import pickup_seconds, wait_for_status, wait_until
from tests.pgbouncer.conftest import (
    NO_PGBOUNCER,
    PGBOUNCER_URL,
    pooled_env,
    pooled_transactions,
    run_pooled,
)
from tests.sends_processes.conftest import (
    assert_completed_once,
    batch_status,
    calls_by_key,
    expected_keys,
    make_batch,
)
from tests.testapp.models import Run

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(not PGBOUNCER_URL, reason=NO_PGBOUNCER),
    pytest.mark.django_db(transaction=True),
]

Status = Job.Status


def all_finished() -> bool:
    return not Job.objects.unfinished().exists()


def wait_running(workers, predicate, *, timeout: float, message: str) -> None:
    """wait_until(predicate), failing at once (with their output) if a worker exits."""

    def done() -> bool:
        for worker in workers:
            assert worker.alive(), "a worker exited:\n%s" % worker.output
        return bool(predicate())

    wait_until(done, timeout=timeout, interval=0.1, message=message)


def stop(*workers) -> None:
    """SIGTERM ``workers``; each must exit 0."""
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [worker.wait_exit() for worker in workers] == [0] * len(workers), "\n\n".join(
        worker.output for worker in workers
    )


def worker_is_idle() -> bool:
    """Whether a worker LISTENs on a direct connection to the test database and none of the
    connections to it (PgBouncer's included) is busy."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        backends = cursor.fetchall()
    listening = ("idle", "LISTEN scheduler_app_jobs") in backends
    return listening and all(state == "idle" for state, _ in backends)


def test_jobs_drain_exactly_once_through_pgbouncer(start_worker):
    """Two workers behind PgBouncer, one listening on a direct connection and one polling,
    run every job exactly once; their transactions went through PgBouncer."""
    count = 2000
    job_ids = {job.pk for job in schedule_many("tests.record", [{}] * count)}
    before = pooled_transactions()
    workers = [
        start_worker("--worker-id", "pooled-listens", env=pooled_env(listen="direct")),
        start_worker("--worker-id", "pooled-polls", env=pooled_env(listen="")),
    ]
    try:
        wait_running(workers, all_finished, timeout=90, message="every job to finish")
    finally:
        stop(*workers)

    assert Job.objects.filter(status=Status.SUCCEEDED, attempts=1).count() == count
    assert set(Run.objects.values_list("job_id", flat=True)) == job_ids
    assert not Run.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).exists()
    # A Run row per job, each in a transaction of its own, and the claims and finishes.
    assert pooled_transactions() - before > count
    assert set(Run.objects.values_list("pid", flat=True)) <= {w.pid for w in workers}


def test_an_idle_worker_behind_pgbouncer_wakes_on_notify(start_worker):
    """LISTEN on the direct connection of LISTEN_DATABASE: jobs scheduled while the worker
    sleeps start at once, not at a poll. It also wakes once a second to read the kill
    switches, so one fast pickup could be luck; five in a row are not (a LISTEN through
    PgBouncer hears nothing: the server session it ran on serves other clients)."""
    probe = schedule("tests.record", {})
    worker = start_worker("--poll-interval", "30", env=pooled_env(listen="direct"))
    wait_for_status(probe, Status.SUCCEEDED)
    pickups = pickup_seconds(worker_is_idle)
    stop(worker)
    assert max(pickups) < 0.25, pickups


def test_a_schedule_ticks_through_pgbouncer(start_worker):
    """Two schedulers behind PgBouncer enqueue each occurrence of a schedule once (the
    transaction-level advisory lock and the occurrence rows), and each runs once."""
    due = database_now() - dt.timedelta(seconds=1)
    Schedule.objects.create(
        name="pooled-every-second",
        task_name="tests.record",
        kind=Schedule.Kind.FIXED_RATE,
        interval=dt.timedelta(seconds=1),
        start_at=due,
        next_run_at=due,
    )
    workers = [start_worker(env=pooled_env()), start_worker(env=pooled_env())]
    try:
        wait_running(
            workers,
            lambda: Run.objects.count() >= 3,
            timeout=30,
            message="three occurrences to run",
        )
    finally:
        stop(*workers)
    wait_until(all_finished, message="the last occurrence to finish")

    occurrences = list(ScheduleOccurrence.objects.order_by("occurrence_at"))
    assert [o.occurrence_at for o in occurrences] == [
        due + dt.timedelta(seconds=n) for n in range(len(occurrences))
    ]
    # One that came while the last run was still pending is skipped (the overlap policy).
    enqueued = [o.job_id for o in occurrences if o.outcome == ScheduleOccurrence.Outcome.ENQUEUED]
    assert len(enqueued) >= 3
    assert None not in enqueued
    assert len(set(enqueued)) == len(enqueued) == Job.objects.count()
    assert sorted(Run.objects.values_list("job_id", flat=True)) == sorted(enqueued)


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "async-commit"])
def test_a_send_completes_through_pgbouncer(start_worker, synchronous):
    """A batch sent by a worker behind PgBouncer completes with one call and one sent
    marker per recipient, whether its markers wait for the WAL flush or not (SET LOCAL)."""
    count = 300
    env = pooled_env(SCHEDULER_SEND_MARKER_SYNCHRONOUS_COMMIT=str(synchronous).lower())
    worker = start_worker("--no-scheduler", env=env)
    batch = make_batch(count)
    try:
        wait_running(
            [worker],
            lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
            timeout=60,
            message="the batch to complete",
        )
    finally:
        stop(worker)

    assert_completed_once(batch, count)
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    assert max(calls.values()) == 1


CANCEL_AND_UNDO = """
from scheduler_app.cancellation import cancel, undo
from scheduler_app.sends.batches import undo_batch
print("cancel pending", cancel({pending}))
print("cancel again", cancel({pending}))
print("cancel running", cancel({running}))
print("undo inside the window", undo({undoable})[0])
print("undo running", undo({running})[0])
print("undo send", undo_batch({batch}).cancelled)
"""


def test_cancel_and_undo_through_pgbouncer_answer_right(start_worker, tmp_path):
    """cancel(), undo() and undo_batch() in a process behind PgBouncer report what they did,
    against a job a worker behind PgBouncer is running."""
    flag = tmp_path / "release"
    running = schedule("tests.block_until_flag", {"flag": str(flag)})
    worker = start_worker("--concurrency", "1", "--no-scheduler", env=pooled_env())
    wait_until(lambda: Run.objects.filter(job_id=running.pk).exists(), message="the job to run")
    pending = schedule("tests.record", {}, delay=3600)
    undoable = schedule("tests.record", {}, undo_window=3600)
    batch = make_batch(10)  # its lanes wait: the worker's one handler thread is busy

    output = run_pooled(
        CANCEL_AND_UNDO.format(
            pending=pending.pk, running=running.pk, undoable=undoable.pk, batch=batch.pk
        )
    )
    flag.touch()
    wait_for_status(running, Status.SUCCEEDED)
    stop(worker)

    assert output.splitlines() == [
        "cancel pending cancelled",
        "cancel again already_cancelled",
        "cancel running too_late",
        "undo inside the window cancelled",
        "undo running too_late",
        "undo send True",
    ]
    assert Job.objects.get(pk=undoable.pk).status == Status.CANCELLED
    assert batch_status(batch) == SendBatch.Status.CANCELLED
