"""Start, run and record a published job inside a Celery worker.

The same path as runworker's: ``execute()`` runs the handler (registry,
retries, Retry-After, payload versions), the outcome is recorded by
``record_one`` fenced by the lease token, and the task's timeout fails the
attempt when the handler returns. Only the start differs: one guarded
UPDATE takes the job over from the relay and consumes its token.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterator

from django.db import DatabaseError, close_old_connections, connection

from scheduler_app.controls import CONTROL_REFRESH, PausedScopes, paused_scopes
from scheduler_app.db import backend, write_across_reconnects
from scheduler_app.exceptions import UnknownTask
from scheduler_app.models import Job
from scheduler_app.registry import get_task
from scheduler_app.signals import job_failed
from scheduler_app.worker import leases
from scheduler_app.worker.execution import (
    ClaimedJob,
    Finish,
    execute,
    hand_back,
    timeout_failure,
)
from scheduler_app.worker.outcomes import CONNECTION_ERRORS, record_one

logger = logging.getLogger("scheduler_app.celery")


def start(
    job_id: int, lease_token: int, *, worker_id: str, lease: dt.timedelta
) -> tuple[ClaimedJob, str] | None:
    """Take a published job over from the relay; return it and its queue, or None.

    One guarded UPDATE moves the token on (published -> started): of two
    deliveries of one message, only the first matches. None: the token is
    spent (a duplicate delivery), or the job was handed back or rescued.
    """
    row = backend().start_job(job_id=job_id, token=lease_token, worker=worker_id, lease=lease)
    if row is None:
        return None
    return ClaimedJob.from_row(row[:-1]), row[-1]


def run_published(job_id: int, lease_token: int, *, worker_id: str, lease: dt.timedelta) -> str:
    """Start job ``job_id`` under ``lease_token``, run it, record the outcome; return
    "refused", "stale", or the attempt's outcome ("succeeded", "retried", "interrupted" for
    a hand-back under a kill switch, ...)."""
    try:
        started = start(job_id, lease_token, worker_id=worker_id, lease=lease)
        if started is None:
            logger.info(
                "delivery refused, its lease token is spent (a duplicate, or the job was "
                "handed back or rescued) job=%s token=%s worker=%s",
                job_id,
                lease_token,
                worker_id,
            )
            return "refused"
        job, queue = started
        if current_pauses().covers(queue=queue, task_name=job.task_name):
            finish = hand_back(
                job, "A kill switch covers it; handed back by %s without running." % worker_id
            )
        else:
            with renewing(job, worker_id=worker_id, lease=lease):
                finish = run(job)
        # The lease no longer renews: record within half of it, across a lost connection.
        return record(finish, worker_id=worker_id, within=lease / 2)
    finally:
        close_old_connections()


_pauses: tuple[float, PausedScopes] | None = None  # (time.monotonic() read, scopes)


def current_pauses() -> PausedScopes:
    """Return the kill switches, read at most every CONTROL_REFRESH seconds per process.

    The same delay as runworker's, which reads them on that cadence too.
    """
    global _pauses
    if _pauses is None or time.monotonic() - _pauses[0] > CONTROL_REFRESH:
        _pauses = (time.monotonic(), paused_scopes())
    return _pauses[1]


def run(job: ClaimedJob) -> Finish:
    """Run the handler; an attempt that outlived its task's timeout fails as a timeout."""
    began = time.monotonic()
    finish = execute(job)
    try:
        timeout = get_task(job.task_name).timeout
    except UnknownTask:
        return finish
    if timeout is not None and time.monotonic() - began > timeout.total_seconds():
        return timeout_failure(job)
    return finish


def record(finish: Finish, *, worker_id: str, within: dt.timedelta) -> str:
    """Record ``finish`` fenced by its token, reconnecting for up to ``within`` if the
    database connection is lost (as runworker keeps an outcome for its next turn); send
    job_failed as runworker does."""
    job = finish.job
    accepted = write_across_reconnects(
        lambda: record_one(finish, worker=worker_id),
        seconds=within.total_seconds(),
        retry_on=CONNECTION_ERRORS,
    )
    if job.fence not in accepted:
        logger.warning(
            "stale completion discarded job=%s task=%s attempt=%s: lease lost, the job was "
            "rescued or claimed again",
            job.id,
            job.task_name,
            job.attempt,
        )
        return "stale"
    if finish.status == Job.Status.FAILED:
        job_failed.send(sender=Job, job_id=job.id, task_name=job.task_name, error=finish.error)
    return finish.outcome


@contextlib.contextmanager
def renewing(job: ClaimedJob, *, worker_id: str, lease: dt.timedelta) -> Iterator[None]:
    """Renew ``job``'s lease every third of it, on a thread of its own, while the block runs.

    The handler keeps its lease however long it runs, so a retry never runs
    beside it (as with runworker, whose threads cannot be interrupted either).
    """
    done = threading.Event()

    def renew_forever() -> None:
        try:
            while not done.wait(lease.total_seconds() / 3):
                try:
                    leases.renew(worker_id, [job.id], lease)
                except DatabaseError as exc:
                    # Not only a lost connection: a failover's old primary, now read-only,
                    # refuses the write on a live one. A new connection may reach the new
                    # primary; the thread must live on, or the lease lapses mid-run.
                    logger.warning(
                        "lease renewal failed, will retry job=%s worker=%s error=%s",
                        job.id,
                        worker_id,
                        exc,
                    )
                    connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=renew_forever, name="scheduler-lease-%s" % job.id)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
