"""SIGTERM stops claiming, lets running jobs finish within the timeout, hands back the rest."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from scheduler_app.models import Job, JobAttempt
from scheduler_app.scheduling import schedule, schedule_many
from tests.helpers import database_url, wait_until
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

Status = Job.Status
STOPPING = "stopping: no new claims, finishing running jobs signal=SIGTERM"


def start_blocking_job(start_worker, flag, *worker_args):
    """Schedule a job that blocks until ``flag`` exists, start a worker, wait until it runs it."""
    job = schedule("tests.block_until_flag", {"flag": str(flag)})
    worker = start_worker(*worker_args)
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="the job to start")
    return job, worker


def test_sigterm_lets_running_job_finish_and_claims_nothing_after(start_worker, tmp_path):
    """After SIGTERM the running job finishes and succeeds; due jobs stay pending, unclaimed."""
    flag = tmp_path / "release"
    job, worker = start_blocking_job(
        start_worker, flag, "--concurrency", "1", "--shutdown-timeout", "10"
    )
    # Due now, but the worker's only slot is taken until after the signal.
    waiting = [j.pk for j in schedule_many("tests.record", [{}] * 3)]

    worker.signal(signal.SIGTERM)
    worker.wait_for_output(STOPPING)
    flag.touch()
    assert worker.wait_exit() == 0, worker.output

    job.refresh_from_db()
    assert (job.status, job.attempts) == (Status.SUCCEEDED, 1)
    assert Run.objects.get(job_id=job.pk).finished_at is not None
    assert (
        list(Job.objects.filter(pk__in=waiting).values_list("status", "attempts", "worker_id"))
        == [(Status.PENDING, 0, "")] * 3
    )
    assert not Run.objects.filter(job_id__in=waiting).exists()
    assert not JobAttempt.objects.filter(job_id__in=waiting).exists()
    assert "worker stopped worker=" in worker.output


def test_sigterm_gives_back_the_attempt_of_a_job_still_running(start_worker, tmp_path):
    """A job still running at the shutdown timeout keeps its row running (its handler runs
    until the process exits) under a lease no longer renewed, its attempt given back."""
    job, worker = start_blocking_job(
        start_worker, tmp_path / "never", "--shutdown-timeout", "1", "--worker-id", "w-handback"
    )
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=15) == 0, worker.output
    assert time.monotonic() - signalled < 10

    reason = (
        "Worker w-handback stopped; the job did not finish within the 1.0s shutdown timeout. "
        "Its handler was still running, so the job stays running until its lease lapses, then "
        "runs again without using an attempt."
    )
    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id, job.last_error) == (
        Status.RUNNING,
        0,
        "w-handback",
        reason,
    )
    assert job.lease_expires_at is not None
    assert not job.recorded_attempts.exists()


def test_a_handler_running_at_the_shutdown_timeout_keeps_its_job_from_everyone_else(
    start_worker, tmp_path
):
    """Two workers, a 5 s handler, SIGTERM with --shutdown-timeout 1 to the one running it:
    no cancel wins while the handler runs, and the other worker starts the job only after
    the first process exited (the two runs never overlap), its only attempt still unused."""
    options = ("--concurrency", "1", "--shutdown-timeout", "1", "--lease", "2")
    workers = [start_worker(*options, "--poll-interval", "0.05") for _ in range(2)]
    for worker in workers:
        worker.wait_for_output("worker started worker=")
    log = tmp_path / "not-too-late"
    job = schedule("tests.cancels_itself_while_running", {"seconds": 5, "log": str(log)})
    first_run = wait_until(lambda: Run.objects.filter(job_id=job.pk).first(), message="a run")
    first, second = sorted(workers, key=lambda worker: worker.pid != first_run.pid)

    first.signal(signal.SIGTERM)
    assert first.wait_exit(timeout=15) == 0, first.output
    exited = timezone.now()
    job.refresh_from_db()
    assert job.status != Status.CANCELLED, "a cancel won while the handler ran"
    assert not log.exists(), log.read_text()

    wait_until(lambda: Run.objects.filter(job_id=job.pk).count() == 2, message="a second run")
    first_run, second_run = Run.objects.filter(job_id=job.pk)
    assert (first_run.pid, first_run.finished_at, second_run.pid) == (first.pid, None, second.pid)
    assert second_run.started_at > exited
    job.refresh_from_db()
    assert (job.status, job.attempts) == (Status.RUNNING, 1)
    assert not log.exists(), log.read_text()


def test_second_sigterm_exits_at_once_with_status_1(start_worker, tmp_path):
    """A second SIGTERM during a graceful stop exits at once, non-zero; the lease covers the job."""
    job, worker = start_blocking_job(
        start_worker, tmp_path / "never", "--shutdown-timeout", "60", "--worker-id", "w-forced"
    )
    worker.signal(signal.SIGTERM)
    worker.wait_for_output(STOPPING)
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=10) == 1, worker.output
    assert time.monotonic() - signalled < 5
    assert "second signal, exiting now signal=SIGTERM" in worker.output

    job.refresh_from_db()
    assert (job.status, job.attempts, job.worker_id) == (Status.RUNNING, 1, "w-forced")
    assert job.lease_expires_at is not None


@pytest.mark.postgres_only
def test_a_hand_back_the_database_was_away_for_makes_the_worker_exit_non_zero(
    start_worker, tmp_path
):
    """SIGTERM while the database is away: the job still running at the shutdown timeout
    cannot be handed back (its lease will expire and its rescue charges an attempt). The
    worker says so and exits non-zero, not as after a clean stop."""
    job = schedule("tests.block_until_flag", {"flag": str(tmp_path / "never"), "max_wait": 120})
    worker = start_worker(
        "--concurrency", "1", "--shutdown-timeout", "1",
        env={"SCHEDULER_DB_UNAVAILABLE_TIMEOUT": "600"},
    )  # fmt: skip
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="the job to start")
    name = connection.settings_dict["NAME"]
    base = database_url().rsplit("/", 1)[0].replace("postgres://", "postgresql://")
    with psycopg.connect(base + "/postgres", autocommit=True) as admin:
        admin.execute('ALTER DATABASE "%s" WITH ALLOW_CONNECTIONS false' % name)
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() AND pid <> %s",
                [name, connection.connection.info.backend_pid],
            )
            worker.signal(signal.SIGTERM)
            code = worker.wait_exit(timeout=60)
        finally:
            admin.execute('ALTER DATABASE "%s" WITH ALLOW_CONNECTIONS true' % name)

    assert code == 1, worker.output
    assert (
        "CommandError: could not record 1 outcomes before exiting (the database is away); "
        "their leases will expire and the jobs run again"
    ) in worker.output
    job.refresh_from_db()
    assert job.status == Status.RUNNING  # nothing was recorded
