"""SQLite statements: the same semantics with serialised writes.

SQLite lets one writer in at a time, so the claim's single UPDATE is atomic
without SKIP LOCKED. It suits development and single-host use; run
production on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence

from django.db import connection, models, transaction

from scheduler_app import clock
from scheduler_app.db import stored_time_zone
from scheduler_app.db.job_state import job_state_columns
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


def now_sql(offset: dt.timedelta = dt.timedelta(0)) -> tuple[str, list]:
    """Return the clock plus ``offset`` as SQL and params: clock.now(), a parameter.

    Every process of a SQLite database runs on one host, so its clock is the
    database's.
    """
    return "%s", [connection.ops.adapt_datetimefield_value(read_now(offset))]


def read_now(offset: dt.timedelta = dt.timedelta(0)) -> dt.datetime:
    """Return the clock plus ``offset``."""
    return clock.now() + offset


def claim_jobs(
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
) -> list[tuple]:
    """Claim up to ``limit`` due jobs for ``worker``; return their rows."""
    now = read_now()
    ops = connection.ops
    sql = CLAIM.replace("{queues}", ", ".join(["%s"] * len(queues))).replace(
        "{paused_tasks}",
        "AND task_name NOT IN (%s)" % ", ".join(["%s"] * len(paused_tasks)) if paused_tasks else "",
    )
    params = [
        worker,
        ops.adapt_datetimefield_value(now + lease),
        ops.adapt_datetimefield_value(now),
        *queues,
        ops.adapt_datetimefield_value(now),
        *paused_tasks,
        limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [_convert(row) for row in rows]


def finish_jobs(rows: Sequence[Sequence], *, worker: str) -> set[tuple[int, int]]:
    """Apply finish rows (see worker.execution.Finish.as_row); return the (job id, lease
    token) of each outcome accepted."""
    adapt = connection.ops.adapt_datetimefield_value
    accepted = set()
    with transaction.atomic(), connection.cursor() as cursor:
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
    with transaction.atomic():
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
    """Return the row with aware datetimes (see _parse_datetime), as PostgreSQL returns them."""
    parse = _parse_datetime
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


def _parse_datetime(value: str | dt.datetime | None) -> dt.datetime | None:
    # Stored naive, in stored_time_zone(); Django's sqlite3 converters may already have
    # parsed it.
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=stored_time_zone())


RECIPIENT = "scheduler_app_recipient"

FREEZE_RECIPIENTS = f"""
INSERT INTO {RECIPIENT} (batch_id, recipient_key, address, timezone, context, is_seed, status,
                         attempts, next_attempt_at, claimed_by, provider_message_id, last_error)
SELECT %s, CAST(a.sa_key AS TEXT), COALESCE(a.sa_address, ''), {{timezone}}, a.sa_context,
       0, 'pending', 0, %s, '', '', ''
FROM ({{select}}) AS a
WHERE NOT EXISTS (SELECT 1 FROM {RECIPIENT} WHERE batch_id = %s AND NOT is_seed)
GROUP BY CAST(a.sa_key AS TEXT)
"""
"""Snapshot an audience, de-duplicated by recipient key in the SELECT (SQLite takes the
other columns of a group from one of its rows); as on PostgreSQL, a batch that already
has recipients gets none, and a key equal to a seed key fails the freeze."""

CLAIM_RECIPIENTS = f"""
UPDATE {RECIPIENT}
SET claimed_by = %s, claimed_until = %s
WHERE id IN (
    SELECT id FROM {RECIPIENT}
    WHERE batch_id = %s AND status = 'pending' AND NOT is_seed
      AND next_attempt_at <= %s AND (claimed_until IS NULL OR claimed_until < %s)
    ORDER BY next_attempt_at, id
    LIMIT %s
)
RETURNING id, recipient_key, address, timezone, context, attempts, next_attempt_at
"""
"""Claim a chunk of a batch's due recipients. SQLite returns an UPDATE's rows in table
order, not the subquery's: claim_recipients() puts them back in due order."""

BEGIN_RECIPIENTS = f"""
UPDATE {RECIPIENT} SET attempts = attempts + 1, claimed_until = %s
WHERE id IN ({{ids}}) AND claimed_by = %s AND status = 'pending'
RETURNING id, attempts
"""

EXTEND_CLAIMS = f"""
UPDATE {RECIPIENT} SET claimed_until = %s
WHERE id IN ({{ids}}) AND claimed_by = %s AND status = 'pending'
"""

COUNT_MARKED = """
INSERT INTO scheduler_app_laneprogress AS l (batch_id, claim, sent, failed, skipped, progressed_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (claim) DO UPDATE
SET sent = l.sent + excluded.sent, failed = l.failed + excluded.failed,
    skipped = l.skipped + excluded.skipped, progressed_at = excluded.progressed_at
"""
"""Add a lane's newly marked recipients to its own counter row (see postgresql._MARKED)."""

MARK_RECIPIENT = f"""
UPDATE {RECIPIENT}
SET status = %s, sent_at = %s, provider_message_id = %s,
    last_error = COALESCE(%s, last_error),
    next_attempt_at = COALESCE(%s, next_attempt_at), attempts = attempts - %s,
    claimed_by = '', claimed_until = NULL
WHERE id = %s AND claimed_by = %s AND status = 'pending'
"""


