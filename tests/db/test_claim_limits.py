"""A job claim takes at most its limit, whatever the planner believes of the table (see
tests/sends/test_recipient_claim_limit.py, where a recipient claim did not)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from scheduler_app import schedule_many
from scheduler_app.db import backend
from scheduler_app.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def analyse_while_empty(table: str) -> None:
    """Leave the statistics of an empty ``table`` for the planner, and no plans made before."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % table)
    connection.connection.execute("DEALLOCATE ALL")  # psycopg forgets its statements too


def test_a_job_claim_takes_at_most_its_limit_with_the_statistics_of_an_empty_table():
    # Jobs a retention prune deleted: pages on disk, no live row, then an ANALYZE.
    Job.objects.filter(
        pk__in=[job.pk for job in schedule_many("tests.record", [{}] * 300)]
    ).delete()
    analyse_while_empty(Job._meta.db_table)
    schedule_many("tests.record", [{}] * 5)

    for _ in range(6):  # custom plans, then the generic one
        rows = backend().claim_jobs(worker="w", queues=["default"], limit=2, lease=dt.timedelta(30))
        assert len(rows) <= 2
        Job.objects.filter(status=Job.Status.RUNNING).update(status=Job.Status.PENDING)
