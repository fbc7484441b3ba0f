"""cancel() and undo(): flip a pending job to cancelled in one guarded UPDATE, and say who won."""

from __future__ import annotations

import enum
from typing import Any

from scheduler_app import clock
from scheduler_app.controls import as_user
from scheduler_app.db import backend
from scheduler_app.db.job_state import job_from_state
from scheduler_app.exceptions import SendLaneNotCancellable
from scheduler_app.models import Job
from scheduler_app.sends.task_names import SEND_BATCH_TASK


class CancelOutcome(enum.StrEnum):
    """What cancel() found; ``cancelled`` is the only outcome that changed anything."""

    CANCELLED = "cancelled"
    ALREADY_CANCELLED = "already_cancelled"
    TOO_LATE = "too_late"  # a worker claimed it: it is running
    ALREADY_FINISHED = "already_finished"  # it succeeded or failed
    NOT_FOUND = "not_found"

    @property
    def changed(self) -> bool:
        return self is CancelOutcome.CANCELLED


def cancel(job_id: int, *, by: Any = None, queryset: Any = None) -> CancelOutcome:
    """Cancel a pending job; return what happened.

    The UPDATE is guarded by ``status = pending``: against a concurrent
    claim exactly one wins. A worker's SKIP LOCKED claim skips the row while
    the cancel holds it, and a cancel that waited for a claim finds the job
    running. ``queryset`` narrows which jobs may be cancelled (e.g. a user's
    own); jobs outside it are NOT_FOUND. ``by`` is recorded as cancelled_by.
    A send lane that has not finished raises SendLaneNotCancellable: only
    cancelling its batch stops a send without stranding it.
    """
    jobs = queryset if queryset is not None else Job.objects.all()
    now = clock.now()
    while True:
        updated = (
            jobs.filter(pk=job_id, status=Job.Status.PENDING)
            .exclude(task_name=SEND_BATCH_TASK)
            .update(
                status=Job.Status.CANCELLED,
                cancelled_at=now,
                cancelled_by=as_user(by),
                finished_at=now,
            )
        )
        if updated:
            return CancelOutcome.CANCELLED
        status, task_name, payload = jobs.filter(pk=job_id).values_list(
            "status", "task_name", "payload"
        ).first() or (None, None, None)
        _refuse_lane(job_id, task_name, status, payload)
        if status != Job.Status.PENDING:
            break
        # It was running at our UPDATE and went back to pending (a retry)
        # before the read: it is cancellable again, so try once more.
    return _unchanged(status)


#: undo()'s ``owner`` for "any owner's job" (staff acting on every job).
ANY_OWNER = None


def undo(
    job_id: int, *, by: Any = None, owner: Any = ANY_OWNER
) -> tuple[CancelOutcome, Job | None]:
    """Cancel a pending job inside its undo window; return the outcome and the job as stored.

    One guarded UPDATE ... RETURNING (status pending, undo deadline not
    passed by the database's clock, not a send lane): against a concurrent
    claim exactly one wins, and a successful undo reads nothing else. When it
    changes nothing, one read of the job tells why: CANCELLED's alternatives
    are ALREADY_CANCELLED, ALREADY_FINISHED (succeeded or failed), TOO_LATE
    (running, or still pending with its window closed or without one: the
    job says which) and NOT_FOUND (no such job, or not ``owner``'s when
    ``owner`` is a user). ``by`` is recorded as cancelled_by. A send lane
    that has not finished raises SendLaneNotCancellable, as cancel() does.
    The job's result and last_error are not read (deferred).
    """
    sql = backend()
    owner_id = None if owner is ANY_OWNER else owner.pk
    by_user = as_user(by)
    now = clock.now()
    while True:
        row = sql.undo_job(
            job_id=job_id,
            owner_id=owner_id,
            by_id=by_user.pk if by_user is not None else None,
            now=now,
            lane_task=SEND_BATCH_TASK,
        )
        if row is not None:
            return CancelOutcome.CANCELLED, job_from_state(row)
        state = sql.read_job_state(job_id=job_id, owner_id=owner_id)
        if state is None:
            return CancelOutcome.NOT_FOUND, None
        job, inside_window = job_from_state(state[:-1]), state[-1]
        _refuse_lane(job_id, job.task_name, job.status, job.payload)
        if not (job.status == Job.Status.PENDING and inside_window):
            break
        # It was running at our UPDATE and went back to pending (a retry)
        # before the read: it can be undone again, so try once more.
    return _unchanged(job.status), job


def _refuse_lane(job_id: int, task_name: str | None, status: str | None, payload: Any) -> None:
    """Raise SendLaneNotCancellable if the job is a send lane that has not finished."""
    if task_name == SEND_BATCH_TASK and status in Job.UNFINISHED:
        raise SendLaneNotCancellable(
            "Job %s is a lane of send batch %s and cannot be cancelled on its own; "
            "cancel the batch instead." % (job_id, payload["batch"]),
            job=job_id,
            batch=payload["batch"],
        )


def _unchanged(status: str | None) -> CancelOutcome:
    """Return what a cancel or undo that changed nothing found, from the job's status
    (None: no such job). Running, or pending with its undo window closed: too late."""
    return {
        None: CancelOutcome.NOT_FOUND,
        Job.Status.CANCELLED: CancelOutcome.ALREADY_CANCELLED,
        Job.Status.SUCCEEDED: CancelOutcome.ALREADY_FINISHED,
        Job.Status.FAILED: CancelOutcome.ALREADY_FINISHED,
    }.get(status, CancelOutcome.TOO_LATE)


def cancel_by_key(task: Any, unique_key: str, *, by: Any = None) -> CancelOutcome:
    """Cancel the job of ``task`` (a TaskSpec or name) with ``unique_key``; see cancel().

    Looks at the newest job with that key, so after a cancel or a finished
    run it reports that job's state.
    """
    task_name = task if isinstance(task, str) else task.name
    job_id = (
        Job.objects.filter(task_name=task_name, unique_key=unique_key)
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )
    if job_id is None:
        return CancelOutcome.NOT_FOUND
    return cancel(job_id, by=by)
