"""Tasks the test suite schedules; worker subprocesses import them too."""

import datetime as dt
import os
import time
from pathlib import Path

from django.utils import timezone

from scheduler_app import RetryLater, RetryPolicy, task
from tests.testapp.models import Run

#: Retries within a fraction of a second, so tests that provoke failures stay fast.
FAST_RETRY = RetryPolicy(base=dt.timedelta(milliseconds=50), cap=dt.timedelta(milliseconds=500))


@task(name="tests.noop")
def noop(job):
    return None


@task(name="tests.versioned", payload_versions=(1, 2))
def versioned(job):
    return job.payload_version


@task(name="tests.record", max_attempts=5, retry=FAST_RETRY)
def record(job):
    """Record this run in a Run row: how tests see what ran, how often and in which process."""
    Run.objects.create(job_id=job.job_id, attempt=job.attempt, pid=os.getpid())


@task(name="tests.row_version")
def row_version(job):
    """Return the transaction id that last wrote this job's row (PostgreSQL's xmin): while
    the handler runs, the transaction that started it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM scheduler_app_job WHERE id = %s", [job.job_id])
        return cursor.fetchone()[0]


@task(name="tests.block_until_flag")
def block_until_flag(job):
    """Record this run, then wait until the file payload['flag'] exists; then mark it finished.

    Gives up with TimeoutError after payload['max_wait'] seconds (default 60) so
    that a forgotten flag cannot keep a worker thread busy forever.
    """
    run = Run.objects.create(job_id=job.job_id, attempt=job.attempt, pid=os.getpid())
    flag = Path(job.payload["flag"])
    deadline = time.monotonic() + job.payload.get("max_wait", 60)
    while not flag.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("flag %s did not appear" % flag)
        time.sleep(0.02)
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())


@task(name="tests.cancels_itself_while_running", max_attempts=1)
def cancels_itself_while_running(job):
    """Record this run, then for payload['seconds'] try to cancel this very job, appending
    to the file payload['log'] every outcome other than too_late: while a handler runs,
    its job must never be cancellable, nor be anyone else's to claim."""
    from scheduler_app.cancellation import CancelOutcome, cancel

    run = Run.objects.create(job_id=job.job_id, attempt=job.attempt, pid=os.getpid())
    deadline = time.monotonic() + job.payload["seconds"]
    while time.monotonic() < deadline:
        outcome = cancel(job.job_id)
        if outcome != CancelOutcome.TOO_LATE:
            with open(job.payload["log"], "a") as log:
                log.write("%s %s\n" % (os.getpid(), outcome))
        time.sleep(0.01)  # the handler's work between two looks
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())


# The test audience and providers register on import, like a project's tasks.py would.
from tests.testapp import sending  # noqa: E402,F401


@task(name="tests.loses_its_connection", max_attempts=1)
def loses_its_connection(job):
    """Record this run, then have the database end this process's connection (a failover,
    a restart, an idle timeout) before returning: the outcome is written on a new one."""
    import psycopg
    from django.db import connection

    Run.objects.create(job_id=job.job_id, attempt=job.attempt, pid=os.getpid())
    pid = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    return "done"


@task(name="tests.record_then_retry_later")
def record_then_retry_later(job):
    """Record this run, then ask to run again ``payload["delay"]`` seconds later."""
    record(job)
    raise RetryLater(job.payload["delay"])
