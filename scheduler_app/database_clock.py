"""The database's clock as a query expression: DatabaseNow.

It sits below the models (their querysets compare leases and heartbeats with it) and
below db/, whose vendor modules hold the SQL that reads each database's clock:
AppConfig.ready() connects db/'s writer of that SQL to ``now_sql``, so this module
imports neither. ``scheduler_app.db.DatabaseNow`` is the same class.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import DateTimeField, Expression

from scheduler_app.hooks import Hook

#: ``now_sql(vendor, offset)``: the database's clock plus ``offset`` in ``vendor``'s SQL,
#: and its params (``scheduler_app.db.now_sql``).
now_sql: Hook[[str, dt.timedelta], tuple[str, list]] = Hook("database_clock.now_sql")


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
    ``clock.now()``. ``scheduler_app.db.database_now(offset)`` reads the value in Python.
    """

    output_field = DateTimeField()

    def __init__(self, offset: dt.timedelta = dt.timedelta(0)) -> None:
        super().__init__()
        self.offset = offset

    def __repr__(self) -> str:
        return "DatabaseNow(%r)" % self.offset

    def as_sql(self, compiler: Any, conn: Any, **extra: Any) -> tuple[str, list]:
        return now_sql(conn.vendor, self.offset)
