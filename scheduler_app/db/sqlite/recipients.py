"""Send recipients: freeze an audience, claim a chunk, and the per-recipient sent markers,
fenced by the lane's claim, one statement at a time in a transaction."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence

from scheduler_app import database
from scheduler_app.database import connection
from scheduler_app.db.sqlite.clock import read_now

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
WHERE id IN ({{ids}}) AND batch_id = %s AND claimed_by = %s AND status = 'pending'
RETURNING id, attempts
"""

EXTEND_CLAIMS = f"""
UPDATE {RECIPIENT} SET claimed_until = %s
WHERE id IN ({{ids}}) AND batch_id = %s AND claimed_by = %s AND status = 'pending'
"""

COUNT_MARKED = """
INSERT INTO scheduler_app_laneprogress AS l (batch_id, claim, sent, failed, skipped, progressed_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (claim) DO UPDATE
SET sent = l.sent + excluded.sent, failed = l.failed + excluded.failed,
    skipped = l.skipped + excluded.skipped, progressed_at = excluded.progressed_at
"""
"""Add a lane's newly marked recipients to its own counter row (see
postgresql.recipients._MARKED)."""

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
    with database.atomic():
        kept = mark_recipients(marks, claim=claim, batch_id=batch_id) if marks else []
        attempts = begin_recipients(
            recipient_ids=recipient_ids, batch_id=batch_id, claim=claim, claim_for=claim_for
        )
    return attempts, kept


def begin_recipients(
    *, recipient_ids: Sequence[int], batch_id: int, claim: str, claim_for: dt.timedelta
) -> dict[int, int]:
    """Charge an attempt to those of ``recipient_ids`` (of batch ``batch_id``) that
    ``claim`` still owns, extending their claims by ``claim_for``; return {recipient id:
    its attempt}."""
    adapt = connection.ops.adapt_datetimefield_value
    sql = BEGIN_RECIPIENTS.replace("{ids}", ", ".join(["%s"] * len(recipient_ids)))
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(read_now(claim_for)), *recipient_ids, batch_id, claim])
        return dict(cursor.fetchall())


@contextlib.contextmanager
def lane_session(*, synchronous_commit: bool) -> Iterator[None]:
    """Run a lane's statements (SQLite: as they are; its commits follow its own pragmas)."""
    yield


def extend_claims(
    *, recipient_ids: Sequence[int], batch_id: int, claim: str, claim_for: dt.timedelta
) -> int:
    """Extend ``claim`` by ``claim_for`` on those of ``recipient_ids`` (of batch
    ``batch_id``) it still holds."""
    if not recipient_ids:
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    sql = EXTEND_CLAIMS.replace("{ids}", ", ".join(["%s"] * len(recipient_ids)))
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(read_now(claim_for)), *recipient_ids, batch_id, claim])
        return cursor.rowcount


def mark_recipients(rows: Sequence[Sequence], *, claim: str, batch_id: int) -> list[str]:
    """Record outcome rows and the lane's counters; return the statuses of rows still ours."""
    adapt = connection.ops.adapt_datetimefield_value
    kept = []
    with database.atomic(), connection.cursor() as cursor:
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
