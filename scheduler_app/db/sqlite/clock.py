"""SQLite's clock: the host's (every process of a SQLite database runs on one host), and
the times SQLite stores read back as aware datetimes, as PostgreSQL returns them."""

from __future__ import annotations

import datetime as dt

from scheduler_app import clock
from scheduler_app.database import connection
from scheduler_app.db import stored_time_zone


def now_sql(offset: dt.timedelta = dt.timedelta(0)) -> tuple[str, list]:
    """Return the clock plus ``offset`` as SQL and params: clock.now(), a parameter.

    Every process of a SQLite database runs on one host, so its clock is the
    database's.
    """
    return "%s", [connection.ops.adapt_datetimefield_value(read_now(offset))]


def read_now(offset: dt.timedelta = dt.timedelta(0)) -> dt.datetime:
    """Return the clock plus ``offset``."""
    return clock.now() + offset


def parse_datetime(value: str | dt.datetime | None) -> dt.datetime | None:
    """Return a time SQLite stored (naive, in stored_time_zone()) as an aware datetime."""
    # Django's sqlite3 converters may already have parsed it.
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=stored_time_zone())
