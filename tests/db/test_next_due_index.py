"""The idle worker's "when is the next job due" look-up reads one index entry, never sorts
every pending job (issue #14: cost must stay flat as the backlog grows)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection

from scheduler_app import clock, partitions
from scheduler_app.models import Job
from tests.helpers import job_storage

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
    plan = queryset[:1].explain()  # what the worker asks: the first

    assert "scheduler_job_next_due" in plan
    assert "Sort" not in plan
    # On a partitioned table (migration 0033) it reads the hot partition alone.
    assert partitions.OVERFLOW not in plan and not re.search(r"scheduler_app_job_p\d", plan)
    assert queryset.first().run_at == now + dt.timedelta(minutes=1)


def test_claim_reads_the_claim_index_in_order_when_statistics_know_no_backlog():
    """A burst after a quiet spell: statistics say nothing is pending; the claim must still
    read scheduler_job_claimable in claim order, not sort every due job."""
    from scheduler_app.db import postgresql as pg

    now = clock.now()
    past = now - dt.timedelta(hours=1)
    history = [
        Job(
            task_name="tests.record",
            status=Job.Status.SUCCEEDED,
            scheduled_for=past,
            run_at=past,
            started_at=past,
            finished_at=past,
            attempts=1,
        )
        for _ in range(5000)
    ]
    Job.objects.bulk_create(history)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")
    Job.objects.bulk_create(
        Job(task_name="tests.record", scheduled_for=past, run_at=past) for _ in range(5000)
    )
    arguments = {
        "worker": "w",
        "queues": ["default"],
        "limit": 10,
        "lease": dt.timedelta(seconds=30),
    }
    before = _rows_fetched()

    rows = pg.claim_jobs(**arguments)

    assert len(rows) == 10
    assert _rows_fetched() - before < 100  # sorting every due job reads 5,000


def _forget_statistics() -> None:
    """Put the job table's statistics back to a fresh install's: never analysed (rolled
    back with the test's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM pg_statistic WHERE starelid = %s::regclass; "
            "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = %s::regclass",
            [job_storage()] * 2,
        )


def _rows_fetched() -> int:
    """Rows of the job table (its hot partition, when partitioned) this transaction has
    read so far, through an index or a sequential scan (which a plan that sorts every due
    job may take instead)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = %s",
            [job_storage()],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("plan", ["auto", "force_generic_plan"])
def test_a_claim_on_a_never_analysed_table_reads_only_the_rows_it_takes(plan):
    """A fresh install's first burst: with no statistics the planner guesses almost no
    pending rows and would read every due job and sort them (7 ms per claim at 20,000);
    the claim reads the claim index in its order and stops after ``limit`` rows. Also
    with the plan the prepared claim switches to after five runs (a generic plan)."""
    from scheduler_app.db import postgresql as pg

    now = clock.now()
    past = now - dt.timedelta(minutes=5)
    _forget_statistics()
    Job.objects.bulk_create(
        Job(task_name="tests.record", scheduled_for=past, run_at=past) for _ in range(5000)
    )
    arguments = {
        "worker": "w",
        "queues": ["default"],
        "limit": 10,
        "lease": dt.timedelta(seconds=30),
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", [plan])
    before = _rows_fetched()

    rows = pg.claim_jobs(**arguments)

    assert len(rows) == 10
    assert _rows_fetched() - before < 100
    with connection.cursor() as cursor:  # the rest of the transaction plans as before
        cursor.execute("SHOW enable_sort")
        assert cursor.fetchone()[0] == "on"
