"""Migration operations for indexes on the hot tables (jobs, recipients).

Workers keep claiming while a migration runs, so a new index on such a table
is built without locking out writes: ``CREATE INDEX CONCURRENTLY`` on
PostgreSQL (the migration must declare ``atomic = False``), a plain index on
SQLite, which has no concurrent build and serialises writes anyway.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.models import Index


def _concurrently(
    operation: Any, app_label: str, schema_editor: Any, state: Any, index: Any, *, build: bool
) -> bool:
    """On PostgreSQL, build (or drop) ``index`` on ``operation``'s model CONCURRENTLY and
    return True; elsewhere return False: the caller runs the plain operation."""
    if schema_editor.connection.vendor != "postgresql":
        return False
    model = state.apps.get_model(app_label, operation.model_name)
    if operation.allow_migrate_model(schema_editor.connection.alias, model):
        if not build:
            schema_editor.remove_index(model, index, concurrently=True)  # DROP ... IF EXISTS
        elif not _built_already(schema_editor, index.name):
            schema_editor.add_index(model, index, concurrently=True)
    return True


def _built_already(schema_editor: Any, name: str) -> bool:
    """Return whether an interrupted run of the migration left the index ``name`` built;
    drop it if it left it INVALID.

    A ``CREATE INDEX CONCURRENTLY`` that fails or is cancelled (a statement timeout)
    leaves the index behind, unusable: PostgreSQL's advice is to drop it and build again.
    One whose ``migrate`` was killed may finish all the same (the server notices a lost
    client only when it next writes to it), and a migration of several operations may be
    killed after its first ones: those indexes are VALID and kept. Either way the
    migration is unapplied, and building again would fail with "already exists".
    """
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        row = cursor.fetchone()
    if row is None:
        return False
    if row[0]:
        return True
    schema_editor.execute("DROP INDEX CONCURRENTLY IF EXISTS %s" % schema_editor.quote_name(name))
    return False


class AddIndexConcurrently(migrations.AddIndex):
    """AddIndex, built with CONCURRENTLY on PostgreSQL; in a non-atomic migration."""

    atomic = False

    def describe(self) -> str:
        return "Concurrently create index %s on %s" % (self.index.name, self.model_name)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if not _concurrently(self, app_label, schema_editor, to_state, self.index, build=True):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if not _concurrently(self, app_label, schema_editor, from_state, self.index, build=False):
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class RemoveIndexConcurrently(migrations.RemoveIndex):
    """RemoveIndex, dropped with CONCURRENTLY on PostgreSQL; in a non-atomic migration."""

    atomic = False

    def describe(self) -> str:
        return "Concurrently remove index %s from %s" % (self.name, self.model_name)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
        if not _concurrently(self, app_label, schema_editor, from_state, index, build=False):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
        if not _concurrently(self, app_label, schema_editor, to_state, index, build=True):
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class DropFieldIndexConcurrently(migrations.AlterField):
    """AlterField that turns a field's ``db_index`` off; the index is dropped with
    CONCURRENTLY on PostgreSQL (in a non-atomic migration). Backwards, it is built
    again the plain way."""

    atomic = False

    def describe(self) -> str:
        return "Concurrently drop the index of %s.%s" % (self.model_name, self.name)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        column = model._meta.get_field(self.name).column
        declared = {index.name for index in model._meta.indexes}
        for name in schema_editor._constraint_names(
            model, [column], index=True, type_=Index.suffix, exclude=declared
        ):
            schema_editor.execute(
                "DROP INDEX CONCURRENTLY IF EXISTS %s" % schema_editor.quote_name(name)
            )

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        # AlterField's own backwards calls database_forwards with the states swapped.
        super().database_forwards(app_label, schema_editor, from_state, to_state)
