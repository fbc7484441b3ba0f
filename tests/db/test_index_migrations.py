"""A concurrent index build that was interrupted (a statement timeout, a deploy killing
``migrate``) leaves an INVALID index, or a VALID one (a killed ``migrate``'s build that
PostgreSQL went on with), and its migration unapplied; running ``migrate`` again builds
or keeps it, instead of failing with "already exists"."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import migrate_database, scratch_database

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def test_migrate_again_builds_an_index_an_interrupted_build_left_invalid():
    with scratch_database("interrupted") as url:
        migrate_database(url, "scheduler_app", "0016")
        with psycopg.connect(url, autocommit=True) as db:
            # What an interrupted CREATE INDEX CONCURRENTLY of migration 0017 leaves.
            db.execute(
                "CREATE INDEX scheduler_recipient_message "
                "ON scheduler_app_recipient (provider_message_id)"
            )
            db.execute(
                "UPDATE pg_index SET indisvalid = false "
                "WHERE indexrelid = 'scheduler_recipient_message'::regclass"
            )

        migrate_database(url)

        with psycopg.connect(url) as db:
            valid, definition = db.execute(
                "SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index "
                "WHERE indexrelid = 'scheduler_recipient_message'::regclass"
            ).fetchone()
    assert valid
    assert "WHERE (NOT ((provider_message_id)::text = ''::text))" in definition  # 0017's


def test_migrate_again_keeps_the_indexes_a_killed_migrate_had_built():
    """0016 killed after its first index, and 0019 killed while PostgreSQL, which notices a
    lost client only when it next writes to it, finished the build."""
    built = {
        "0016": 'CREATE INDEX CONCURRENTLY "scheduler_job_owned" ON "scheduler_app_job" '
        '("owner_id", "id" DESC) WHERE "owner_id" IS NOT NULL',
        "0019": 'CREATE INDEX CONCURRENTLY "scheduler_job_runs_unfinished" ON "scheduler_app_job" '
        "(\"id\") WHERE (\"status\" IN ('pending', 'running') "
        "AND \"unique_key\"::text LIKE 'schedule:%')",
    }
    with scratch_database("killed") as url:
        for migration, statement in built.items():
            migrate_database(url, "scheduler_app", "%04d" % (int(migration) - 1))
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(statement)

            migrate_database(url, "scheduler_app", migration)

        with psycopg.connect(url) as db:
            valid = db.execute(
                "SELECT indexrelid::regclass::text, indisvalid FROM pg_index "
                "WHERE indexrelid::regclass::text IN "
                "('scheduler_job_owned', 'scheduler_job_runs_unfinished')"
            ).fetchall()
    assert sorted(valid) == [("scheduler_job_owned", True), ("scheduler_job_runs_unfinished", True)]


def test_migrations_0021_and_0022_swap_the_address_index_forwards_and_back():
    def address_indexes() -> dict[str, str]:
        with psycopg.connect(url) as db:
            rows = db.execute(
                "SELECT indexname, indexdef FROM pg_indexes "
                "WHERE tablename = 'scheduler_app_recipient' AND indexdef LIKE '%address%'"
            ).fetchall()
        return dict(rows)

    with scratch_database("address") as url:
        migrate_database(url, "scheduler_app", "0022")
        after = address_indexes()
        migrate_database(url, "scheduler_app", "0020")
        before = address_indexes()

    assert set(after) == {"scheduler_recipient_address_ci"}
    assert "upper((address)::text)" in after["scheduler_recipient_address_ci"]
    assert set(before) == {"scheduler_recipient_address"}
