"""The database connection: no transaction-pooling connection pooler (E080), and where
workers LISTEN (E081)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

from scheduler_app.conf import app_settings


@register(Tags.database)
def check_no_transaction_pooling(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Error]:
    """Refuse PgBouncer in transaction-pooling mode, which Django marks with
    DISABLE_SERVER_SIDE_CURSORS (see docs/performance.md)."""
    default = settings.DATABASES.get("default", {})
    if not default.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Error(
            "scheduler_app does not support a transaction-pooling connection pooler (such as "
            "PgBouncer with pool_mode=transaction), which DATABASES['default']"
            "['DISABLE_SERVER_SIDE_CURSORS'] = True says this is: runworker LISTENs for new jobs "
            "on a session of its own and records outcomes and claims in one pipelined "
            "transaction.",
            hint="Connect to PostgreSQL directly or through session pooling "
            "(pool_mode=session); see docs/performance.md.",
            id="scheduler_app.E080",
        )
    ]


@register(Tags.compatibility)
def check_listen_database(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """LISTEN_DATABASE: None, "" or the alias of a PostgreSQL database (E081)."""
    alias = app_settings.LISTEN_DATABASE
    if alias is None or alias == "":
        return []
    database = settings.DATABASES.get(alias) if isinstance(alias, str) else None
    if database is not None and "postgresql" in database.get("ENGINE", ""):
        return []
    return [
        Error(
            "SCHEDULER_APP['LISTEN_DATABASE'] must be None, \"\" or the alias of a PostgreSQL "
            "database in DATABASES, not %r." % (alias,),
            hint='None LISTENs on the default database; "" makes workers poll every '
            "POLL_INTERVAL instead (docs/performance.md).",
            id="scheduler_app.E081",
        )
    ]
