"""Retention: delete finished jobs in batches, with what refers to them, in one statement."""

from __future__ import annotations

import datetime as dt

from scheduler_app.db.postgresql.jobs import ATTEMPT, JOB
from scheduler_app.db.postgresql.statements import bound_cursor
from scheduler_app.models import ScheduleOccurrence, SyncCursor

#: The jobs of a table that finished before a cutoff (retention.finished_jobs()).
FINISHED_BEFORE = "status IN ('succeeded', 'failed', 'cancelled') AND finished_at < %(cutoff)s"

PRUNE_JOBS = f"""
WITH doomed AS (
    SELECT id FROM {{table}}
    WHERE {FINISHED_BEFORE}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM {ATTEMPT} WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), occurrences AS (
    UPDATE {ScheduleOccurrence._meta.db_table} SET job_id = NULL
    WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), cursors AS (
    UPDATE {SyncCursor._meta.db_table} SET job_id = NULL
    WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), jobs AS (
    DELETE FROM {{table}} WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM attempts),
       (SELECT count(*) FROM occurrences), (SELECT count(*) FROM cursors)
"""
"""Delete up to `limit` finished jobs older than `cutoff` from `table` (the job table, or
one of its partitions: scheduler_app.partitions) with their attempts, and unlink
their occurrences and sync cursors (what the ORM's on_delete would do), in one statement
that the partial index scheduler_job_prunable serves. FOR UPDATE re-checks the terminal
state on each locked row; SKIP LOCKED passes over a row a worker holds. A new foreign key
to the job table must be handled here (tests/db/test_retention.py checks the list); a
project's own is refused by system check E059 (checks.check_job_relations)."""


def prune_finished_jobs(*, cutoff: dt.datetime, limit: int, table: str = JOB) -> int:
    """Delete up to ``limit`` jobs finished before ``cutoff`` from ``table`` (see PRUNE_JOBS);
    return how many."""
    with bound_cursor() as cursor:
        cursor.execute(PRUNE_JOBS.format(table=table), {"cutoff": cutoff, "limit": limit})
        jobs, _attempts, _occurrences, _cursors = cursor.fetchone()
    return jobs


def count_finished_jobs(*, cutoff: dt.datetime, limit: int, table: str) -> int:
    """Return how many jobs of ``table`` finished before ``cutoff``, counted up to ``limit``."""
    with bound_cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {FINISHED_BEFORE} "
            "LIMIT %(limit)s) AS doomed",
            {"cutoff": cutoff, "limit": limit},
        )
        return cursor.fetchone()[0]
