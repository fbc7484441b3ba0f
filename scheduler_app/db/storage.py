"""Migration operation for a hot table's storage parameters (jobs, recipients).

PostgreSQL's ``ALTER TABLE ... SET (...)`` tunes how a table is stored and vacuumed
(``fillfactor``, ``autovacuum_*``). It takes a SHARE UPDATE EXCLUSIVE lock, so reads
and writes go on while it runs, and it rewrites nothing. SQLite has no such parameters:
there the operation does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import migrations


class SetStorageParameters(migrations.operations.base.Operation):
    """Set ``parameters`` on the table of ``model_name``; backwards, reset them to
    PostgreSQL's defaults (whoever set them)."""

    reversible = True

    def __init__(self, model_name: str, parameters: Mapping[str, Any]) -> None:
        self.model_name = model_name
        self.parameters = dict(parameters)

    def deconstruct(self) -> tuple[str, list, dict]:
        return (
            self.__class__.__qualname__,
            [],
            {"model_name": self.model_name, "parameters": self.parameters},
        )

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no model changes

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        settings = ", ".join("%s = %s" % item for item in self.parameters.items())
        self._alter(app_label, schema_editor, to_state, "SET (%s)" % settings)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        self._alter(app_label, schema_editor, to_state, "RESET (%s)" % ", ".join(self.parameters))

    def describe(self) -> str:
        return "Set storage parameters %s on %s" % (", ".join(self.parameters), self.model_name)

    def _alter(self, app_label: str, schema_editor: Any, state: Any, clause: str) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        model = state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            table = schema_editor.quote_name(model._meta.db_table)
            schema_editor.execute("ALTER TABLE %s %s" % (table, clause))
