"""Migration operation for the PostgreSQL functions the claim loop calls.

The claim loop's hot statements (the claim, the batched finish) are PL/pgSQL functions,
so that PostgreSQL keeps their plans in each server session: a prepared statement does
that for one client connection only, and behind a transaction pooler (PgBouncer's
``pool_mode = transaction``) nothing can be prepared across transactions, where parsing
and planning both statements on every turn cost a quarter of the drain
(bench/results-worker.md). A function's plans belong to the server session, which the
pooler keeps between its clients. SQLite has no functions: there the operation does
nothing (its statements are in scheduler_app.db.sqlite).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


class RunSQLOnPostgreSQL(migrations.RunSQL):
    """RunSQL on PostgreSQL only; elsewhere nothing, either way."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
