"""The database's clock in PostgreSQL statements: what leases, claims, undo windows and
retry times compare against (see scheduler_app.db.DatabaseNow)."""

from __future__ import annotations

import datetime as dt

from scheduler_app import clock
from scheduler_app.database import connection

NOW = "COALESCE({frozen}::timestamptz, statement_timestamp())"
"""The database's clock (see scheduler_app.db.DatabaseNow). ``{frozen}`` is a
parameter: NULL, or the frozen test clock. statement_timestamp(), not now():
now() stays at the start of the transaction. One text for both cases, so
prepared statements are reused."""


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
