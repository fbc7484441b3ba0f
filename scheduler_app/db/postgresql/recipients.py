"""Send recipients: freeze an audience, claim a chunk, and the per-recipient sent markers
(mark and begin), fenced by the lane's claim, on a lane's own session."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from django.db import DatabaseError
from psycopg.types.numeric import Int4, Int8

from scheduler_app import clock
from scheduler_app.database import connection
from scheduler_app.db import transaction_pooled
from scheduler_app.db.postgresql.clock import NOW
from scheduler_app.db.postgresql.statements import (
    bound_cursor,
    prepare_when_asked,
    prepared_again,
    reused_cursor,
)

RECIPIENT = "scheduler_app_recipient"

FREEZE_RECIPIENTS = f"""
INSERT INTO {RECIPIENT} (batch_id, recipient_key, address, timezone, context, is_seed, status,
                         attempts, next_attempt_at, claimed_by, provider_message_id, last_error)
SELECT DISTINCT ON (a.sa_key::text)
       %s, a.sa_key::text, COALESCE(a.sa_address::text, ''), {{timezone}}, a.sa_context,
       false, 'pending', 0, %s, '', '', ''
FROM ({{select}}) AS a
WHERE NOT EXISTS (SELECT FROM {RECIPIENT} WHERE batch_id = %s AND NOT is_seed)
ORDER BY a.sa_key::text
"""
"""Snapshot an audience server-side, de-duplicated by recipient key in the SELECT (one
row of a key wins). The batch's freeze is exclusive (start_sending holds the batch row
and freezes only a batch not yet frozen), so nothing but its seed markers can be in
the way: no ON CONFLICT, whose check of each row against the unique index measured
more than the sort. The rows go in sorted by key, so the unique index is filled from
left to right. A batch that already has recipients gets none (a second freeze adds
nothing); an audience key equal to one of the batch's seed keys (``seed:...``) violates
the unique constraint and the freeze fails, rather than leave that recipient out."""

LANE = "scheduler_app_laneprogress"

COUNT_IN_LANE = """ON CONFLICT (claim) DO UPDATE
    SET sent = l.sent + excluded.sent, failed = l.failed + excluded.failed,
        skipped = l.skipped + excluded.skipped, progressed_at = excluded.progressed_at"""
"""Add a lane's newly marked recipients to its LaneProgress row (made by its first mark)."""

CLAIM_RECIPIENTS = f"""
WITH due AS MATERIALIZED (
    SELECT id FROM {RECIPIENT}
    WHERE batch_id = %(batch)s AND status = 'pending' AND NOT is_seed
      AND next_attempt_at <= {NOW.format(frozen="%(frozen)s")}
      AND (claimed_until IS NULL OR claimed_until < {NOW.format(frozen="%(frozen)s")})
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {RECIPIENT} AS r
SET claimed_by = %(claim)s, claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
FROM due
WHERE r.id = due.id AND r.batch_id = %(batch)s
RETURNING r.id, r.recipient_key, r.address, r.timezone, r.context::text, r.attempts
"""
"""Claim a chunk of a batch's due recipients, earliest due first; SKIP LOCKED so workers
share a batch. No attempt is charged here: MARK_AND_BEGIN charges the ones being sent.
Only the partial index scheduler_recipient_due gives this order, so the plan does not
depend on statistics that know nothing yet of a batch just frozen. The locking query runs
once, as a MATERIALIZED CTE: see jobs.CLAIM."""

EXTEND_CLAIMS = f"""
UPDATE {RECIPIENT} AS r SET claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
FROM (
    SELECT id FROM {RECIPIENT}
    WHERE id = ANY(%(ids)s) AND batch_id = %(batch)s AND claimed_by = %(claim)s
      AND status = 'pending'
    ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
) AS free
WHERE r.id = free.id AND r.batch_id = %(batch)s
"""
"""Keep the not yet sent rest of a chunk claimed while the lane works through it. Rows
another transaction holds are skipped, not waited for: one keeper thread serves every
lane of a process (sends.claim_keeper), so one lane's locked rows must not hold up the
others' extensions. The next extension, a third of a claim later, takes them."""

