"""Leases: renew ours, and rescue jobs whose worker stopped renewing theirs."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from functools import reduce
from operator import or_

from django.db.models import F, Q

from scheduler_app import clock, database
from scheduler_app.database_clock import DatabaseNow
from scheduler_app.models import Job, JobAttempt
from scheduler_app.signals import job_failed

logger = logging.getLogger("scheduler_app.worker")

RESCUE_BATCH = 500

#: A job's columns as a claim returns them, in the order ClaimedJob.from_row() takes.
CLAIMED_COLUMNS = (
    "id",
    "task_name",
    "payload",
    "payload_version",
    "attempts",
    "max_attempts",
    "scheduled_for",
    "run_at",
    "unique_key",
    "lease_token",
    "retry_later_deadline",
    "started_at",
)


def renew(worker_id: str, job_ids: Iterable[int], lease: dt.timedelta) -> int:
    """Extend the lease of this worker's running jobs; return how many were renewed."""
    ids = list(job_ids)
    if not ids:
        return 0
    with database.atomic():
        # Rows the worker's loop holds (it is recording their outcomes) are skipped, not
        # waited for: waiting, in another order than the loop's, could deadlock with it.
        # The next renewal, a third of a lease later, takes whatever is still running.
        free = list(
            Job.objects.running()
            .filter(pk__in=ids, worker_id=worker_id)
            .order_by("pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)
        )
        return Job.objects.filter(pk__in=free).update(lease_expires_at=DatabaseNow(lease))


def claims_of(worker_id: str) -> list[tuple]:
    """Return the jobs running under ``worker_id``, as a claim returns them (CLAIMED_COLUMNS)."""
    return list(Job.objects.running().filter(worker_id=worker_id).values_list(*CLAIMED_COLUMNS))


def give_back_attempts(fences: Iterable[tuple[int, int]], reason: str) -> int:
    """Uncount the attempts of running jobs (id, lease_token) a stopping worker lets go of
    while their handlers still run; return how many.

    They stay running (neither claimable nor cancellable while the handler
    lives) until their leases lapse; the rescue then puts them back to
    pending, and the attempt it counts is the one given back here.
    """
    matches = [Q(pk=job_id, lease_token=token) for job_id, token in fences]
    if not matches:
        return 0
    return (
        Job.objects.running()
        .filter(reduce(or_, matches))
        .update(attempts=F("attempts") - 1, last_error=reason)
    )


def rescue_expired(rescuer_id: str) -> int:
    """Put jobs with expired leases back to pending (or failed on their last attempt).

    The claimed attempt counts: the job may have had side effects before its
    worker died. Not so for a job no worker started (no started_at: a Celery
    relay published it and no Celery worker took it): its attempt is given back.
    Safe to run from every worker at once: rows are locked with
    SKIP LOCKED (PostgreSQL) or behind SQLite's single writer, and each UPDATE
    is guarded by status and lease token. Expiry is judged by the database's
    clock, so a rescuer whose clock runs ahead rescues nothing early. Returns
    how many jobs were rescued.
    """
    now = clock.now()
    with database.atomic():
        expired = list(
            Job.objects.expired_leases()
            .select_for_update(skip_locked=True)
            .order_by("id")
            .values_list(
                "id",
                "lease_token",
                "attempts",
                "max_attempts",
                "worker_id",
                "task_name",
                "run_at",
                "started_at",
                "lease_expires_at",
            )[:RESCUE_BATCH]
        )
        if not expired:
            return 0
        attempts, failed = [], []
        for (
            job_id,
            token,
            attempt,
            max_attempts,
            worker_id,
            task_name,
            run_at,
            started_at,
            expired_at,
        ) in expired:
            # No started_at: claimed by a Celery relay and never started by a Celery worker
            # (a relay killed with a backlog in the broker). Nothing ran: no attempt counts.
            started = started_at is not None
            last = started and attempt >= max_attempts
            if started:
                error = (
                    "Lease expired at %s: worker %s stopped renewing it during attempt %s of "
                    "%s%s."
                    % (
                        expired_at.isoformat(),
                        worker_id,
                        attempt,
                        max_attempts,
                        "; no attempts left" if last else "; it will run again",
                    )
                )
            else:
                error = (
                    "Lease expired at %s: %s claimed it and no worker started it; handed back "
                    "without using an attempt." % (expired_at.isoformat(), worker_id)
                )
            updated = Job.objects.filter(
                pk=job_id, lease_token=token, status=Job.Status.RUNNING
            ).update(
                status=Job.Status.FAILED if last else Job.Status.PENDING,
                attempts=attempt if started else attempt - 1,
                finished_at=now if last else None,
                last_error=error,
                worker_id="",
                lease_expires_at=None,
            )
            if not updated:
                continue
            attempts.append(
                JobAttempt(
                    job_id=job_id,
                    attempt=attempt,
                    task_name=task_name,
                    worker_id=worker_id,
                    due_at=run_at,
                    started_at=started_at or now,
                    finished_at=now,
                    outcome=(
                        JobAttempt.Outcome.LEASE_EXPIRED
                        if started
                        else JobAttempt.Outcome.INTERRUPTED
                    ),
                    error=error,
                )
            )
            if last:
                failed.append((job_id, task_name, error))
            logger.warning(
                "lease expired job=%s task=%s worker=%s attempt=%s/%s started=%s rescued_by=%s",
                job_id,
                task_name,
                worker_id,
                attempt,
                max_attempts,
                started,
                rescuer_id,
            )
        JobAttempt.objects.bulk_create(attempts)
    for job_id, task_name, error in failed:
        job_failed.send(sender=Job, job_id=job_id, task_name=task_name, error=error)
    return len(attempts)
