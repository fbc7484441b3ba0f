"""What the management commands check of the database before they use it."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError
from django.db.migrations.executor import MigrationExecutor

from scheduler_app.database import alias, connection

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
    """Raise CommandError unless every scheduler_app migration is applied to the scheduler's
    database (one that answers but was never migrated, or is older than this code)."""
    missing = unapplied_migrations(APP)
    if missing:
        where = "" if alias() == DEFAULT_DB_ALIAS else " --database=%s" % alias()
        raise CommandError(
            "The database has not been migrated: %s of %s's migrations are not applied "
            "(the first: %s). Run manage.py migrate%s first."
            % (len(missing), APP, missing[0].split(".", 1)[1], where)
        )


def unapplied_migrations(app_label: str | None = None) -> list[str]:
    """Return "app.name" of each migration not applied yet to the scheduler's database, in
    the order migrate would apply them: those of ``app_label``, or of every app."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes(app_label))
    return [
        "%s.%s" % (migration.app_label, migration.name)
        for migration, _ in plan
        if app_label is None or migration.app_label == app_label
    ]


def one_line(exc: Exception) -> str:
    """Return the text of ``exc`` on one line (drivers' messages span several)."""
    return " ".join(str(exc).split())
