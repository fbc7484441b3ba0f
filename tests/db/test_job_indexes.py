"""Every index on the job table that covers a row is written when a claim or a finish
changes the row (neither is a HOT update): only the indexes a claimed job needs may
cover it (issue #14: the cost of each job). Migrations 0016, which slims them, 0019,
which adds one for schedules' unfinished runs, and 0023-0024, which widen the task index
to cancelled jobs, run forwards and backwards on a database of their own."""

from __future__ import annotations

import psycopg
import pytest

from scheduler_app import clock
from scheduler_app.models import Job
from tests.helpers import indexes_covering, migrate_database, scratch_database

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def test_a_claimed_job_is_in_only_the_indexes_a_running_job_needs():
    now = clock.now()
    job = Job.objects.create(
        task_name="tests.record",
        status=Job.Status.RUNNING,
        scheduled_for=now,
        run_at=now,
        started_at=now,
        lease_expires_at=now,
        attempts=1,
    )

    assert indexes_covering("scheduler_app_job", job.pk) == {
        "scheduler_app_job_pkey",
        "scheduler_job_leases",  # lease renewal and rescue
        "scheduler_job_unique_key_unfinished",  # the unique key of unfinished jobs
    }


def test_a_succeeded_job_is_in_only_the_indexes_finished_jobs_need():
    now = clock.now()
    job = Job.objects.create(
        task_name="tests.record",
        status=Job.Status.SUCCEEDED,
        scheduled_for=now,
        run_at=now,
        started_at=now,
        finished_at=now,
        attempts=1,
    )

    assert indexes_covering("scheduler_app_job", job.pk) == {
        "scheduler_app_job_pkey",
        "scheduler_job_prunable",  # retention, the failing alert
        "scheduler_job_task_ends",  # the absent and suspicious-success alerts, a task's jobs
    }


def job_indexes_at(earlier: str, later: str) -> tuple[set[str], set[str]]:
    """Migrate a database of its own to ``later``, back to ``earlier`` and forwards again;
    return the job table's indexes at ``earlier`` and at ``later`` (the same both times)."""

    def indexes() -> set[str]:
        with psycopg.connect(url) as db:
            rows = db.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'scheduler_app_job'"
            ).fetchall()
        return {row[0] for row in rows}

    with scratch_database("indexes") as url:
        migrate_database(url, "scheduler_app", later)
        after = indexes()
        migrate_database(url, "scheduler_app", earlier)
        before = indexes()
        migrate_database(url, "scheduler_app", later)
        assert indexes() == after
    return before, after


def test_migration_0016_runs_forwards_and_backwards():
    before, after = job_indexes_at("0015", "0016")

    assert after - before == {
        "scheduler_job_owned",
        "scheduler_job_cancelled_by",
        "scheduler_job_task_outcomes",
    }
    assert {name for name in before - after if not name.startswith("scheduler_app_job_")} == {
        "scheduler_job_owner",
        "scheduler_job_task_status",
        "scheduler_job_task_finished",
        "scheduler_job_finished",
    }
    # The foreign keys' own full indexes (Django names them after the column).
    assert {
        name.split("_")[3] for name in before - after if name.startswith("scheduler_app_job_")
    } == {
        "owner",
        "cancelled",
    }


def test_migration_0019_adds_the_unfinished_runs_index_forwards_and_drops_it_backwards():
    before, after = job_indexes_at("0018", "0019")

    assert after - before == {"scheduler_job_runs_unfinished"}
    assert before - after == set()


def test_migrations_0023_and_0024_widen_the_task_index_to_cancelled_jobs_and_back():
    before, after = job_indexes_at("0022", "0024")

    assert after - before == {"scheduler_job_task_ends"}
    assert before - after == {"scheduler_job_task_outcomes"}
