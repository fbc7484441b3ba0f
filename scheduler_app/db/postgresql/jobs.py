"""Jobs: the SKIP LOCKED claim, the batched finish (both in one round trip), the Celery
executor's start, and the NOTIFY that wakes idle workers."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

import psycopg
from psycopg.types.numeric import Int4

from scheduler_app import clock
from scheduler_app.database import connection
from scheduler_app.db.postgresql.clock import NOW
from scheduler_app.db.postgresql.statements import (
    bound_cursor,
    native_timestamps,
    prepare_when_asked,
    prepared_again,
    reused_cursor,
)
from scheduler_app.models import Job, JobAttempt
from scheduler_app.models.jobs import IN_HOT_PARTITION

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table

#: The channel workers LISTEN on; each payload is "<queue> <run_at epoch>".
CHANNEL = "scheduler_app_jobs"


CLAIM = """
SELECT * FROM scheduler_app_claim_jobs(%(worker)s, %(queues)s, %(limit)s, %(frozen)s,
                                       %(lease)s, %(paused_tasks)s, %(started)s)
"""
"""Claim up to `limit` due jobs: a function of migration 0031 (its SQL and comments are
there), whose plan PostgreSQL keeps per server session, also behind a transaction pooler.
FOR UPDATE SKIP LOCKED so a slow claimer never blocks the others, and a row a cancel
holds is skipped, not waited for. Due, lease and start times are the database's clock;
the worker measures its job's times from the claim's time, returned last (see
worker.execution.ClaimedJob.now). It reads the claim index in claim order and stops
after `limit` entries, statistics or none (tests/db/test_next_due_index.py).

