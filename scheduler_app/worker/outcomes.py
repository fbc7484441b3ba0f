"""Record attempts' outcomes, fenced by their lease tokens (runworker and Celery alike)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, InterfaceError, OperationalError

from scheduler_app import database
from scheduler_app.db import backend
from scheduler_app.models import Job, SyncCursor
from scheduler_app.worker.execution import Finish

logger = logging.getLogger("scheduler_app.worker")

#: The errors that mean "the database is unreachable": the worker waits and reconnects.
#: Any other database error is about the statement, and waiting would not help.
CONNECTION_ERRORS = (OperationalError, InterfaceError)


def finish_jobs(finishes: list[Finish], *, worker: str) -> set[tuple[int, int]]:
    """Write outcomes in one statement; return the fences (ClaimedJob.fence) that held.

    A success's cursor proposals are saved in the same transaction, and only
    for the jobs whose outcome the fence accepted.
    """
    rows = [finish.as_row() for finish in finishes]
    proposals = [
        (finish.job.fence, proposal)
        for finish in finishes
        if finish.status == Job.Status.SUCCEEDED
        for proposal in finish.cursors
    ]
    if not proposals:
        return backend().finish_jobs(rows, worker=worker)
    with database.atomic():
        accepted = backend().finish_jobs(rows, worker=worker)
        SyncCursor.objects.save_proposals(
            (fence[0], p) for fence, p in proposals if fence in accepted
        )
    return accepted


def record_one(finish: Finish, *, worker: str) -> set[tuple[int, int]]:
    """Record ``finish``; return {its job's fence} if its lease token still held, else an
    empty set.

    If the database refuses the outcome, record it again without its result
    and error text, so the job does not run again for want of a storable
    outcome. Connection errors propagate: the caller decides how to wait.
    """
    job = finish.job
    try:
        return finish_jobs([finish], worker=worker)
    except CONNECTION_ERRORS:
        raise
    except DatabaseError as exc:
        # The first line: PostgreSQL's CONTEXT lines quote the statement's data.
        reason = "%s: %s" % (type(exc).__name__, str(exc).partition("\n")[0])
    logger.error(
        "outcome refused by the database, recording it without its result and error text "
        "job=%s task=%s error=%s",
        job.id,
        job.task_name,
        reason,
    )
    try:
        return finish_jobs([finish.storable(reason)], worker=worker)
    except CONNECTION_ERRORS:
        raise
    except DatabaseError:
        logger.exception(
            "outcome dropped, its lease will expire and the job will run again job=%s task=%s",
            job.id,
            job.task_name,
        )
        return set()