_MARKED = f"""
marked AS (
    UPDATE {RECIPIENT} AS r
    SET status = v.status, sent_at = v.sent_at, provider_message_id = v.message_id,
        last_error = COALESCE(v.error, r.last_error),
        next_attempt_at = COALESCE(v.next_attempt_at, r.next_attempt_at),
        attempts = r.attempts - v.refund, claimed_by = '', claimed_until = NULL
    FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::text[], %s::text[],
                %s::timestamptz[], %s::int[])
         AS v(id, status, sent_at, message_id, error, next_attempt_at, refund)
    WHERE r.id = v.id AND r.batch_id = %s AND r.status = 'pending'
      AND r.claimed_by = (SELECT %s::text)
    RETURNING v.status
), counted AS (
    INSERT INTO {LANE} AS l (batch_id, claim, sent, failed, skipped, progressed_at)
    SELECT %s, %s, c.sent, c.failed, c.skipped, {NOW.format(frozen="%s")}
    FROM (SELECT count(*) FILTER (WHERE status = 'sent') AS sent,
                 count(*) FILTER (WHERE status = 'failed') AS failed,
                 count(*) FILTER (WHERE status = 'skipped') AS skipped
          FROM marked) AS c
    WHERE c.sent + c.failed + c.skipped > 0
    {COUNT_IN_LANE}
)"""
"""Record outcomes and the lane's counters, fenced by the claim: an expired claim
changes nothing. The counters go to the lane's own LaneProgress row (with its
progressed_at, for the stalled-send alert), never to the batch row: every lane of a
batch would queue on that one row's lock, held across each commit's WAL flush.
Parameters: the seven outcome columns, the batch, the claim, the batch, the claim, the
frozen clock. Every statement on recipients names the batch: the planner then reads one
partition of a partitioned recipient table (scheduler_app.recipient_partitions).

The rows are found from the outcomes (a nested loop over the primary key). The statement
is not prepared: a generic plan of it measured two to three times the CPU of the custom
ones (the lane's usual case, one outcome, runs MARK_ONE_AND_BEGIN, which is prepared).
The claim is compared through an InitPlan: compared to a literal, its selectivity comes from
statistics in which every row is unclaimed, the planner expects one row, scans the whole
table and rescans the arrays for each row it finds."""

MARK_RECIPIENTS = f"WITH {_MARKED}\nSELECT status FROM marked"
"""Record outcomes and counters (see _MARKED); return the statuses of the rows still ours."""

MARK_AND_BEGIN = f"""
WITH {_MARKED}, begun AS (
    UPDATE {RECIPIENT}
    SET attempts = attempts + 1, claimed_until = {NOW.format(frozen="%s")} + %s
    WHERE id = ANY(%s::bigint[]) AND batch_id = %s AND claimed_by = (SELECT %s::text)
      AND status = 'pending'
    RETURNING id, attempts
)
SELECT (SELECT array_agg(status) FROM marked), (SELECT array_agg(id) FROM begun),
       (SELECT array_agg(attempts) FROM begun)
"""
"""Record the outcomes of the calls that returned (see _MARKED, none is fine), then check
that the claim still owns the next recipients, charge each the attempt about to be made
and extend their claims over the provider calls; one statement and one commit, so the
markers and the attempts commit before those calls. A recipient missing from ``begun``:
another lane took it over."""

MARK_ONE_AND_BEGIN = f"""
WITH marked AS (
    UPDATE {RECIPIENT}
    SET status = %(status)s, sent_at = %(sent_at)s, provider_message_id = %(message_id)s,
        last_error = COALESCE(%(error)s, last_error),
        next_attempt_at = COALESCE(%(next_attempt_at)s, next_attempt_at),
        attempts = attempts - %(refund)s, claimed_by = '', claimed_until = NULL
    WHERE id = %(marked)s AND batch_id = %(batch)s AND claimed_by = %(claim)s
      AND status = 'pending'
    RETURNING status
), begun AS (
    UPDATE {RECIPIENT}
    SET attempts = attempts + 1, claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
    WHERE id = %(begin)s AND batch_id = %(batch)s AND claimed_by = %(claim)s
      AND status = 'pending'
    RETURNING attempts
), counted AS (
    INSERT INTO {LANE} AS l (batch_id, claim, sent, failed, skipped, progressed_at)
    SELECT %(batch)s, %(claim)s, (m.status = 'sent')::int, (m.status = 'failed')::int,
           (m.status = 'skipped')::int, {NOW.format(frozen="%(frozen)s")}
    FROM marked AS m
    WHERE m.status <> 'pending'
    {COUNT_IN_LANE}
)
SELECT (SELECT status FROM marked), (SELECT attempts FROM begun)
"""
"""MARK_AND_BEGIN for at most one outcome (the lane's usual case with per-recipient
markers): scalar parameters, every row found by its primary key, so the prepared
statement runs a generic plan and is not planned again for each recipient. Its counter
goes to the lane's own row, as in _MARKED."""

