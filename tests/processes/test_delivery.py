"""Every job runs once per claim: across workers, SIGKILL, SIGSTOP and lost connections."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from scheduler_app.models import Job, JobAttempt
from scheduler_app.scheduling import schedule, schedule_many
from tests.helpers import wait_until
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
Outcome = JobAttempt.Outcome


def all_finished() -> bool:
    return not Job.objects.unfinished().exists()


def expire_lease(job: Job) -> None:
    """Stage lease expiry by moving the row's lease into the past (not by waiting)."""
    updated = Job.objects.filter(pk=job.pk, status=Status.RUNNING).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert updated == 1


def test_exactly_once(start_worker):
    """Three workers draining the same jobs run every job exactly once, and every job succeeds."""
    count = 5000
    job_ids = {job.pk for job in schedule_many("tests.record", [{}] * count)}
    workers = [start_worker("--worker-id", "drain-%s" % n) for n in range(3)]
    try:
        wait_until(all_finished, timeout=90, interval=0.1, message="every job to finish")
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
    assert [worker.wait_exit() for worker in workers] == [0, 0, 0]

    assert Job.objects.filter(status=Status.SUCCEEDED, attempts=1).count() == count
    assert Run.objects.count() == count
    assert set(Run.objects.values_list("job_id", flat=True)) == job_ids
    assert not Run.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).exists()
    # First attempts that succeeded are told by their job rows: no history rows.
    assert not JobAttempt.objects.exists()
    pids = set(Run.objects.values_list("pid", flat=True))
    assert pids <= {worker.pid for worker in workers}
    assert len(pids) >= 2, "the workers did not share the work: %s" % pids


def test_sigkill_mid_job_runs_again_after_lease_expiry(start_worker, tmp_path):
    """A worker killed mid-job loses nothing: after lease expiry the job runs again, succeeds."""
    flag = tmp_path / "release"
    job = schedule("tests.block_until_flag", {"flag": str(flag)})
    old = start_worker("--worker-id", "doomed-worker")
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="the job to start")

    old.signal(signal.SIGKILL)
    assert old.wait_exit() == -signal.SIGKILL
    job.refresh_from_db()
    assert (job.status, job.worker_id, job.attempts) == (Status.RUNNING, "doomed-worker", 1)
    flag.touch()
    expire_lease(job)

    new = start_worker("--worker-id", "rescuer")
    wait_until(all_finished, message="the job to finish again")
    assert new.alive()

    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id) == (Status.SUCCEEDED, 2, "")
    assert list(Run.objects.filter(job_id=job.pk).values_list("attempt", "pid")) == [
        (1, old.pid),
        (2, new.pid),
    ]
    history = list(job.recorded_attempts.values_list("attempt", "outcome", "worker_id", "error"))
    assert [row[:3] for row in history] == [
        (1, Outcome.LEASE_EXPIRED, "doomed-worker"),
        (2, Outcome.SUCCEEDED, "rescuer"),
    ]
    error = history[0][3]
    assert error.startswith("Lease expired at ")
    assert error.endswith(
        ": worker doomed-worker stopped renewing it during attempt 1 of 3; it will run again."
    )


def test_stale_worker_completion_is_discarded(start_worker, tmp_path):
    """A worker that lost its lease (frozen by SIGSTOP) finishes later and changes nothing."""
    flag = tmp_path / "release"
    job = schedule("tests.block_until_flag", {"flag": str(flag)})
    a = start_worker("--worker-id", "worker-a")
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="A to start the job")

    a.pause()
    try:
        expire_lease(job)
        b = start_worker("--worker-id", "worker-b")
        wait_until(
            lambda: Run.objects.filter(job_id=job.pk, attempt=2).exists(),
            message="B to start the job again",
        )
        flag.touch()
        wait_until(
            lambda: Job.objects.filter(pk=job.pk, status=Status.SUCCEEDED).exists(),
            message="B to finish the job",
        )
        job.refresh_from_db()
        as_b_left_it = (
            job.status,
            job.attempts,
            job.lease_token,
            job.worker_id,
            job.finished_at,
            job.last_error,
        )
        assert as_b_left_it[:4] == (Status.SUCCEEDED, 2, 2, "")
    finally:
        a.resume()

    # A's handler sees the flag, finishes, and A tries to record its (stale) completion.
    a.wait_for_output(
        "stale completion discarded job=%s task=tests.block_until_flag attempt=1" % job.pk
    )
    assert list(Run.objects.filter(job_id=job.pk).values_list("attempt", "pid")) == [
        (1, a.pid),
        (2, b.pid),
    ]
    assert not Run.objects.filter(job_id=job.pk, finished_at=None).exists()
    job.refresh_from_db()
    assert (
        job.status,
        job.attempts,
        job.lease_token,
        job.worker_id,
        job.finished_at,
        job.last_error,
    ) == as_b_left_it
    assert list(job.recorded_attempts.values_list("attempt", "outcome", "worker_id")) == [
        (1, Outcome.LEASE_EXPIRED, "worker-a"),
        (2, Outcome.SUCCEEDED, "worker-b"),
    ]
    assert a.alive() and b.alive()


@pytest.mark.postgres_only
def test_connection_loss(start_worker):
    """A worker whose connections are killed mid-run reconnects and finishes every job."""
    count = 2000
    schedule_many("tests.record", [{}] * count)
    worker = start_worker("--lease", "4", "--worker-id", "unlucky")
    for threshold in (count // 4, count // 2):
        wait_until(lambda t=threshold: Run.objects.count() >= t, message="%s runs" % threshold)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchall(), "no worker connection to terminate"
    wait_until(all_finished, timeout=60, interval=0.1, message="every job to finish")

    assert worker.alive(), worker.output
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == count
    assert set(Run.objects.values_list("job_id", flat=True)) == set(
        Job.objects.values_list("pk", flat=True)
    )
    assert "database error, will retry worker=unlucky" in worker.output
    assert "database reachable again worker=unlucky" in worker.output
