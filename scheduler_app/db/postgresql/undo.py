"""Undo: cancel a job inside its undo window in one guarded statement, and read the job as
stored when that changed nothing."""

from __future__ import annotations

import datetime as dt

from scheduler_app import clock
from scheduler_app.database import connection
from scheduler_app.db.job_state import job_state_columns
from scheduler_app.db.postgresql.clock import NOW
from scheduler_app.db.postgresql.jobs import JOB

_JOB_STATE = ", ".join("payload::text" if c == "payload" else c for c in job_state_columns())

UNDO = f"""
UPDATE {JOB}
SET status = 'cancelled', cancelled_at = %(now)s, finished_at = %(now)s, cancelled_by_id = %(by)s
WHERE id = %(id)s AND status = 'pending' AND task_name <> %(lane_task)s
  AND undo_deadline > {NOW.format(frozen="%(frozen)s")}
  AND (owner_id = %(owner)s OR %(owner)s::bigint IS NULL)
RETURNING {_JOB_STATE}
"""
"""Cancel a pending job of ``owner`` (NULL: anyone's) inside its undo window, by the
database's clock, and return it as stored: one guarded statement, so against a claim
exactly one wins and the response needs no second read. A waiting UPDATE re-checks the
row a claim committed, so it never cancels a job that went running."""

JOB_STATE = f"""
SELECT {_JOB_STATE}, undo_deadline > {NOW.format(frozen="%(frozen)s")}
FROM {JOB}
WHERE id = %(id)s AND (owner_id = %(owner)s OR %(owner)s::bigint IS NULL)
"""
"""A job of ``owner`` (NULL: anyone's) as stored, and whether its undo window is open
by the database's clock. Its own statement (a fresh snapshot) after a failed UNDO, so
it sees what made UNDO fail."""


def undo_job(
    *, job_id: int, owner_id: int | None, by_id: int | None, now: dt.datetime, lane_task: str
) -> tuple | None:
    """Run UNDO; return the cancelled job's row (job_state_columns()), None if nothing changed."""
    # Django's cursor, not bound_cursor(): the API's statements stay visible to
    # query logging and counting (CaptureQueriesContext, the debug toolbar).
    with connection.cursor() as cursor:
        cursor.execute(
            UNDO,
            {
                "id": job_id,
                "owner": owner_id,
                "by": by_id,
                "now": now,
                "lane_task": lane_task,
                "frozen": clock.frozen_at(),
            },
        )
        return cursor.fetchone()


def read_job_state(*, job_id: int, owner_id: int | None) -> tuple | None:
    """Run JOB_STATE: the job's row and, last, whether its undo window is open; None if absent."""
    with connection.cursor() as cursor:
        cursor.execute(JOB_STATE, {"id": job_id, "owner": owner_id, "frozen": clock.frozen_at()})
        return cursor.fetchone()