``started``: false for the Celery relay, whose jobs a Celery worker starts (start_jobs
sets started_at); the rescue tells them from started ones by it."""

FINISH = "SELECT * FROM scheduler_app_finish_jobs(%s::json, %s::bigint[], %s)"
"""Record many finished attempts in one statement: a function of migration 0031 (see
CLAIM). The rows come as one JSON array of objects (see _finish_params): one parameter
to encode instead of fifteen arrays, whose element-by-element encoding was the worker's
largest cost per job. The lease_token guard fences out a worker whose lease expired: its
rows match nothing, and write no history row even beside the current attempt's outcome
of the same job. An attempt-history row is written only where ``history`` says the job
row cannot tell the attempt (see Finish.needs_history_row); where it can, the row keeps
the worker that ran it. Returns the (id, token) of each outcome accepted."""

NOTIFY = "SELECT pg_notify(%s, %s)"
"""Wake idle workers; inside a transaction it is delivered at commit."""


def claim_jobs(
    *,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str] = (),
    started: bool = True,
) -> list[tuple]:
    """Claim up to ``limit`` due jobs for ``worker``; return their rows (see CLAIM).

    The lease runs ``lease`` from the database's clock. ``started``: see CLAIM.
    """
    return finish_and_claim(
        [],
        worker=worker,
        queues=queues,
        limit=limit,
        lease=lease,
        paused_tasks=paused_tasks,
        started=started,
    )[1]


def _claim_params(
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: dt.timedelta,
    paused_tasks: Sequence[str],
    started: bool,
) -> dict:
    return {
        "started": started,
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
    started: bool = True,
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """finish_jobs(rows) and CLAIM in one round trip; return (accepted, claimed rows), where
    accepted is as finish_jobs() returns it.

    With no ``rows`` it is only the claim (claim_jobs() is that).

    The statements go out together in psycopg's pipeline mode and run in one
    implicit transaction (or the caller's), committed once at the pipeline's
    sync: one network round trip and one WAL flush instead of two each. If any
    fails, none is applied and the error is raised.

    Both are prepared where the connection allows it (see prepare_when_asked() and
    prepared_again()), and the functions they call keep their own plans in the server
    session: parsing and planning CLAIM and FINISH on every turn was about two thirds of
    PostgreSQL's CPU per job (bench/worker.py), and a quarter of the drain behind a
    transaction pooler, which prepares nothing.
    """
    raw = prepare_when_asked()
    finish = _finish_params(rows, worker) if rows else None
    claim = _claim_params(worker, queues, limit, lease, paused_tasks, started)
    return prepared_again(lambda: _finish_and(raw, finish, "claim", CLAIM, claim))


def _finish_and(
    raw: psycopg.Connection, finish: list | None, role: str, statement: str, params: dict | None
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """Send FINISH (unless ``finish`` is None) and ``statement`` (unless ``params`` is None,
    on this thread's cursor for ``role``) in one pipeline; return (accepted, its rows)."""
    finishing = reused_cursor("finish")
    other = reused_cursor(role, set_up=native_timestamps)
    with connection.wrap_database_errors:
        with raw.pipeline():
            if finish is not None:
                finishing.execute(FINISH, finish, prepare=True)
            if params is not None:
                other.execute(statement, params, prepare=True)
        # Read once the pipeline has ended: a fetch inside it sends a sync of its own, and
        # the end of the block another, which cost a second round trip on every turn.
        accepted = set(finishing.fetchall()) if finish is not None else set()
        return accepted, other.fetchall() if params is not None else []


def notify(earliest_by_queue: dict[str, dt.datetime]) -> None:
    """NOTIFY workers of each queue's earliest new run time."""
    with connection.cursor() as cursor:
        for queue, run_at in earliest_by_queue.items():
            cursor.execute(NOTIFY, [CHANNEL, "%s %.6f" % (queue, run_at.timestamp())])


START = f"""
UPDATE {JOB}
SET lease_token = {JOB}.lease_token + 1, worker_id = %(worker)s,
    started_at = {NOW.format(frozen="%(frozen)s")},
    lease_expires_at = {NOW.format(frozen="%(frozen)s")} + %(lease)s
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS delivered (id, token)
WHERE {JOB}.id = ANY(%(ids)s::bigint[]) AND {JOB}.id = delivered.id
  AND {JOB}.lease_token = delivered.token AND ({JOB}.status = 'running') IS TRUE
  AND {IN_HOT_PARTITION}
RETURNING {JOB}.id, task_name, payload::text, payload_version, attempts, max_attempts,
          scheduled_for, run_at, unique_key, {JOB}.lease_token, retry_later_deadline,
          started_at, queue
"""
"""Take claimed jobs over under their lease tokens, moving each token on (the Celery
executor's published -> started): of two deliveries of one message only one matches.
Returns CLAIM's columns and the queue, for the jobs that matched. Rows are found by
primary key and the status guard is written ``IS TRUE``, as in FINISH: written plainly,
it matched the partial index of running jobs, and every start read every running job
(a thousand waiting in the broker, and their dead index entries). IN_HOT_PARTITION keeps
it to the hot partition where the job table is partitioned (scheduler_app.partitions)."""


def start_jobs(
    deliveries: Sequence[tuple[int, int]], *, worker: str, lease: dt.timedelta
) -> list[tuple]:
    """Start each claimed job of ``deliveries`` ((job id, lease token) pairs) whose token is
    still its lease token, in one statement (see START); return their rows."""
    return finish_and_start([], "", deliveries, worker=worker, lease=lease)[1]


def finish_and_start(
    rows: Sequence[Sequence],
    finished_by: str,
    deliveries: Sequence[tuple[int, int]],
    *,
    worker: str,
    lease: dt.timedelta,
) -> tuple[set[tuple[int, int]], list[tuple]]:
    """finish_jobs(rows, worker=finished_by) and start_jobs(deliveries, ...) in one round
    trip and one commit; return (accepted, started rows).

    A Celery worker process records its tasks' outcomes and starts their next deliveries
    together, as finish_and_claim() does for runworker: in pipeline mode, in one
    implicit transaction (or the caller's); if either fails, neither is applied and the
    error is raised. Both are prepared (see finish_and_claim()).
    """
    raw = prepare_when_asked()
    finish = _finish_params(rows, finished_by) if rows else None
    start = (
        {
            "ids": [job_id for job_id, _ in deliveries],
            "tokens": [token for _, token in deliveries],
            "worker": worker,
            "frozen": clock.frozen_at(),
            "lease": lease,
        }
        if deliveries
        else None
    )
    return prepared_again(lambda: _finish_and(raw, finish, "start", START, start))


STILL_PUBLISHED = f"""
SELECT id FROM {JOB}
WHERE id = ANY(%s::bigint[]) AND worker_id = %s AND ({JOB}.status = 'running') IS TRUE
"""
"""Which of the jobs a Celery relay published no Celery worker has started yet: they still
run under the relay's worker id. By primary key (see START for the ``IS TRUE``)."""


def still_published(ids: Sequence[int], *, relay: str) -> set[int]:
    """Return those of ``ids`` still claimed by ``relay`` and not yet started (see
    STILL_PUBLISHED): one array parameter, where an ``IN`` list of a thousand ids cost the
    relay more to quote than PostgreSQL to answer."""
    with bound_cursor() as cursor:
        cursor.execute(STILL_PUBLISHED, [list(ids), relay])
        return {job_id for (job_id,) in cursor.fetchall()}