def freeze_recipients(
    *,
    batch_id: int,
    select_sql: str,
    select_params: Sequence,
    has_timezone: bool,
    next_attempt_at: dt.datetime,
) -> int:
    """INSERT ... SELECT an audience (sa_key, sa_address, [sa_timezone,] sa_context); count."""
    timezone = "COALESCE(a.sa_timezone, '')" if has_timezone else "''"
    sql = FREEZE_RECIPIENTS.replace("{timezone}", timezone).replace("{select}", select_sql)
    adapt = connection.ops.adapt_datetimefield_value
    params = [batch_id, adapt(next_attempt_at), *select_params, batch_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def claim_recipients(
    *, batch_id: int, claim: str, limit: int, claim_for: dt.timedelta
) -> list[tuple]:
    """Claim up to ``limit`` due recipients of a batch for ``claim_for``, earliest due first."""
    adapt = connection.ops.adapt_datetimefield_value
    now = read_now()
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_RECIPIENTS,
            [claim, adapt(now + claim_for), batch_id, adapt(now), adapt(now), limit],
        )
        rows = cursor.fetchall()
    rows.sort(key=lambda row: (row[-1], row[0]))  # stored as text in a sortable form
    return [row[:-1] for row in rows]


def mark_and_begin(
    *,
    recipient_ids: Sequence[int],
    claim: str,
    claim_for: dt.timedelta,
    batch_id: int,
    marks: Sequence = (),
) -> tuple[dict[int, int], list[str]]:
    """Record ``marks``, then charge the attempt about to be made to each of
    ``recipient_ids`` that ``claim`` still owns; return ({recipient id: its attempt},
    statuses marked). One transaction."""
    with transaction.atomic():
        kept = mark_recipients(marks, claim=claim, batch_id=batch_id) if marks else []
        attempts = begin_recipients(recipient_ids=recipient_ids, claim=claim, claim_for=claim_for)
    return attempts, kept


def begin_recipients(
    *, recipient_ids: Sequence[int], claim: str, claim_for: dt.timedelta
) -> dict[int, int]:
    """Charge an attempt to those of ``recipient_ids`` that ``claim`` still owns, extending
    their claims by ``claim_for``; return {recipient id: its attempt}."""
    adapt = connection.ops.adapt_datetimefield_value
    sql = BEGIN_RECIPIENTS.replace("{ids}", ", ".join(["%s"] * len(recipient_ids)))
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(read_now(claim_for)), *recipient_ids, claim])
        return dict(cursor.fetchall())


@contextlib.contextmanager
def lane_session(*, synchronous_commit: bool) -> Iterator[None]:
    """Run a lane's statements (SQLite: as they are; its commits follow its own pragmas)."""
    yield


def extend_claims(*, recipient_ids: Sequence[int], claim: str, claim_for: dt.timedelta) -> int:
    """Extend ``claim`` by ``claim_for`` on those of ``recipient_ids`` it still holds."""
    if not recipient_ids:
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    sql = EXTEND_CLAIMS.replace("{ids}", ", ".join(["%s"] * len(recipient_ids)))
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(read_now(claim_for)), *recipient_ids, claim])
        return cursor.rowcount


def mark_recipients(rows: Sequence[Sequence], *, claim: str, batch_id: int) -> list[str]:
    """Record outcome rows and the lane's counters; return the statuses of rows still ours."""
    adapt = connection.ops.adapt_datetimefield_value
    kept = []
    with transaction.atomic(), connection.cursor() as cursor:
        for recipient_id, status, sent_at, message_id, error, next_attempt_at, refund in rows:
            cursor.execute(
                MARK_RECIPIENT,
                [
                    status,
                    adapt(sent_at),
                    message_id,
                    error,
                    adapt(next_attempt_at),
                    refund,
                    recipient_id,
                    claim,
                ],
            )
            if cursor.rowcount:
                kept.append(status)
        counts = [kept.count(status) for status in ("sent", "failed", "skipped")]
        if any(counts):
            cursor.execute(COUNT_MARKED, [batch_id, claim, *counts, adapt(read_now())])
    return kept


START = f"""
UPDATE {JOB}
SET lease_token = lease_token + 1, worker_id = %s, started_at = %s, lease_expires_at = %s
WHERE id = %s AND lease_token = %s AND status = 'running'
RETURNING id, task_name, payload, payload_version, attempts, max_attempts,
          scheduled_for, run_at, unique_key, lease_token, retry_later_deadline, started_at,
          queue
"""
"""Take a claimed job over under its lease token (see postgresql.START)."""


def start_jobs(
    deliveries: Sequence[tuple[int, int]], *, worker: str, lease: dt.timedelta
) -> list[tuple]:
    """Start each claimed job of ``deliveries`` ((job id, lease token) pairs) whose token is
    still its lease token (see postgresql.start_jobs); return their rows."""
    now = read_now()
    adapt = connection.ops.adapt_datetimefield_value
    rows = []
    with transaction.atomic(), connection.cursor() as cursor:
        for job_id, token in deliveries:
            cursor.execute(START, [worker, adapt(now), adapt(now + lease), job_id, token])
            row = cursor.fetchone()
            if row is not None:
                rows.append((*_convert(row[:-1]), row[-1]))
    return rows


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
"""Cancel a pending job inside its undo window and return it (see postgresql.UNDO)."""

JOB_STATE = f"""
SELECT {_JOB_STATE}, undo_deadline > %s FROM {JOB} WHERE id = %s AND (owner_id = %s OR %s IS NULL)
"""
"""A job as stored and whether its undo window is open (see postgresql.JOB_STATE)."""


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
        values[i] = _parse_datetime(values[i])
    return tuple(values)
