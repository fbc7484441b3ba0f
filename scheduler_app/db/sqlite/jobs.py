"""Jobs: the claim as one write statement (SQLite lets one writer in at a time), the
finish, and the Celery executor's start; no NOTIFY (workers poll)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from scheduler_app import database
from scheduler_app.database import connection
from scheduler_app.db.sqlite.clock import parse_datetime, read_now
from scheduler_app.models import Job, JobAttempt

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table

CLAIM = f"""
UPDATE {JOB}
SET status = 'running', worker_id = %s, lease_expires_at = %s, started_at = %s,
    attempts = attempts + 1, lease_token = lease_token + 1
WHERE id IN (
    SELECT id FROM {JOB}
    WHERE status = 'pending' AND queue IN ({{queues}}) AND run_at <= %s {{paused_tasks}}
    ORDER BY priority, run_at, id
    LIMIT %s
)
RETURNING id, task_name, payload, payload_version, attempts, max_attempts,
          scheduled_for, run_at, unique_key, lease_token, retry_later_deadline, started_at
"""
"""Claim up to `limit` due jobs in one write statement."""

FINISH = f"""
UPDATE {JOB}
SET status = %s, run_at = COALESCE(%s, run_at), attempts = attempts - %s,
    finished_at = %s, last_error = %s, result = %s,
    retry_later_deadline = COALESCE(%s, retry_later_deadline),
    worker_id = CASE WHEN %s THEN '' ELSE worker_id END, lease_expires_at = NULL
WHERE id = %s AND lease_token = %s AND status = 'running'
"""
"""Record one finished attempt, fenced by the lease token. Without an attempt-history
row (see Finish.needs_history_row) the job row keeps the worker that ran it."""

INSERT_ATTEMPT = f"""
INSERT INTO {ATTEMPT} (job_id, attempt, task_name, worker_id, due_at, started_at, finished_at,
                       outcome, error)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def claim_jobs(
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
    started: bool = True,
) -> list[tuple]:
    """Claim up to ``limit`` due jobs for ``worker``; return their rows, the claim's time
    last (see postgresql.jobs.CLAIM, ``started`` included)."""
    now = read_now()
    ops = connection.ops
    sql = CLAIM.replace("{queues}", ", ".join(["%s"] * len(queues))).replace(
        "{paused_tasks}",
        "AND task_name NOT IN (%s)" % ", ".join(["%s"] * len(paused_tasks)) if paused_tasks else "",
    )
    params = [
        worker,
        ops.adapt_datetimefield_value(now + lease),
        ops.adapt_datetimefield_value(now) if started else None,
        *queues,
        ops.adapt_datetimefield_value(now),
        *paused_tasks,
        limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [(*_convert(row)[:-1], now) for row in rows]


def finish_jobs(rows: Sequence[Sequence], *, worker: str) -> set[tuple[int, int]]:
    """Apply finish rows (see worker.execution.Finish.as_row); return the (job id, lease
    token) of each outcome accepted."""
    adapt = connection.ops.adapt_datetimefield_value
    accepted = set()
    with database.atomic(), connection.cursor() as cursor:
        for (
            job_id,
            token,
            status,
            outcome,
            run_at,
            refund,
            error,
            finished_at,
            result,
            deadline,
            attempt,
            task_name,
            due_at,
            started_at,
            history,
        ) in rows:
            cursor.execute(
                FINISH,
                [
                    status,
                    adapt(run_at),
                    refund,
                    None if status == "pending" else adapt(finished_at),
                    error,
                    result,
                    adapt(deadline),
                    history,
                    job_id,
                    token,
                ],
            )
            if not cursor.rowcount:
                continue
            accepted.add((job_id, token))
            if history:
                cursor.execute(
                    INSERT_ATTEMPT,
                    [
                        job_id,
                        attempt,
                        task_name,
                        worker,
                        adapt(due_at),
                        adapt(started_at),
                        adapt(finished_at),
                        outcome,
                        error,
                    ],
                )
    return accepted


def finish_and_claim(
    rows: Sequence[Sequence],
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """finish_jobs(rows), then claim_jobs(...), in one transaction; return (accepted, claimed)."""
    with database.atomic():
        accepted = finish_jobs(rows, worker=worker)
        claimed = claim_jobs(
            worker=worker,
            queues=queues,
            limit=limit,
            lease=lease,
            paused_tasks=paused_tasks,
        )
    return accepted, claimed


def notify(earliest_by_queue: dict[str, dt.datetime]) -> None:
    """SQLite has no NOTIFY: workers find new jobs by polling."""


def _convert(row: tuple) -> tuple:
    """Return the row with aware datetimes (see parse_datetime), as PostgreSQL returns them."""
    parse = parse_datetime
    (
        job_id,
        task_name,
        payload,
        version,
        attempts,
        max_attempts,
        scheduled_for,
        run_at,
        unique_key,
        token,
        deadline,
        started_at,
    ) = row
    return (
        job_id,
        task_name,
        payload,
        version,
        attempts,
        max_attempts,
        parse(scheduled_for),
        parse(run_at),
        unique_key,
        token,
        parse(deadline),
        parse(started_at),
    )


START = f"""
UPDATE {JOB}
SET lease_token = lease_token + 1, worker_id = %s, started_at = %s, lease_expires_at = %s
WHERE id = %s AND lease_token = %s AND status = 'running'
RETURNING id, task_name, payload, payload_version, attempts, max_attempts,
          scheduled_for, run_at, unique_key, lease_token, retry_later_deadline, started_at,
          queue
"""
"""Take a claimed job over under its lease token (see postgresql.jobs.START)."""


def start_jobs(
    deliveries: Sequence[tuple[int, int]], *, worker: str, lease: dt.timedelta
) -> list[tuple]:
    """Start each claimed job of ``deliveries`` ((job id, lease token) pairs) whose token is
    still its lease token (see postgresql.jobs.start_jobs); return their rows."""
    now = read_now()
    adapt = connection.ops.adapt_datetimefield_value
    rows = []
    with database.atomic(), connection.cursor() as cursor:
        for job_id, token in deliveries:
            cursor.execute(START, [worker, adapt(now), adapt(now + lease), job_id, token])
            row = cursor.fetchone()
            if row is not None:
                rows.append((*_convert(row[:-1]), row[-1]))
    return rows


def finish_and_start(
    rows: Sequence[Sequence],
    finished_by: str,
    deliveries: Sequence[tuple[int, int]],
    *,
    worker: str,
    lease: dt.timedelta,
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """finish_jobs(rows, worker=finished_by), then start_jobs(deliveries, ...), in one
    transaction; return (accepted, started rows)."""
    with database.atomic():
        accepted = finish_jobs(rows, worker=finished_by) if rows else set()
        return accepted, start_jobs(deliveries, worker=worker, lease=lease)


def still_published(ids: Sequence[int], *, relay: str) -> set[int]:
    """Return those of ``ids`` still claimed by ``relay`` and not yet started (see
    postgresql.jobs.still_published)."""
    return set(
        Job.objects.running().filter(pk__in=ids, worker_id=relay).values_list("pk", flat=True)
    )