BEGIN_RECIPIENTS = f"""
UPDATE {RECIPIENT}
SET attempts = attempts + 1, claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
WHERE id = ANY(%(ids)s) AND batch_id = %(batch)s AND claimed_by = (SELECT %(claim)s::text)
  AND status = 'pending'
RETURNING id, attempts
"""
"""Charge the attempt about to be made to each of a group of recipients the claim still
owns and extend their claims over the calls: an idempotent provider's lane begins a
group with one statement (see MARK_AND_BEGIN for one recipient)."""


LANE_SESSION = """
SELECT current_setting('synchronous_commit'), set_config('synchronous_commit', %s, false)
"""
"""Set a lane's session up; return the setting it replaces."""

RESTORE_SESSION = "SELECT set_config('synchronous_commit', %s, false)"
"""Give the connection back as it was before LANE_SESSION."""

LANE_TRANSACTION = "SELECT set_config('synchronous_commit', %s, true)"
"""Behind a transaction pooler: a lane's synchronous_commit for one transaction (SET LOCAL),
sent before its statement in the same pipeline (see _execute)."""


class _LaneTransactions(threading.local):
    """Behind a transaction pooler, the synchronous_commit this thread's lane statements set
    for their own transactions; None: they set nothing (see lane_session)."""

    synchronous_commit: str | None = None


_lane = _LaneTransactions()


@contextlib.contextmanager
def lane_session(*, synchronous_commit: bool) -> Iterator[None]:
    """Run a lane's statements without waiting for the WAL flush if ``synchronous_commit``
    is False, and with its per-recipient statement prepared; restore the connection's
    synchronous_commit afterwards.

    With prepare_when_asked(), MARK_ONE_AND_BEGIN is parsed and planned once per
    connection instead of once per recipient (about half of its CPU in PostgreSQL).

    Behind a transaction pooler (scheduler_app.db.transaction_pooled()) the session is
    left alone: it serves other clients between the lane's transactions. Each of the lane's
    own statements sets synchronous_commit for its transaction instead (LANE_TRANSACTION,
    in the same round trip), always: a server session may keep a value another client SET
    on it, and the next transaction may run on any of them. Nothing is prepared unless the
    project asks (see prepare_when_asked()).
    """
    wanted = "on" if synchronous_commit else "off"
    if transaction_pooled():
        prepare_when_asked()
        _lane.synchronous_commit = wanted
        try:
            yield
        finally:
            _lane.synchronous_commit = None
        return
    with connection.cursor() as cursor:
        cursor.execute(LANE_SESSION, [wanted])
        previous = cursor.fetchone()[:1]
    prepare_when_asked()
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(RESTORE_SESSION, list(previous))
        except DatabaseError:
            # Settings that cannot be restored must not leak into the next job's work.
            connection.close()


def _execute(cursor: psycopg.Cursor, sql: str, params: Any, *, prepare: bool | None = None) -> None:
    """Run a lane's statement on ``cursor``; behind a transaction pooler, after the lane's
    LANE_TRANSACTION in the same transaction and round trip (a pipeline) if it has one."""
    setting = _lane.synchronous_commit
    if setting is None:
        cursor.execute(sql, params, prepare=prepare)
        return
    with cursor.connection.pipeline():
        reused_cursor("lane transaction").execute(LANE_TRANSACTION, [setting])
        cursor.execute(sql, params, prepare=prepare)


