"""How the hot statements reach PostgreSQL: server-side binding, a thread's reused
cursors, and statements prepared only where they ask (and again after a migration)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
from django.db import NotSupportedError
from psycopg.pq import TransactionStatus
from psycopg.types.datetime import TimestamptzLoader

from scheduler_app.database import connection
from scheduler_app.db import transaction_pooled

T = TypeVar("T")


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


#: psycopg prepares a statement after this many runs: never, unless the statement asks
#: for it (``prepare=True``).
ONLY_WHEN_ASKED = 2**62


def prepare_when_asked() -> psycopg.Connection:
    """Return Django's psycopg connection, set to prepare the statements that ask to be.

    Django connects with psycopg's ``prepare_threshold = None``, under which no statement
    is prepared, ``prepare=True`` included (unless the project's OPTIONS set a threshold,
    which is then kept). ONLY_WHEN_ASKED stays set for the life of the connection: psycopg
    then keeps track of what DEALLOCATE or DISCARD drop, and no other statement is
    prepared.

    Behind a transaction pooler (scheduler_app.db.transaction_pooled()) the connection is
    left as Django made it: a statement prepared in one transaction's server session is
    unknown to the next one's, so nothing is prepared, unless the project's OPTIONS set
    ``prepare_threshold``, which asks for psycopg's protocol-level prepared statements
    (PgBouncer 1.21+ with ``max_prepared_statements``; 1.22+ for prepared_again()).
    """
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None and not transaction_pooled():
        raw.prepare_threshold = ONLY_WHEN_ASKED
    return raw


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
