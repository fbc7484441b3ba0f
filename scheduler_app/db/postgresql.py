"""PostgreSQL statements: SKIP LOCKED claim, batched finish, LISTEN/NOTIFY."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence

import psycopg
from django.db import connection
from django.db.models import QuerySet

from scheduler_app import clock
from scheduler_app.models import Job, JobAttempt

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table

#: The channel workers LISTEN on; each payload is "<queue> <run_at epoch>".
CHANNEL = "scheduler_app_jobs"


@contextlib.contextmanager
def bound_cursor() -> Iterator[psycopg.Cursor]:
    """Yield a cursor that binds parameters on the server, for the hot statements.

    Django's default client-side binding quotes every array element in
    Python; server-side binding sends them as they are and lets psycopg
    prepare statements that run again and again. Errors are Django's.
    """
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


NOW = "COALESCE({frozen}::timestamptz, statement_timestamp())"
"""The database's clock (see scheduler_app.db.DatabaseNow). ``{frozen}`` is a
parameter: NULL, or the frozen test clock. statement_timestamp(), not now():
now() stays at the start of the transaction. One text for both cases, so
prepared statements are reused."""

CLAIM = f"""
UPDATE {JOB} AS j
SET status = 'running', worker_id = %(worker)s,
    lease_expires_at = {NOW.format(frozen="%(frozen)s")} + %(lease)s,
    started_at = %(started)s, attempts = j.attempts + 1, lease_token = j.lease_token + 1
FROM (
    SELECT id FROM {JOB}
    WHERE status = 'pending' AND queue = ANY(%(queues)s)
      AND run_at <= {NOW.format(frozen="%(frozen)s")}
      AND NOT (task_name = ANY(%(paused_tasks)s))
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS due
WHERE j.id = due.id
RETURNING j.id, j.task_name, j.payload::text, j.payload_version, j.attempts, j.max_attempts,
          j.scheduled_for, j.run_at, j.unique_key, j.lease_token, j.retry_later_deadline
"""
"""Claim up to `limit` due jobs. SKIP LOCKED so a slow claimer never blocks the
others, and a row a cancel holds is skipped, not waited for. Due and lease
times are the database's clock; started_at is the worker's (for lateness)."""

FINISH = f"""
WITH v AS (
    SELECT * FROM unnest(
        %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::timestamptz[], %s::int[],
        %s::text[], %s::timestamptz[], %s::text[], %s::timestamptz[],
        %s::int[], %s::text[], %s::timestamptz[], %s::timestamptz[]
    ) AS v(id, token, status, outcome, run_at, refund, error, finished_at, result, deadline,
           attempt, task_name, due_at, started_at)
), done AS (
    UPDATE {JOB} AS j
    SET status = v.status,
        run_at = COALESCE(v.run_at, j.run_at),
        attempts = j.attempts - v.refund,
        finished_at = CASE WHEN v.status = 'pending' THEN NULL ELSE v.finished_at END,
        last_error = v.error,
        result = v.result::jsonb,
        retry_later_deadline = COALESCE(v.deadline, j.retry_later_deadline),
        worker_id = '', lease_expires_at = NULL
    FROM v
    WHERE j.id = v.id AND j.lease_token = v.token AND j.status = 'running'
    RETURNING j.id
)
INSERT INTO {ATTEMPT} (job_id, attempt, task_name, worker_id, due_at, started_at, finished_at,
                       outcome, error)
SELECT v.id, v.attempt, v.task_name, %s, v.due_at, v.started_at, v.finished_at, v.outcome, v.error
FROM v JOIN done ON done.id = v.id
RETURNING job_id
"""
"""Record many finished attempts in one statement. The lease_token guard
fences out a worker whose lease expired: its rows match nothing."""

NOTIFY = "SELECT pg_notify(%s, %s)"
"""Wake idle workers; inside a transaction it is delivered at commit."""


def now_sql(offset: dt.timedelta = dt.timedelta(0)) -> tuple[str, list]:
    """Return the database's clock plus ``offset`` as SQL with ``%s`` placeholders, and params."""
    sql, params = NOW.format(frozen="%s"), [clock.frozen_at()]
    if offset:
        return "(%s + %%s::interval)" % sql, [*params, offset]
    return sql, params


def read_now(offset: dt.timedelta = dt.timedelta(0)) -> dt.datetime:
    """Return the database's clock plus ``offset``."""
    sql, params = now_sql(offset)
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s" % sql, params)
        return cursor.fetchone()[0]


def claim_jobs(
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    now: dt.datetime,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
) -> list[tuple]:
    """Claim up to ``limit`` due jobs for ``worker``; return their rows (see CLAIM).

    ``now`` (the worker's clock) is recorded as started_at; the lease runs
    ``lease`` from the database's clock.
    """
    with bound_cursor() as cursor:
        cursor.execute(
            CLAIM,
            {
                "worker": worker,
                "queues": list(queues),
                "limit": limit,
                "started": now,
                "frozen": clock.frozen_at(),
                "lease": lease,
                "paused_tasks": list(paused_tasks),
            },
        )
        return cursor.fetchall()


def finish_jobs(rows: Sequence[Sequence], *, worker: str) -> set[int]:
    """Apply finish rows (see worker.execution.Finish.as_row); return the job ids accepted."""
    if not rows:
        return set()
    columns = [list(column) for column in zip(*rows, strict=True)]
    with bound_cursor() as cursor:
        cursor.execute(FINISH, [*columns, worker])
        return {row[0] for row in cursor.fetchall()}


def notify(earliest_by_queue: dict[str, dt.datetime]) -> None:
    """NOTIFY workers of each queue's earliest new run time."""
    with connection.cursor() as cursor:
        for queue, run_at in earliest_by_queue.items():
            cursor.execute(NOTIFY, [CHANNEL, "%s %.6f" % (queue, run_at.timestamp())])


LATENESS = """
SELECT task_name, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY lateness),
       max(lateness)
FROM (SELECT task_name, EXTRACT(EPOCH FROM started_at - due_at)::float8 AS lateness
      FROM ({attempts}) AS a) AS l
GROUP BY task_name
ORDER BY task_name
"""
"""Lateness percentiles per task over the attempts the inner query selects."""


def lateness_percentiles(attempts: QuerySet) -> list[tuple]:
    """Return (task, count, p50, p95, max) rows for an attempts queryset."""
    sql, params = attempts.values("task_name", "due_at", "started_at").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(LATENESS.format(attempts=sql), params)
        return cursor.fetchall()


SCHEDULER_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('scheduler_app.schedules'))"
"""Let one worker at a time enqueue schedule occurrences; released at commit,
so no worker is a single point of failure."""


