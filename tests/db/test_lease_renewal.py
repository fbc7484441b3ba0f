"""Lease renewal never waits for a job row another transaction holds (it could deadlock)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from scheduler_app import schedule
from scheduler_app.models import Job
from scheduler_app.worker import leases
from tests.helpers import database_url

LEASE = dt.timedelta(seconds=30)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_renewal_skips_a_row_the_loop_is_finishing_and_renews_the_rest():
    held, free = (schedule("tests.record", {"n": n}) for n in range(2))
    Job.objects.filter(pk__in=[held.pk, free.pk]).update(
        status=Job.Status.RUNNING, worker_id="w1", lease_expires_at=None
    )
    # Another transaction (the worker loop recording an outcome) holds one row.
    with psycopg.connect(database_url().replace("postgres://", "postgresql://")) as other:
        other.execute("SELECT id FROM scheduler_app_job WHERE id = %s FOR UPDATE", [held.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '5s'")  # before the fix: blocked here
        try:
            renewed = leases.renew("w1", [held.pk, free.pk], LEASE)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET statement_timeout = 0")
        other.rollback()

    assert renewed == 1
    leased = dict(Job.objects.values_list("pk", "lease_expires_at"))
    assert leased[held.pk] is None
    assert leased[free.pk] is not None
