"""Undo: cancel a job inside its undo window in one guarded statement, and read the job as
stored when that changed nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.db import models

from scheduler_app.database import connection
from scheduler_app.db.job_state import job_state_columns
from scheduler_app.db.sqlite.clock import parse_datetime, read_now
from scheduler_app.db.sqlite.jobs import JOB
from scheduler_app.models import Job

_JOB_STATE = ", ".join(job_state_columns())
_DATETIMES = [
    i
    for i, column in enumerate(job_state_columns())
    if isinstance(Job._meta.get_field(column), models.DateTimeField)
]

UNDO = f"""
UPDATE {JOB}
SET status = 'cancelled', cancelled_at = %s, finished_at = %s, cancelled_by_id = %s
WHERE id = %s AND status = 'pending' AND task_name <> %s AND undo_deadline > %s
  AND (owner_id = %s OR %s IS NULL)
RETURNING {_JOB_STATE}
"""
"""Cancel a pending job inside its undo window and return it (see postgresql.undo.UNDO)."""

JOB_STATE = f"""
SELECT {_JOB_STATE}, undo_deadline > %s FROM {JOB} WHERE id = %s AND (owner_id = %s OR %s IS NULL)
"""
"""A job as stored and whether its undo window is open (see postgresql.undo.JOB_STATE)."""


def undo_job(
    *, job_id: int, owner_id: int | None, by_id: int | None, now: dt.datetime, lane_task: str
) -> tuple | None:
    """Run UNDO; return the cancelled job's row (job_state_columns()), None if nothing changed."""
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(now), adapt(now), by_id, job_id, lane_task, adapt(read_now())]
    with connection.cursor() as cursor:
        cursor.execute(UNDO, [*params, owner_id, owner_id])
        row = cursor.fetchone()
    return None if row is None else _convert_state(row)


def read_job_state(*, job_id: int, owner_id: int | None) -> tuple | None:
    """Run JOB_STATE: the job's row and, last, whether its undo window is open; None if absent."""
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(JOB_STATE, [adapt(read_now()), job_id, owner_id, owner_id])
        row = cursor.fetchone()
    return None if row is None else (*_convert_state(row[:-1]), bool(row[-1]))


def _convert_state(row: Sequence) -> tuple:
    """Return a row of job_state_columns() with aware datetimes, as PostgreSQL returns them."""
    values = list(row)
    for i in _DATETIMES:
        values[i] = parse_datetime(values[i])
    return tuple(values)
