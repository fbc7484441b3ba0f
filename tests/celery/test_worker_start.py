"""What a real Celery worker says as it starts on a database that lacks one of
scheduler_app's migrations: its jobs' outcomes go through functions the migrations make
(docs/deploys.md), and unlike runworker it starts anyway (it may serve other tasks)."""

from __future__ import annotations

import pytest

from tests.helpers import migrate_database, scratch_database

pytestmark = [
    pytest.mark.celery,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]


def test_a_celery_worker_on_a_database_missing_a_migration_says_so_as_it_starts(
    broker, celery_worker
):
    with scratch_database("celery_unmigrated") as url:
        migrate_database(url, "scheduler_app", "0030_feedback_event_message")

        worker = celery_worker(database=url)

        try:
            worker.wait_for_output("The database has not been migrated: ")
            assert "of scheduler_app's migrations are not applied" in worker.output
            assert "Run manage.py migrate first." in worker.output
        finally:
            worker.kill()  # its connection would keep the scratch database from being dropped


def test_a_celery_worker_on_a_migrated_database_says_nothing_of_migrations(broker, celery_worker):
    worker = celery_worker()

    assert "migrat" not in worker.output, worker.output
