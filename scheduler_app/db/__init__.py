"""The only raw SQL in scheduler_app, one package per database vendor.

``backend()`` returns the package for the vendor of the scheduler's database
(``scheduler_app.database``, whose connection every statement here runs on),
``postgresql`` or ``sqlite``; both expose the same functions (see their
``__init__``), each kept in a module named for what it does: ``jobs`` (claim,
finish, start), ``recipients`` (a send's markers), ``undo``, ``clock``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError

from scheduler_app.database import connection
from scheduler_app.database_clock import DatabaseNow as DatabaseNow  # documented here too

if TYPE_CHECKING:
    from scheduler_app.models import Job

#: Values per ``IN (...)`` list: SQLite allows only so many parameters in one query.
IN_LIST_SIZE = 500


def in_lists(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """Split ``values`` into ``IN (...)`` lists of at most IN_LIST_SIZE values."""
    for start in range(0, len(values), IN_LIST_SIZE):
        yield values[start : start + IN_LIST_SIZE]


T = TypeVar("T")


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


def transaction_pooled(settings_dict: Mapping[str, Any] | None = None) -> bool:
    """Return whether a database's connections go through a transaction-pooling pooler
    (PgBouncer's ``pool_mode = transaction``): the default database's, or the one of
    ``settings_dict`` (an entry of DATABASES).

    Told by ``DISABLE_SERVER_SIDE_CURSORS = True``, the setting Django's documentation
    asks of a project behind transaction pooling. There a server session serves another
    client after each transaction, so nothing may outlive one: no session SET, no
    prepared statement (unless the project asks for them, see
    postgresql.statements.prepare_when_asked()), no LISTEN (LISTEN_DATABASE).
    """
    if settings_dict is None:
        settings_dict = connection.settings_dict
    return bool(settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


def backend() -> ModuleType:
    """Return the SQL module for the vendor of the scheduler's database."""
    return _backend_for(connection.vendor)


def _backend_for(vendor: str) -> ModuleType:
    # Imported on first use: this package loads before the models (the migrations' operations
    # in indexes.py and storage.py are under it), and the vendor modules build their
    # statements from the models' tables.
    if vendor == "postgresql":
        from scheduler_app.db import postgresql

        return postgresql
    if vendor == "sqlite":
        from scheduler_app.db import sqlite

        return sqlite
    raise NotImplementedError("scheduler_app supports PostgreSQL and SQLite, not %s." % vendor)


def now_sql(vendor: str, offset: dt.timedelta) -> tuple[str, list]:
    """Return the database's clock plus ``offset`` in ``vendor``'s SQL, and its params: what
    DatabaseNow compiles to (AppConfig.ready() hands this to it)."""
    return _backend_for(vendor).now_sql(offset)


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
