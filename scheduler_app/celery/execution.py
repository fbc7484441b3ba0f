"""Start, run and record a published job inside a Celery worker.

The same path as runworker's: ``execute()`` runs the handler (registry,
retries, Retry-After, payload versions), the outcome is recorded fenced by
the lease token, and the task's timeout fails the attempt when the handler
returns. Only the start differs: a guarded UPDATE takes the job over from
the relay and consumes its token. The tasks a worker process runs at once
share their statements: starts that arrive together commit together (each
before its handler runs), outcomes are recorded in groups, and one thread
renews every lease held (see grouping and renewals).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence

from django.db import DatabaseError, close_old_connections

from scheduler_app.celery.grouping import GroupCommit
from scheduler_app.celery.renewals import renewer
from scheduler_app.controls import CONTROL_REFRESH, PausedScopes, paused_scopes
from scheduler_app.db import backend, write_across_reconnects
from scheduler_app.exceptions import UnknownTask
from scheduler_app.models import Job
from scheduler_app.registry import get_task
from scheduler_app.signals import job_failed
from scheduler_app.worker.execution import (
    ClaimedJob,
    Finish,
    execute,
    hand_back,
    timeout_failure,
)
from scheduler_app.worker.outcomes import CONNECTION_ERRORS, finish_jobs, record_one

logger = logging.getLogger("scheduler_app.celery")


Delivery = tuple[int, int, str, dt.timedelta]  # (job id, lease token, worker id, lease)


def start_deliveries(deliveries: Sequence[Delivery]) -> list[tuple[ClaimedJob, str] | None]:
    """Take published jobs over from the relay; return each one's job and queue, or None.

    A guarded UPDATE moves each token on (published -> started): of two
    deliveries of one message, only the first matches, even in one group.
    None: the token is spent (a duplicate delivery), or the job was handed
    back or rescued.
    """
    started: dict[tuple[int, int], tuple[ClaimedJob, str]] = {}
    by_start: dict[tuple[str, dt.timedelta], list[tuple[int, int]]] = {}
    for job_id, token, worker_id, lease in deliveries:
        by_start.setdefault((worker_id, lease), []).append((job_id, token))
    for (worker_id, lease), pairs in by_start.items():
        for row in backend().start_jobs(pairs, worker=worker_id, lease=lease):
            job = ClaimedJob.from_row(row[:-1])
            started[(job.id, job.lease_token - 1)] = (job, row[-1])
    # pop: a second delivery of the same message in the group gets None.
    return [started.pop((job_id, token), None) for job_id, token, _, _ in deliveries]


def record_outcomes(outcomes: Sequence[tuple[Finish, str]]) -> list[bool]:
    """Record (finish, worker id) pairs fenced by their tokens; return whether each held.

    A group the database refuses (an unstorable result, say) is recorded
    one by one, so only the outcome at fault is stored without its text.
    """
    by_worker: dict[str, list[Finish]] = {}
    for finish, worker_id in outcomes:
        by_worker.setdefault(worker_id, []).append(finish)
    accepted: set[tuple[int, int]] = set()
    for worker_id, finishes in by_worker.items():
        try:
            accepted |= finish_jobs(finishes, worker=worker_id)
        except CONNECTION_ERRORS:
            raise
        except DatabaseError:
            for finish in finishes:
                accepted |= record_one(finish, worker=worker_id)
    return [finish.job.fence in accepted for finish, _ in outcomes]


_starts = GroupCommit(start_deliveries)
_outcomes = GroupCommit(record_outcomes)


def start(
    job_id: int, lease_token: int, *, worker_id: str, lease: dt.timedelta
) -> tuple[ClaimedJob, str] | None:
    """Take a published job over from the relay, with whatever deliveries this process's
    other tasks start at the same moment; return it and its queue, or None (see
    start_deliveries)."""
    return _starts.submit((job_id, lease_token, worker_id, lease))


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
            with renewer().holding(job, worker_id=worker_id, lease=lease):
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
    """Record ``finish`` fenced by its token, with whatever outcomes this process's other
    tasks record at the same moment, reconnecting for up to ``within`` if the database
    connection is lost (as runworker keeps an outcome for its next turn); send job_failed
    as runworker does."""
    job = finish.job
    held = write_across_reconnects(
        lambda: _outcomes.submit((finish, worker_id)),
        seconds=within.total_seconds(),
        retry_on=CONNECTION_ERRORS,
    )
    if not held:
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
