"""The migrations that tune the hot tables' storage (0018: the job table's autovacuum,
0025: the recipient table's fillfactor) reset their parameters backwards and set them
again forwards (issue #14). Run on the test database inside the test's transaction, so
PostgreSQL's transactional DDL undoes them."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

MIGRATIONS = {
    "0018_job_table_autovacuum": (
        "scheduler_app_job",
        {
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=10000",
            "vacuum_index_cleanup=on",
        },
    ),
    "0025_recipient_table_fillfactor": ("scheduler_app_recipient", {"fillfactor=50"}),
}


def options_of(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
        (options,) = cursor.fetchone()
    return set(options or ())


@pytest.mark.parametrize(
    "name",
    [
        # 0018 tunes the table before migration 0033 partitions it: backwards it runs on
        # a job table that is one table.
        pytest.param("0018_job_table_autovacuum", marks=pytest.mark.plain_job_table),
        pytest.param("0025_recipient_table_fillfactor", marks=pytest.mark.plain_job_table),
    ],
)
def test_a_storage_migration_resets_its_parameters_backwards_and_sets_them_forwards(name):
    table, parameters = MIGRATIONS[name]
    migration = importlib.import_module("scheduler_app.migrations.%s" % name).Migration
    (operation,) = migration.operations
    state = MigrationLoader(connection).project_state()
    assert options_of(table) >= parameters  # migrated

    with connection.schema_editor() as editor:
        operation.database_backwards("scheduler_app", editor, state, state)
    assert not options_of(table) & parameters

    with connection.schema_editor() as editor:
        operation.database_forwards("scheduler_app", editor, state, state)
    assert options_of(table) >= parameters
