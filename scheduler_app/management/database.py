"""What the management commands check of the database before they use it."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DatabaseError, connection
from django.db.migrations.loader import MigrationLoader

APP = "scheduler_app"


def database_ready() -> None:
    """Raise CommandError, in one line, unless the database answers and holds every
    scheduler_app migration this code knows of."""
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        raise CommandError("The database cannot be reached: %s" % one_line(exc)) from exc
    check_migrated()


def check_migrated() -> None:
    """Raise CommandError unless every scheduler_app migration is applied (a database
    that answers but was never migrated, or is older than this code)."""
    loader = MigrationLoader(connection)
    graph, applied = loader.graph, loader.applied_migrations
    missing = sorted(
        {
            name
            for leaf in graph.leaf_nodes(APP)
            for app, name in graph.forwards_plan(leaf)
            if app == APP and (app, name) not in applied
        }
    )
    if missing:
        raise CommandError(
            "The database has not been migrated: %s of %s's migrations are not applied "
            "(the first: %s). Run manage.py migrate first." % (len(missing), APP, missing[0])
        )


def one_line(exc: Exception) -> str:
    """Return the text of ``exc`` on one line (drivers' messages span several)."""
    return " ".join(str(exc).split())