def freeze_recipients(
    *,
    batch_id: int,
    select_sql: str,
    select_params: Sequence,
    has_timezone: bool,
    next_attempt_at: dt.datetime,
) -> int:
    """INSERT ... SELECT an audience (sa_key, sa_address, [sa_timezone,] sa_context); count."""
    timezone = "COALESCE(a.sa_timezone::text, '')" if has_timezone else "''"
    sql = FREEZE_RECIPIENTS.replace("{timezone}", timezone).replace("{select}", select_sql)
    # In the order the placeholders appear: batch, time, the SELECT's own, batch.
    params = [batch_id, next_attempt_at, *select_params, batch_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def claim_recipients(
    *, batch_id: int, claim: str, limit: int, claim_for: dt.timedelta
) -> list[tuple]:
    """Claim up to ``limit`` due recipients for ``claim_for`` by the database's clock.

    Returns (id, key, address, tz, context, attempts) rows.
    """
    with bound_cursor() as cursor:
        _execute(
            cursor,
            CLAIM_RECIPIENTS,
            {
                "batch": batch_id,
                "claim": claim,
                "limit": limit,
                "claim_for": claim_for,
                "frozen": clock.frozen_at(),
            },
        )
        return cursor.fetchall()


def mark_and_begin(
    *,
    recipient_ids: Sequence[int],
    claim: str,
    claim_for: dt.timedelta,
    batch_id: int,
    marks: Sequence = (),
) -> tuple[dict[int, int], list[str]]:
    """Record ``marks`` (see mark_recipients), then charge the attempt about to be made to
    each of ``recipient_ids`` that ``claim`` still owns, extending its claim by
    ``claim_for``; return ({recipient id: its attempt}, statuses marked)."""
    if len(recipient_ids) == 1 and len(marks) <= 1:
        attempt, kept = _mark_one_and_begin(
            recipient_id=recipient_ids[0],
            claim=claim,
            claim_for=claim_for,
            batch_id=batch_id,
            mark=marks[0] if marks else None,
        )
        return ({} if attempt is None else {recipient_ids[0]: attempt}), kept
    columns = [list(column) for column in zip(*marks, strict=True)] if marks else [[]] * 7
    with bound_cursor() as cursor:
        _execute(
            cursor,
            MARK_AND_BEGIN,
            [
                *columns,
                batch_id,
                claim,
                batch_id,
                claim,
                clock.frozen_at(),
                clock.frozen_at(),
                claim_for,
                list(recipient_ids),
                batch_id,
                claim,
            ],
        )
        statuses, ids, attempts = cursor.fetchone()
    return dict(zip(ids or [], attempts or [], strict=True)), list(statuses or [])


def _mark_one_and_begin(
    *,
    recipient_id: int,
    claim: str,
    claim_for: dt.timedelta,
    batch_id: int,
    mark: Sequence | None,
) -> tuple[int | None, list[str]]:
    """mark_and_begin() of one recipient with at most one mark (see MARK_ONE_AND_BEGIN)."""
    marked, status, sent_at, message_id, error, next_attempt_at, refund = mark or (
        (None, "", None, "", "", None, 0)
    )
    params = {
        # Typed, so the prepared statement's parameter types do not follow the ids'
        # sizes (psycopg sends the smallest integer type a value fits in).
        "marked": None if marked is None else Int8(marked),
        "status": status,
        "sent_at": sent_at,
        "message_id": message_id,
        "error": error,
        "next_attempt_at": next_attempt_at,
        "refund": Int4(refund),
        "begin": Int8(recipient_id),
        "claim": claim,
        "claim_for": claim_for,
        "batch": Int8(batch_id),
        "frozen": clock.frozen_at(),
    }
    ((status, attempt),) = _run_prepared(MARK_ONE_AND_BEGIN, params)
    return attempt, [] if status is None else [status]


def begin_recipients(
    *, recipient_ids: Sequence[int], batch_id: int, claim: str, claim_for: dt.timedelta
) -> dict[int, int]:
    """Charge an attempt to those of ``recipient_ids`` (of batch ``batch_id``) that
    ``claim`` still owns, extending their claims by ``claim_for``; return {recipient id:
    its attempt}."""
    params = {
        "ids": list(recipient_ids),
        "batch": Int8(batch_id),
        "claim": claim,
        "claim_for": claim_for,
        "frozen": clock.frozen_at(),
    }
    return dict(_run_prepared(BEGIN_RECIPIENTS, params))


def _run_prepared(sql: str, params: dict) -> list[tuple]:
    """Run ``sql`` as a prepared statement on a server-binding cursor (prepared again
    after a migration, see prepared_again()); return its rows."""

    def run() -> list[tuple]:
        cursor = reused_cursor("prepared")
        with connection.wrap_database_errors:
            _execute(cursor, sql, params, prepare=True)
            return cursor.fetchall()

    return prepared_again(run)


def extend_claims(
    *, recipient_ids: Sequence[int], batch_id: int, claim: str, claim_for: dt.timedelta
) -> int:
    """Extend ``claim`` by ``claim_for`` on those of ``recipient_ids`` (of batch
    ``batch_id``) it still holds."""
    if not recipient_ids:
        return 0
    with bound_cursor() as cursor:
        cursor.execute(
            EXTEND_CLAIMS,
            {
                "ids": list(recipient_ids),
                "batch": batch_id,
                "claim": claim,
                "claim_for": claim_for,
                "frozen": clock.frozen_at(),
            },
        )
        return cursor.rowcount


def mark_recipients(rows: Sequence[Sequence], *, claim: str, batch_id: int) -> list[str]:
    """Record (id, status, sent_at, message_id, error, next_attempt_at, refund) rows.

    Adds the sent, failed and skipped ones to the lane's counters. Returns the
    statuses of the rows that still held our claim.
    """
    if not rows:
        return []
    columns = [list(column) for column in zip(*rows, strict=True)]
    with bound_cursor() as cursor:
        _execute(
            cursor,
            MARK_RECIPIENTS,
            [*columns, batch_id, claim, batch_id, claim, clock.frozen_at()],
        )
        return [row[0] for row in cursor.fetchall()]
