"""The job table is autovacuumed after a fixed number of dead rows, however many finished
jobs it keeps, and its indexes are cleaned each time (issue #14: the claim steps over
every entry claimed since the last index clean-up, so its cost must not grow with the
history kept)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.helpers import job_storage

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def test_the_job_table_is_vacuumed_indexes_included_after_a_fixed_number_of_dead_rows():
    with connection.cursor() as cursor:
        # Partitioned, the hot partition's (history partitions take no updates).
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [job_storage()])
        (options,) = cursor.fetchone()

    assert set(options or ()) >= {
        "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=10000",
        "vacuum_index_cleanup=on",
    }
