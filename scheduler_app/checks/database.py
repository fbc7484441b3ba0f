"""The database connection: behind a transaction-pooling pooler, LISTEN needs a direct
connection or polling (E080); where workers LISTEN (E081)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

from scheduler_app.conf import app_settings
from scheduler_app.database import alias
from scheduler_app.db import transaction_pooled

#: What to do instead of LISTEN through a transaction pooler: E080's hint.
LISTEN_INSTEAD = (
    "Set SCHEDULER_APP['LISTEN_DATABASE'] to the alias of a DATABASES entry that connects "
    "to the same database directly or through session pooling (pool_mode=session), without "
    "DISABLE_SERVER_SIDE_CURSORS; or to '' to poll every POLL_INTERVAL instead of "
    "listening. See docs/performance.md."
)


@register(Tags.database)
def check_transaction_pooling(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Error]:
    """Behind a transaction-pooling pooler (DISABLE_SERVER_SIDE_CURSORS = True on the
    scheduler's database, as Django documents it), require a LISTEN_DATABASE that is not
    one: a LISTEN there stays on whichever server session ran it, and the worker never
    hears a NOTIFY. Everything else works through such a pooler (docs/performance.md)."""
    scheduler_database = settings.DATABASES.get(alias(), {})
    if not transaction_pooled(scheduler_database):
        return []
    listen = app_settings.LISTEN_DATABASE
    if listen is None:
        return [
            Error(
                "DATABASES[%r] goes through a transaction-pooling connection pooler "
                "(DISABLE_SERVER_SIDE_CURSORS = True), where runworker cannot LISTEN for new "
                "jobs, and SCHEDULER_APP['LISTEN_DATABASE'] is None (LISTEN on that "
                "connection)." % alias(),
                hint=LISTEN_INSTEAD,
                id="scheduler_app.E080",
            )
        ]
    listen_database = settings.DATABASES.get(listen) if isinstance(listen, str) else None
    if listen and isinstance(listen_database, dict) and transaction_pooled(listen_database):
        return [
            Error(
                "SCHEDULER_APP['LISTEN_DATABASE'] is %r, whose DATABASES entry goes through a "
                "transaction-pooling connection pooler too (DISABLE_SERVER_SIDE_CURSORS = "
                "True), where runworker cannot LISTEN for new jobs." % listen,
                hint=LISTEN_INSTEAD,
                id="scheduler_app.E080",
            )
        ]
    return []


@register(Tags.compatibility)
def check_listen_database(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """LISTEN_DATABASE: None, "" or the alias of a PostgreSQL database (E081)."""
    listen = app_settings.LISTEN_DATABASE
    if listen is None or listen == "":
        return []
    database = settings.DATABASES.get(listen) if isinstance(listen, str) else None
    if database is not None and "postgresql" in database.get("ENGINE", ""):
        return []
    return [
        Error(
            "SCHEDULER_APP['LISTEN_DATABASE'] must be None, \"\" or the alias of a PostgreSQL "
            "database in DATABASES, not %r." % (listen,),
            hint='None LISTENs on the scheduler\'s database; "" makes workers poll every '
            "POLL_INTERVAL instead (docs/performance.md).",
            id="scheduler_app.E081",
        )
    ]
