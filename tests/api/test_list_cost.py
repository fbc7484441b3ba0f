"""GET jobs/?task= reads the task's jobs, not the history of every task (issue #14: cost
stays flat as history grows), and still lists every one of them, whatever its status."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.models import Job
from tests.api.conftest import client_for
from tests.helpers import reads_of

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
RARE = "tests.rare"


def jobs(task_name: str, statuses: list[str]) -> list[Job]:
    return Job.objects.bulk_create(
        Job(
            task_name=task_name,
            status=status,
            scheduled_for=T0,
            run_at=T0,
            finished_at=None if status in Job.UNFINISHED else T0,
        )
        for status in statuses
    )


def rare_task_jobs() -> list[Job]:
    """One job of the rare task in each status, among 3,000 of another task."""
    jobs("tests.noop", [Job.Status.SUCCEEDED] * 3000)
    return jobs(RARE, list(Job.Status.values))


@pytest.mark.postgres_only
def test_listing_a_rare_task_reads_its_jobs_not_the_history(operator):
    rare_task_jobs()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")

    with CaptureQueriesContext(connection) as queries:
        response = client_for(operator).get("/api/jobs/", {"task": RARE})

    assert response.status_code == 200
    (most, sql), *_ = reads_of(queries, "scheduler_app_job")
    assert most <= 20, sql


def test_a_task_filter_lists_the_tasks_jobs_in_every_status(operator):
    rare = rare_task_jobs()

    response = client_for(operator).get("/api/jobs/", {"task": RARE})

    assert response.status_code == 200
    assert [job["id"] for job in response.json()["results"]] == sorted(
        (job.pk for job in rare), reverse=True
    )