def try_scheduler_lock() -> bool:
    """Take the scheduler's transaction-level advisory lock if it is free."""
    with connection.cursor() as cursor:
        cursor.execute(SCHEDULER_LOCK)
        return bool(cursor.fetchone()[0])


RECIPIENT = "scheduler_app_recipient"

FREEZE_RECIPIENTS = f"""
INSERT INTO {RECIPIENT} (batch_id, recipient_key, address, timezone, context, is_seed, status,
                         attempts, next_attempt_at, claimed_by, provider_message_id, last_error)
SELECT %s, a.sa_key::text, COALESCE(a.sa_address::text, ''), {{timezone}}, {{context}},
       false, 'pending', 0, %s, '', '', ''
FROM ({{select}}) AS a
ON CONFLICT (batch_id, recipient_key) DO NOTHING
"""
"""Snapshot an audience server-side; the first row of a recipient key wins."""

CLAIM_RECIPIENTS = f"""
UPDATE {RECIPIENT} AS r
SET claimed_by = %(claim)s, claimed_until = %(until)s, attempts = r.attempts + 1
FROM (
    SELECT id FROM {RECIPIENT}
    WHERE batch_id = %(batch)s AND status = 'pending' AND NOT is_seed
      AND next_attempt_at <= %(now)s AND (claimed_until IS NULL OR claimed_until < %(now)s)
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS due
WHERE r.id = due.id
RETURNING r.id, r.recipient_key, r.address, r.timezone, r.context::text, r.attempts
"""
"""Claim a chunk of a batch's due recipients, earliest due first; SKIP LOCKED so workers
share a batch. Only the partial index scheduler_recipient_due gives this order, so the
plan does not depend on statistics that know nothing yet of a batch just frozen."""

MARK_RECIPIENTS = f"""
UPDATE {RECIPIENT} AS r
SET status = v.status, sent_at = v.sent_at, provider_message_id = v.message_id,
    last_error = v.error, next_attempt_at = COALESCE(v.next_attempt_at, r.next_attempt_at),
    attempts = r.attempts - v.refund, claimed_by = '', claimed_until = NULL
FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::text[], %s::text[],
            %s::timestamptz[], %s::int[])
     AS v(id, status, sent_at, message_id, error, next_attempt_at, refund)
WHERE r.id = ANY(%s::bigint[]) AND r.id = v.id AND r.status = 'pending'
  AND r.claimed_by = (SELECT %s::text)
RETURNING v.status
"""
"""Record a chunk's outcomes, fenced by the claim: an expired claim changes nothing.

``r.id = ANY(ids)`` lets the primary key find the chunk's rows. The claim is
compared through an InitPlan: compared to a literal, its selectivity comes
from statistics in which every row is unclaimed, the planner expects one row,
scans the whole table and rescans the chunk's arrays for each row it finds
(a nested loop quadratic in the chunk size)."""


def freeze_recipients(
    *,
    batch_id: int,
    select_sql: str,
    select_params: Sequence,
    context_names: Sequence[str],
    has_timezone: bool,
    next_attempt_at: dt.datetime,
) -> int:
    """INSERT ... SELECT an audience into Recipient; return how many rows were inserted."""
    timezone = "COALESCE(a.sa_timezone::text, '')" if has_timezone else "''"
    context = "jsonb_build_object(%s)" % ", ".join(
        "%%s::text, a.sa_%s" % name for name in context_names
    )
    sql = (
        FREEZE_RECIPIENTS.replace("{timezone}", timezone)
        .replace("{context}", context)
        .replace("{select}", select_sql)
    )
    # In the order the placeholders appear: batch, context names, time, the SELECT's own.
    params = [batch_id, *context_names, next_attempt_at, *select_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def claim_recipients(
    *, batch_id: int, claim: str, limit: int, now: dt.datetime, until: dt.datetime
) -> list[tuple]:
    """Claim up to ``limit`` due recipients; return (id, key, address, tz, context, attempts)."""
    with bound_cursor() as cursor:
        cursor.execute(
            CLAIM_RECIPIENTS,
            {"batch": batch_id, "claim": claim, "limit": limit, "now": now, "until": until},
        )
        return cursor.fetchall()


def mark_recipients(rows: Sequence[Sequence], *, claim: str) -> list[str]:
    """Record (id, status, sent_at, message_id, error, next_attempt_at, refund) rows.

    Returns the statuses of the rows that still held our claim.
    """
    if not rows:
        return []
    columns = [list(column) for column in zip(*rows, strict=True)]
    with bound_cursor() as cursor:
        cursor.execute(MARK_RECIPIENTS, [*columns, columns[0], claim])
        return [row[0] for row in cursor.fetchall()]
