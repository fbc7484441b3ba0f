"""Advisory locks that let one process at a time do a duty every worker offers to do, and
the bound on how long such a duty's transaction may wait."""

from __future__ import annotations

from scheduler_app.database import connection

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


TIME_LIMIT = (
    "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)"
)
"""Bound every statement of this transaction, and every wait for a lock (SET LOCAL)."""


def limit_transaction(seconds: float) -> None:
    """Cancel any statement of the current transaction that runs, or waits for a lock,
    longer than ``seconds`` (transaction-local, so through a transaction pooler too)."""
    limit = "%dms" % max(1, round(seconds * 1000))
    with connection.cursor() as cursor:
        cursor.execute(TIME_LIMIT, [limit, limit])
