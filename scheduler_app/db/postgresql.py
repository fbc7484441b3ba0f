"""PostgreSQL statements: SKIP LOCKED claim, batched finish, LISTEN/NOTIFY."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import psycopg
from django.db import DatabaseError, NotSupportedError, connection
from django.db.models import QuerySet
from psycopg.pq import TransactionStatus
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.numeric import Int4, Int8

from scheduler_app import clock
from scheduler_app.db.job_state import job_state_columns
from scheduler_app.models import Job, JobAttempt

T = TypeVar("T")

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table

#: The channel workers LISTEN on; each payload is "<queue> <run_at epoch>".
CHANNEL = "scheduler_app_jobs"


@contextlib.contextmanager
def bound_cursor() -> Iterator[psycopg.Cursor]:
    """Yield a cursor that binds parameters on the server, for the hot statements.

    Django's default client-side binding quotes every array element in
    Python; server-side binding sends them as they are. A statement is
    prepared only where it asks (see prepare_when_asked): Django connects with
    psycopg's ``prepare_threshold = None``. Errors are Django's.
    """
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


class _ThreadCursors(threading.local):
    """reused_cursor()'s cursors: this thread's, on one psycopg connection."""

    def __init__(self) -> None:
        self.raw: psycopg.Connection | None = None
        self.by_role: dict[str, psycopg.Cursor] = {}


_reused = _ThreadCursors()


def reused_cursor(
    role: str, set_up: Callable[[psycopg.Cursor], None] | None = None
) -> psycopg.Cursor:
    """Return this thread's server-binding cursor for ``role`` (see bound_cursor) on
    Django's connection, made once per connection.

    For the statements run once per job turn or per recipient: a new psycopg cursor sets
    its adapters and dumpers up again, which cost the client 20-25 µs of the 90-110 µs
    its per-recipient statement took (measured in process, see the CHANGELOG). Its
    rows must be read before the same role is asked for again; wrap its statements in
    ``connection.wrap_database_errors``. ``set_up`` is called on each new cursor. After a
    reconnection the thread gets new cursors.
    """
    connection.ensure_connection()
    raw = connection.connection
    if _reused.raw is not raw:
        _reused.raw, _reused.by_role = raw, {}
    cursor = _reused.by_role.get(role)
    if cursor is None:
        cursor = _reused.by_role[role] = psycopg.Cursor(raw)
        if set_up is not None:
            set_up(cursor)
    return cursor


def native_timestamps(cursor: psycopg.Cursor) -> None:
    """Let ``cursor`` read timestamptz with psycopg's own loader (C) instead of Django's.

    Django's loader subclasses psycopg's Python one to set the time zone, so every value is
    parsed in Python: about 3 µs each against 0.2, two or three per claimed job. psycopg's
    loader returns datetimes in the session's time zone, which Django sets to the
    connection's; it is used only where that gives the very tzinfo Django's loader sets.
    It does not without USE_TZ (naive datetimes), nor with a database TIME_ZONE of "UTC"
    (psycopg's datetime.timezone.utc, Django's ZoneInfo("UTC")).
    """
    wanted = connection.timezone
    if wanted is not None and cursor.connection.info.timezone is wanted:
        cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


NOW = "COALESCE({frozen}::timestamptz, statement_timestamp())"
"""The database's clock (see scheduler_app.db.DatabaseNow). ``{frozen}`` is a
parameter: NULL, or the frozen test clock. statement_timestamp(), not now():
now() stays at the start of the transaction. One text for both cases, so
prepared statements are reused."""

CLAIM = f"""
WITH due AS MATERIALIZED (
    SELECT id FROM {JOB}
    WHERE status = 'pending' AND queue = ANY(%(queues)s)
      AND run_at <= {NOW.format(frozen="%(frozen)s")}
      AND NOT (task_name = ANY(%(paused_tasks)s))
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {JOB} AS j
SET status = 'running', worker_id = %(worker)s,
    lease_expires_at = {NOW.format(frozen="%(frozen)s")} + %(lease)s,
    started_at = {NOW.format(frozen="%(frozen)s")}, attempts = j.attempts + 1,
    lease_token = j.lease_token + 1
FROM due
WHERE j.id = due.id
RETURNING j.id, j.task_name, j.payload::text, j.payload_version, j.attempts, j.max_attempts,
          j.scheduled_for, j.run_at, j.unique_key, j.lease_token, j.retry_later_deadline,
          j.started_at
"""
"""Claim up to `limit` due jobs. SKIP LOCKED so a slow claimer never blocks the
others, and a row a cancel holds is skipped, not waited for. Due, lease and start
times are the database's clock; the worker measures its job's times from the
started_at returned (see worker.execution.ClaimedJob.now).

The locking query is a MATERIALIZED CTE, run once. As a subquery in FROM, with the
statistics of an emptied table the planner put it inside a nested loop and ran it
again for each row of the table: each run skipped the rows already updated and locked
the next ones, and one claim took every due job (tests/db/test_claim_limits.py)."""

IN_CLAIM_ORDER = "SELECT set_config('enable_sort', 'off', true)"
"""Sent before CLAIM in the same transaction: the claim index holds pending jobs in claim
order, so a claim reads `limit` entries and stops. Without statistics (a fresh install's
first burst, until autoanalyze runs) the planner guesses that almost nothing is pending,
and reading every due job and sorting them looks as cheap: 7 ms per claim at 20,000 due
jobs instead of 0.1 ms. Transaction-local; AFTER_CLAIM puts it back at once."""

AFTER_CLAIM = "SET LOCAL enable_sort TO DEFAULT"

FINISH = f"""
WITH v AS (
    SELECT * FROM json_to_recordset(%s::json) AS v(
        id bigint, token bigint, status text, outcome text, run_at timestamptz, refund int,
        error text, finished_at timestamptz, result text, deadline timestamptz,
        attempt int, task_name text, due_at timestamptz, started_at timestamptz, history bool)
), done AS (
    UPDATE {JOB} AS j
    SET status = v.status,
        run_at = COALESCE(v.run_at, j.run_at),
        attempts = j.attempts - v.refund,
        finished_at = CASE WHEN v.status = 'pending' THEN NULL ELSE v.finished_at END,
        last_error = v.error,
        result = v.result::jsonb,
        retry_later_deadline = COALESCE(v.deadline, j.retry_later_deadline),
        worker_id = CASE WHEN v.history THEN '' ELSE j.worker_id END,
        lease_expires_at = NULL
    FROM v
    WHERE j.id = ANY(%s::bigint[]) AND j.id = v.id AND j.lease_token = v.token
      AND (j.status = 'running') IS TRUE
    RETURNING j.id, j.lease_token AS token
), recorded AS (
    INSERT INTO {ATTEMPT} (job_id, attempt, task_name, worker_id, due_at, started_at,
                           finished_at, outcome, error)
    SELECT v.id, v.attempt, v.task_name, %s, v.due_at, v.started_at, v.finished_at, v.outcome,
           v.error
    FROM v JOIN done ON done.id = v.id AND done.token = v.token
    WHERE v.history
)
SELECT id, token FROM done
"""
"""Record many finished attempts in one statement. The rows come as one JSON array of
objects (see _finish_params): one parameter to encode instead of fifteen arrays, whose
element-by-element encoding was the worker's largest cost per job. The lease_token guard
fences out a worker whose lease expired: its rows match nothing, and write no
history row even beside the current attempt's outcome of the same job. Rows are found
by primary key (``j.id = ANY(ids)``); the status guard is written ``IS TRUE`` so
that it implies no partial index's predicate, or the planner may scan one of them
(every pending job) instead. An attempt-history row is written only where
``history`` says the job row cannot tell the attempt (see Finish.needs_history_row);
where it can, the row keeps the worker that ran it."""

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
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
) -> list[tuple]:
    """Claim up to ``limit`` due jobs for ``worker``; return their rows (see CLAIM).

    The lease runs ``lease`` from the database's clock.
    """
    return finish_and_claim(
        [],
        worker=worker,
        queues=queues,
        limit=limit,
        lease=lease,
        paused_tasks=paused_tasks,
    )[1]


def _claim_params(
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str],
) -> dict:
    return {
        "worker": worker,
        "queues": list(queues),
        "limit": Int4(limit),  # one type whatever the value, so one prepared statement
        "frozen": clock.frozen_at(),
        "lease": lease,
        "paused_tasks": list(paused_tasks),
    }


def finish_jobs(rows: Sequence[Sequence], *, worker: str) -> set[tuple[int, int]]:
    """Apply finish rows (see worker.execution.Finish.as_row); return the (job id, lease
    token) of each outcome accepted."""
    if not rows:
        return set()
    with bound_cursor() as cursor:
        cursor.execute(FINISH, _finish_params(rows, worker))
        return set(cursor.fetchall())


#: The columns of a finish row (worker.execution.Finish.as_row), as FINISH names them.
FINISH_COLUMNS = (
    "id",
    "token",
    "status",
    "outcome",
    "run_at",
    "refund",
    "error",
    "finished_at",
    "result",
    "deadline",
    "attempt",
    "task_name",
    "due_at",
    "started_at",
    "history",
)


#: The columns FINISH reads only to write an attempt-history row.
HISTORY_ONLY = frozenset({"outcome", "attempt", "task_name", "due_at", "started_at"})


def _finish_params(rows: Sequence[Sequence], worker: str) -> list:
    # json_to_recordset reads a missing key as NULL: a None, and the history-only columns
    # of a row that writes no history (most rows: a first attempt that succeeds), are left
    # out, which spares their encoding in the worker and their parsing in the server.
    objects = [
        {
            name: value
            for name, value in zip(FINISH_COLUMNS, row, strict=True)
            if value is not None and (row[-1] or name not in HISTORY_ONLY)
        }
        for row in rows
    ]
    return [
        json.dumps(objects, ensure_ascii=False, default=_isoformat),
        [row[0] for row in rows],
        worker,
    ]


def _isoformat(value: dt.datetime) -> str:
    """JSON for a timestamp: ISO 8601 with its offset, which timestamptz reads exactly."""
    return value.isoformat()


def finish_and_claim(
    rows: Sequence[Sequence],
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """finish_jobs(rows) and CLAIM in one round trip; return (accepted, claimed rows), where
    accepted is as finish_jobs() returns it.

    With no ``rows`` it is only the claim (claim_jobs() is that).

    The statements go out together in psycopg's pipeline mode and run in one
    implicit transaction (or the caller's), committed once at the pipeline's
    sync: one network round trip and one WAL flush instead of two each. If any
    fails, none is applied and the error is raised. CLAIM runs between
    IN_CLAIM_ORDER and AFTER_CLAIM.

    All four are prepared: parsing and planning CLAIM and FINISH on every turn was
    about two thirds of PostgreSQL's CPU per job (bench/worker.py). After five runs
    PostgreSQL plans them generically; CLAIM's generic plan is made under
    IN_CLAIM_ORDER, so it reads the claim index in order too (see also
    prepared_again()).
    """
    raw = prepare_when_asked()
    finish = _finish_params(rows, worker) if rows else None
    claim = _claim_params(worker, queues, limit, lease, paused_tasks)
    return prepared_again(lambda: _finish_and_claim(raw, finish, claim))


def prepared_again(run: Callable[[], T]) -> T:
    """Return ``run()``, which sends statements prepared on this connection; run it once
    more if a migration has since changed the type of a column they return.

    PostgreSQL then refuses such a statement until it is prepared again ("cached plan
    must not change result type"), on every run, so a worker would fail each turn. Outside
    a transaction (a refused statement changed nothing), the connection's prepared
    statements are dropped and ``run`` is called again. Inside one, the error stands: the
    caller's rollback makes psycopg forget them.
    """
    try:
        return run()
    except NotSupportedError as exc:
        raw = connection.connection
        if not _stale_plan(exc) or raw.info.transaction_status != TransactionStatus.IDLE:
            raise
        with connection.wrap_database_errors:
            raw.execute("DEALLOCATE ALL")  # psycopg forgets its prepared statements too
        return run()


def _stale_plan(exc: NotSupportedError) -> bool:
    """Whether ``exc`` is PostgreSQL's refusal of a statement whose result type changed.
    Told by the server function that raises it: the message may be translated."""
    diag = getattr(exc.__cause__, "diag", None)
    return diag is not None and diag.source_function == "RevalidateCachedQuery"


def _finish_and_claim(
    raw: psycopg.Connection, finish: list | None, claim: dict
) -> tuple[set[tuple[int, int]], list[tuple]]:
    finishing = reused_cursor("finish")
    claiming = reused_cursor("claim", set_up=native_timestamps)
    setting = reused_cursor("claim settings")
    with connection.wrap_database_errors:
        with raw.pipeline():
            if finish is not None:
                finishing.execute(FINISH, finish, prepare=True)
            setting.execute(IN_CLAIM_ORDER, prepare=True)
            claiming.execute(CLAIM, claim, prepare=True)
            setting.execute(AFTER_CLAIM, prepare=True)
        # Read once the pipeline has ended: a fetch inside it sends a sync of its own, and
        # the end of the block another, which cost a second round trip on every turn.
        accepted = set(finishing.fetchall()) if finish is not None else set()
        return accepted, claiming.fetchall()


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
    """Return (task, count, p50, p95, max) rows for a (task_name, due_at, started_at) queryset."""
    sql, params = attempts.query.sql_with_params()
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


ALERT_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('scheduler_app.alerts'))"
"""Let one process at a time evaluate the alert rules; released at commit."""


def try_alert_lock() -> bool:
    """Take the alert evaluator's transaction-level advisory lock if it is free."""
    with connection.cursor() as cursor:
        cursor.execute(ALERT_LOCK)
        return bool(cursor.fetchone()[0])


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
WHERE r.id = due.id
RETURNING r.id, r.recipient_key, r.address, r.timezone, r.context::text, r.attempts
"""
"""Claim a chunk of a batch's due recipients, earliest due first; SKIP LOCKED so workers
share a batch. No attempt is charged here: MARK_AND_BEGIN charges the ones being sent.
Only the partial index scheduler_recipient_due gives this order, so the plan does not
depend on statistics that know nothing yet of a batch just frozen. The locking query runs
once, as a MATERIALIZED CTE: see CLAIM."""

EXTEND_CLAIMS = f"""
UPDATE {RECIPIENT} AS r SET claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
FROM (
    SELECT id FROM {RECIPIENT}
    WHERE id = ANY(%(ids)s) AND claimed_by = %(claim)s AND status = 'pending'
    ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
) AS free
WHERE r.id = free.id
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
    WHERE r.id = v.id AND r.status = 'pending' AND r.claimed_by = (SELECT %s::text)
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
Parameters: the seven outcome columns, the claim, the batch, the claim, the frozen clock.

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
    WHERE id = ANY(%s::bigint[]) AND claimed_by = (SELECT %s::text) AND status = 'pending'
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
    WHERE id = %(marked)s AND claimed_by = %(claim)s AND status = 'pending'
    RETURNING status
), begun AS (
    UPDATE {RECIPIENT}
    SET attempts = attempts + 1, claimed_until = {NOW.format(frozen="%(frozen)s")} + %(claim_for)s
    WHERE id = %(begin)s AND claimed_by = %(claim)s AND status = 'pending'
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
WHERE id = ANY(%(ids)s) AND claimed_by = (SELECT %(claim)s::text) AND status = 'pending'
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


#: psycopg prepares a statement after this many runs: never, unless the statement asks
#: for it (``prepare=True``).
ONLY_WHEN_ASKED = 2**62


def prepare_when_asked() -> psycopg.Connection:
    """Return Django's psycopg connection, set to prepare the statements that ask to be.

    Django connects with psycopg's ``prepare_threshold = None``, under which no statement
    is prepared, ``prepare=True`` included (unless the project's OPTIONS set a threshold,
    which is then kept). ONLY_WHEN_ASKED stays set for the life of the connection: psycopg
    then keeps track of what DEALLOCATE or DISCARD drop, and no other statement is
    prepared. Workers need a session of their own anyway (LISTEN, synchronous_commit): not
    a pooler in transaction mode.
    """
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = ONLY_WHEN_ASKED
    return raw


@contextlib.contextmanager
def lane_session(*, synchronous_commit: bool) -> Iterator[None]:
    """Run a lane's statements without waiting for the WAL flush if ``synchronous_commit``
    is False, and with its per-recipient statement prepared; restore the connection's
    synchronous_commit afterwards.

    With prepare_when_asked(), MARK_ONE_AND_BEGIN is parsed and planned once per
    connection instead of once per recipient (about half of its CPU in PostgreSQL).
    """
    with connection.cursor() as cursor:
        cursor.execute(LANE_SESSION, ["on" if synchronous_commit else "off"])
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
        cursor.execute(
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
        cursor.execute(
            MARK_AND_BEGIN,
            [
                *columns,
                claim,
                batch_id,
                claim,
                clock.frozen_at(),
                clock.frozen_at(),
                claim_for,
                list(recipient_ids),
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
    *, recipient_ids: Sequence[int], claim: str, claim_for: dt.timedelta
) -> dict[int, int]:
    """Charge an attempt to those of ``recipient_ids`` that ``claim`` still owns, extending
    their claims by ``claim_for``; return {recipient id: its attempt}."""
    params = {
        "ids": list(recipient_ids),
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
            cursor.execute(sql, params, prepare=True)
            return cursor.fetchall()

    return prepared_again(run)


def extend_claims(*, recipient_ids: Sequence[int], claim: str, claim_for: dt.timedelta) -> int:
    """Extend ``claim`` by ``claim_for`` on those of ``recipient_ids`` it still holds."""
    if not recipient_ids:
        return 0
    with bound_cursor() as cursor:
        cursor.execute(
            EXTEND_CLAIMS,
            {
                "ids": list(recipient_ids),
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
        cursor.execute(MARK_RECIPIENTS, [*columns, claim, batch_id, claim, clock.frozen_at()])
        return [row[0] for row in cursor.fetchall()]


START = f"""
UPDATE {JOB}
SET lease_token = {JOB}.lease_token + 1, worker_id = %(worker)s,
    started_at = {NOW.format(frozen="%(frozen)s")},
    lease_expires_at = {NOW.format(frozen="%(frozen)s")} + %(lease)s
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS delivered (id, token)
WHERE {JOB}.id = delivered.id AND {JOB}.lease_token = delivered.token
  AND {JOB}.status = 'running'
RETURNING {JOB}.id, task_name, payload::text, payload_version, attempts, max_attempts,
          scheduled_for, run_at, unique_key, {JOB}.lease_token, retry_later_deadline,
          started_at, queue
"""
"""Take claimed jobs over under their lease tokens, moving each token on (the Celery
executor's published -> started): of two deliveries of one message only one matches.
Returns CLAIM's columns and the queue, for the jobs that matched."""


def start_jobs(
    deliveries: Sequence[tuple[int, int]], *, worker: str, lease: dt.timedelta
) -> list[tuple]:
    """Start each claimed job of ``deliveries`` ((job id, lease token) pairs) whose token is
    still its lease token, in one statement (see START); return their rows."""
    with bound_cursor() as cursor:
        cursor.execute(
            START,
            {
                "ids": [job_id for job_id, _ in deliveries],
                "tokens": [token for _, token in deliveries],
                "worker": worker,
                "frozen": clock.frozen_at(),
                "lease": lease,
            },
        )
        return cursor.fetchall()


def _prune_jobs_sql() -> str:
    from scheduler_app.models import ScheduleOccurrence, SyncCursor

    return f"""
WITH doomed AS (
    SELECT id FROM {JOB}
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at < %(cutoff)s
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
    DELETE FROM {JOB} WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM attempts),
       (SELECT count(*) FROM occurrences), (SELECT count(*) FROM cursors)
"""


PRUNE_JOBS = _prune_jobs_sql()
"""Delete up to `limit` finished jobs older than `cutoff` with their attempts, and unlink
their occurrences and sync cursors (what the ORM's on_delete would do), in one statement
that the partial index scheduler_job_prunable serves. FOR UPDATE re-checks the terminal
state on each locked row; SKIP LOCKED passes over a row a worker holds. A new foreign key
to the job table must be handled here (tests/db/test_retention.py checks the list); a
project's own is refused by system check E059 (checks.check_job_relations)."""


def prune_finished_jobs(*, cutoff: dt.datetime, limit: int) -> int:
    """Delete up to ``limit`` jobs finished before ``cutoff`` (see PRUNE_JOBS); return how many."""
    with bound_cursor() as cursor:
        cursor.execute(PRUNE_JOBS, {"cutoff": cutoff, "limit": limit})
        jobs, _attempts, _occurrences, _cursors = cursor.fetchone()
    return jobs


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
