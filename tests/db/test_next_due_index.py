"""The idle worker's "when is the next job due" look-up reads one index entry, never sorts
every pending job (issue #14: cost must stay flat as the backlog grows)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from scheduler_app import clock
from scheduler_app.models import Job

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def test_next_due_lookup_uses_the_next_due_index_without_sorting():
    now = clock.now()
    Job.objects.bulk_create(
        Job(
            task_name="tests.record",
            queue="default" if n % 2 else "other",
            priority=n % 3,
            scheduled_for=now + dt.timedelta(minutes=n),
            run_at=now + dt.timedelta(minutes=n),
        )
        for n in range(5000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")

    queryset = Job.objects.by_due_time(["default"], {"tests.paused"})
    plan = queryset.explain()

    assert "scheduler_job_next_due" in plan
    assert "Sort" not in plan
    assert queryset.first().run_at == now + dt.timedelta(minutes=1)
