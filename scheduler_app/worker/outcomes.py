"""Record one attempt's outcome, fenced by its lease token (runworker and Celery alike)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, InterfaceError, OperationalError

from scheduler_app.db import backend
from scheduler_app.worker.execution import Finish

logger = logging.getLogger("scheduler_app.worker")

#: The errors that mean "the database is unreachable": the worker waits and reconnects.
#: Any other database error is about the statement, and waiting would not help.
CONNECTION_ERRORS = (OperationalError, InterfaceError)


def record_one(finish: Finish, *, worker: str) -> set[int]:
    """Record ``finish``; return {job id} if its lease token still held, else an empty set.

    If the database refuses the outcome, record it again without its result
    and error text, so the job does not run again for want of a storable
    outcome. Connection errors propagate: the caller decides how to wait.
    """
    job = finish.job
    try:
        return backend().finish_jobs([finish.as_row()], worker=worker)
    except CONNECTION_ERRORS:
        raise
    except DatabaseError as exc:
        reason = "%s: %s" % (type(exc).__name__, exc)
    logger.error(
        "outcome refused by the database, recording it without its result and error text "
        "job=%s task=%s error=%s",
        job.id,
        job.task_name,
        reason,
    )
    try:
        return backend().finish_jobs([finish.storable(reason).as_row()], worker=worker)
    except CONNECTION_ERRORS:
        raise
    except DatabaseError:
        logger.exception(
            "outcome dropped, its lease will expire and the job will run again job=%s task=%s",
            job.id,
            job.task_name,
        )
        return set()
