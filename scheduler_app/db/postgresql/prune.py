"""Retention: delete finished jobs, and the recipients of finished batches, in batches, with
what refers to them, in one statement."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from scheduler_app.database import connection
from scheduler_app.db.postgresql.jobs import ATTEMPT, JOB
from scheduler_app.db.postgresql.statements import bound_cursor
from scheduler_app.models import FeedbackEvent, ScheduleOccurrence, SyncCursor

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


PRUNE_RECIPIENTS = f"""
WITH doomed AS (
    SELECT id FROM {{table}}
    WHERE batch_id IN ({{batches}})
    LIMIT %s
    FOR UPDATE SKIP LOCKED
), feedback AS (
    UPDATE {FeedbackEvent._meta.db_table} SET recipient_id = NULL
    WHERE recipient_id IN (SELECT id FROM doomed) RETURNING 1
), recipients AS (
    DELETE FROM {{table}} WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM recipients), (SELECT count(*) FROM feedback)
"""
"""Delete up to a limit of the recipients of ``batches`` (a query of batch ids) from
``table`` (the recipient table, or one of its partitions: scheduler_app.recipient_partitions),
unlinking the feedback events that name them, in one statement that the unique index of
(batch, recipient key) serves."""


def _batch_ids(batches: QuerySet) -> tuple[str, tuple]:
    return batches.values("pk").query.get_compiler(connection=connection).as_sql()


def prune_recipients(*, batches: QuerySet, limit: int, table: str) -> int:
    """Delete up to ``limit`` recipients of ``batches`` from ``table`` (see PRUNE_RECIPIENTS);
    return how many."""
    sql, params = _batch_ids(batches)
    with connection.cursor() as cursor:
        cursor.execute(PRUNE_RECIPIENTS.format(table=table, batches=sql), [*params, limit])
        recipients, _feedback = cursor.fetchone()
    return recipients


def count_recipients(*, batches: QuerySet, limit: int, table: str) -> int:
    """Return how many recipients of ``batches`` ``table`` holds, counted up to ``limit``."""
    sql, params = _batch_ids(batches)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE batch_id IN ({sql}) LIMIT %s)"
            " AS doomed",
            [*params, limit],
        )
        return cursor.fetchone()[0]
