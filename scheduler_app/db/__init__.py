"""The only raw SQL in scheduler_app, one module per database vendor.

``backend()`` returns the module for the default connection's vendor; both
modules expose the same functions (claim_jobs, finish_jobs, notify).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from django.db import connection

if TYPE_CHECKING:
    from scheduler_app.models import Job


def backend() -> ModuleType:
    """Return the SQL module for the default database's vendor."""
    if connection.vendor == "postgresql":
        from scheduler_app.db import postgresql

        return postgresql
    if connection.vendor == "sqlite":
        from scheduler_app.db import sqlite

        return sqlite
    raise NotImplementedError(
        "scheduler_app supports PostgreSQL and SQLite, not %s." % connection.vendor
    )


def notify_jobs_scheduled(jobs: Iterable[Job], *, now: dt.datetime) -> None:
    """Tell idle workers (PostgreSQL only) which queues got jobs, and from when.

    Sent in the caller's transaction, so workers hear of the jobs at commit,
    never of a job that rolled back.
    """
    earliest: dict[str, dt.datetime] = {}
    for job in jobs:
        if job.queue not in earliest or job.run_at < earliest[job.queue]:
            earliest[job.queue] = job.run_at
    if earliest:
        backend().notify(earliest)
