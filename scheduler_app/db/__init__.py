"""The only raw SQL in scheduler_app, one module per database vendor.

``backend()`` returns the module for the default connection's vendor; both
modules expose the same functions (claim_jobs, finish_jobs, notify, now_sql,
undo_job, read_job_state).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, connection
from django.db.models import DateTimeField, Expression

if TYPE_CHECKING:
    from scheduler_app.models import Job


#: Values per ``IN (...)`` list: SQLite allows only so many parameters in one query.
IN_LIST_SIZE = 500


def in_lists(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """Split ``values`` into ``IN (...)`` lists of at most IN_LIST_SIZE values."""
    for start in range(0, len(values), IN_LIST_SIZE):
        yield values[start : start + IN_LIST_SIZE]


T = TypeVar("T")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate code point, which UTF-8 cannot encode, so
    no database's text can hold it (JSON's ``\\ud800`` escape gives one)."""
    return any("\ud800" <= char <= "\udfff" for char in text)


def write_across_reconnects(
    write: Callable[[], T],
    *,
    seconds: float,
    retry_on: tuple[type[DatabaseError], ...] = (DatabaseError,),
) -> T:
    """Return ``write()``; while it raises one of ``retry_on``, reconnect and try again,
    for up to ``seconds``, then raise the last error.

    For what a worker must not lose when its connection drops (the markers a lane holds,
    an attempt's outcome): the writes it retries are fenced, so one whose commit went
    through and whose answer was lost changes nothing the second time.
    """
    give_up = time.monotonic() + seconds
    pause = 0.5
    while True:
        try:
            return write()
        except retry_on:
            if time.monotonic() + pause > give_up:
                raise
            connection.close()
            time.sleep(pause)  # a backoff before reconnecting, not a synchronisation
            pause = min(pause * 2, 5.0)


def backend() -> ModuleType:
    """Return the SQL module for the default database's vendor."""
    return _backend_for(connection.vendor)


def _backend_for(vendor: str) -> ModuleType:
    if vendor == "postgresql":
        from scheduler_app.db import postgresql

        return postgresql
    if vendor == "sqlite":
        from scheduler_app.db import sqlite

        return sqlite
    raise NotImplementedError("scheduler_app supports PostgreSQL and SQLite, not %s." % vendor)


class DatabaseNow(Expression):
    """The database's clock plus ``offset``: what every comparison across hosts uses.

    Leases, their renewal and rescue, due times and undo deadlines compare
    against this, never against a host's clock, so a host whose clock is off
    can neither rescue a live job nor run one inside its undo window.

    PostgreSQL: ``statement_timestamp()``, or inside ``clock.frozen_clock``
    the frozen time (so tests that freeze the clock drive leases, rescue and
    undo). SQLite: ``clock.now()`` as a parameter (every process of a SQLite
    database shares one host clock).

    ORM: ``Job.objects.filter(lease_expires_at__lt=DatabaseNow())``,
    ``.update(lease_expires_at=DatabaseNow(lease))``. Raw SQL (under db/):
    ``sql, params = backend().now_sql(offset)`` gives a fragment with
    positional ``%s`` placeholders; a PostgreSQL statement with named
    parameters writes ``NOW.format(frozen="%(frozen)s")`` and passes
    ``{"frozen": clock.frozen_at()}`` (as CLAIM does); on SQLite pass
    ``clock.now()``. ``database_now(offset)`` reads the value in Python.
    """

    output_field = DateTimeField()

    def __init__(self, offset: dt.timedelta = dt.timedelta(0)) -> None:
        super().__init__()
        self.offset = offset

    def __repr__(self) -> str:
        return "DatabaseNow(%r)" % self.offset

    def as_sql(self, compiler: Any, conn: Any, **extra: Any) -> tuple[str, list]:
        return _backend_for(conn.vendor).now_sql(self.offset)


def database_now(offset: dt.timedelta = dt.timedelta(0)) -> dt.datetime:
    """Return DatabaseNow(offset) as an aware UTC datetime (one query on PostgreSQL)."""
    return backend().read_now(offset)


def stored_time_zone() -> dt.tzinfo:
    """Return the zone a database without time zones (SQLite) stores times in, naive:
    DATABASES' TIME_ZONE, else UTC (as Django writes and reads them)."""
    return connection.timezone or dt.UTC


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


#: Job columns an owner never sees and an undo never needs: large, kept for operators.
_NOT_READ_BACK = frozenset({"result", "last_error"})


@functools.cache
def job_state_columns() -> tuple[str, ...]:
    """Return the Job columns undo_job() and read_job_state() read, in the model's order."""
    from scheduler_app.models import Job

    return tuple(f.attname for f in Job._meta.concrete_fields if f.attname not in _NOT_READ_BACK)


def job_from_state(row: Sequence[Any]) -> Job:
    """Return the Job of a row of job_state_columns() (payload as JSON text, aware datetimes).

    The columns left out (result, last_error) are deferred: reading one queries.
    """
    from scheduler_app.models import Job

    columns = job_state_columns()
    values = list(row)
    payload = columns.index("payload")
    values[payload] = json.loads(values[payload])
    return Job.from_db(connection.alias, columns, values)
