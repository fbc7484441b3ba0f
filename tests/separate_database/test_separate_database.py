"""scheduler_app's tables on a database of their own: "scheduler", a second database on the
same PostgreSQL server, beside the business tables (tests.testapp) on "default", with
SchedulerRouter (tests/settings.py with SCHEDULER_TEST_SEPARATE_DATABASE=1; see
docs/separate-database.md). The user model lives with the scheduler (check E122)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.test import override_settings

from scheduler_app import CancelOutcome, cancel, schedule, schedule_many
from scheduler_app.cancellation import undo
from scheduler_app.models import Job, SendBatch
from tests.helpers import pickup_seconds, wait_until
from tests.processes.conftest import start_worker  # noqa: F401  (a fixture)
from tests.sends_processes.conftest import calls_by_key, expected_keys, make_batch
from tests.testapp.models import Customer, Run

pytestmark = pytest.mark.django_db(transaction=True, databases={"default", "scheduler"})

Status = Job.Status
OUTBOX = {**settings.SCHEDULER_APP, "ENQUEUE_ON_COMMIT_OF": "default"}


class Rollback(Exception):
    """Raised to roll a business transaction back."""


def tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names())


def worker_env() -> dict[str, str]:
    """What a runworker subprocess needs to find the second test database."""
    return {
        "SCHEDULER_TEST_SCHEDULER_DATABASE_NAME": connections["scheduler"].settings_dict["NAME"]
    }


def test_migrate_creates_the_scheduler_tables_on_its_database_only():
    scheduler, default = tables("scheduler"), tables("default")
    assert {"scheduler_app_job", "scheduler_app_recipient", "auth_user"} <= scheduler
    assert not {table for table in default if table.startswith("scheduler_app_")}
    assert "testapp_customer" in default and "testapp_customer" not in scheduler


def test_a_worker_runs_each_job_once_with_the_tables_on_their_own_database(start_worker):  # noqa: F811
    """Jobs written on "scheduler", run by a real runworker whose handlers write on "default"."""
    jobs = schedule_many("tests.record", [{}] * 30)
    assert {job._state.db for job in jobs} == {"scheduler"}
    start_worker("--concurrency", "4", env=worker_env())
    wait_until(
        lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == 30,
        timeout=30,
        message="every job to succeed",
    )
    assert Counter(Run.objects.values_list("job_id", flat=True)) == {job.pk: 1 for job in jobs}


def backends(alias: str) -> list[tuple[str, str]]:
    """Return (state, last query) of every other connection to the test database ``alias``."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT state, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchall()


def idle_and_listening(alias: str) -> bool:
    """Return True once a worker LISTENs on ``alias`` and none of its connections is busy."""
    found = backends(alias)
    return ("idle", "LISTEN scheduler_app_jobs") in found and all(s == "idle" for s, _ in found)


def test_an_idle_worker_listens_on_the_scheduler_database_and_wakes_at_once(start_worker):  # noqa: F811
    """The NOTIFY of schedule() goes out on "scheduler", and the worker LISTENs there:
    five jobs start within milliseconds, not at the 30 s poll (nor the kill switches' 1 s)."""
    start_worker("--poll-interval", "30", "--no-alerts", env=worker_env())
    pickups = pickup_seconds(lambda: idle_and_listening("scheduler"))
    assert max(pickups) < 0.2, pickups
    assert ("idle", "LISTEN scheduler_app_jobs") not in backends("default")


def test_a_send_to_a_business_audience_completes_once_per_recipient(start_worker):  # noqa: F811
    """The audience (customers, on "default") is frozen into Recipient rows on "scheduler"
    across the two databases, and every recipient gets exactly one provider call."""
    batch = make_batch(40)
    assert batch._state.db == "scheduler"
    start_worker("--concurrency", "4", env=worker_env())
    wait_until(
        lambda: SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.COMPLETED,
        timeout=30,
        message="the batch to complete",
    )
    batch.refresh_from_db()
    assert (batch.total, batch.sent) == (40, 40)
    assert calls_by_key(batch) == Counter(dict.fromkeys(expected_keys(batch), 1))


def test_undo_and_cancel_answer_on_the_scheduler_database():
    """undo() is one guarded statement of db/'s SQL, cancel() the ORM's."""
    undone, cancelled = schedule("tests.record", undo_window=60), schedule("tests.record")
    outcome, job = undo(undone.pk)
    assert (outcome, job.status) == (CancelOutcome.CANCELLED, Status.CANCELLED)
    assert undo(undone.pk)[0] == CancelOutcome.ALREADY_CANCELLED
    assert cancel(cancelled.pk) == CancelOutcome.CANCELLED
    assert set(Job.objects.values_list("status", flat=True)) == {Status.CANCELLED}


def test_the_admin_lists_and_the_api_undoes_jobs_on_the_scheduler_database(client):
    """The admin, with the session on "default" and the user beside the jobs, and the API."""
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw")
    job = schedule("tests.record", undo_window=60, owner=user)
    client.force_login(user)
    page = client.get("/admin/scheduler_app/job/")
    assert page.status_code == 200
    assert "/admin/scheduler_app/job/%s/change/" % job.pk in page.content.decode()
    answer = client.post("/api/jobs/%s/undo/" % job.pk)
    assert answer.status_code == 200, answer.content
    assert answer.json()["outcome"] == "cancelled"
    assert Job.objects.get(pk=job.pk).cancelled_by == user


def test_without_the_outbox_a_job_outlives_the_business_transaction_that_rolls_back():
    """The cost of a database of its own, which check W120 states: schedule() writes at once
    on "scheduler", so a rollback on "default" leaves the job scheduled."""
    with pytest.raises(Rollback), transaction.atomic():
        Customer.objects.create(email="ada@example.com")
        job = schedule("tests.record")
        assert job.pk is not None
        raise Rollback
    assert not Customer.objects.exists()
    assert Job.objects.filter(pk=job.pk, status=Status.PENDING).exists()


@override_settings(SCHEDULER_APP=OUTBOX)
def test_outbox_a_business_transaction_that_rolls_back_schedules_nothing():
    with pytest.raises(Rollback), transaction.atomic():
        Customer.objects.create(email="ada@example.com")
        job = schedule("tests.record")
        jobs = schedule_many("tests.record", [{}, {}])
        assert [job.pk, *(j.pk for j in jobs)] == [None, None, None]
        raise Rollback
    assert not Job.objects.exists()
    assert job.pk is None


@override_settings(SCHEDULER_APP=OUTBOX)
def test_outbox_a_business_transaction_that_commits_schedules_its_jobs_once():
    """The jobs are written when "default" commits, and the returned objects become the
    stored jobs: new ones, or the unfinished job a unique key matches."""
    existing = schedule("tests.record", delay=3600, unique_key="daily")  # no transaction: now
    with transaction.atomic():
        Customer.objects.create(email="ada@example.com")
        job = schedule("tests.record")
        again = schedule("tests.record", delay=60, unique_key="daily")
        jobs = schedule_many("tests.record", [{"n": 1}, {"n": 2}])
        assert Job.objects.count() == 1  # nothing written before the commit
        assert [job.pk, again.pk, *(j.pk for j in jobs)] == [None] * 4
    assert Job.objects.count() == 4
    assert again.pk == existing.pk and again.run_at == existing.run_at
    stored = Job.objects.in_bulk([job.pk, *(j.pk for j in jobs)])
    assert len(stored) == 3 and all(j._state.db == "scheduler" for j in [job, again, *jobs])
    assert sorted(j.payload.get("n", 0) for j in stored.values()) == [0, 1, 2]


@override_settings(SCHEDULER_APP=OUTBOX)
def test_outbox_a_write_refused_after_the_commit_is_logged_and_the_commit_goes_on(caplog):
    """The business data has committed: a write the scheduler's database refuses is
    logged, job by job, and neither fails the caller nor keeps the transaction's other
    on-commit callbacks (the next jobs' writes, the project's own) from running. It was
    raised from the commit, and Django dropped every callback after it."""
    refusing = connections["scheduler"]
    with refusing.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    hooks_run = []
    try:
        with transaction.atomic():
            Customer.objects.create(email="ada@example.com")
            schedule("tests.record", unique_key="receipt-1")
            schedule("tests.record", unique_key="receipt-2")
            transaction.on_commit(lambda: hooks_run.append("the project's hook"))
    finally:
        with refusing.cursor() as cursor:
            cursor.execute("RESET default_transaction_read_only")
    assert Customer.objects.filter(email="ada@example.com").exists()
    assert hooks_run == ["the project's hook"]
    assert not Job.objects.exists()
    lost = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job not ")]
    assert len(lost) == 2 and "unique_key=receipt-1" in lost[0] and "receipt-2" in lost[1]


@override_settings(SCHEDULER_APP=OUTBOX)
def test_outbox_inside_a_transaction_of_the_scheduler_database_writes_in_it():
    """A block that is atomic on the scheduler's database too (as the scheduler's own
    writes are) gets its jobs there at once, committed with it."""
    with transaction.atomic(), transaction.atomic(using="scheduler"):
        job = schedule("tests.record")
        assert job.pk is not None
    assert Job.objects.filter(pk=job.pk).exists()


def test_one_alert_evaluation_at_a_time_on_the_scheduler_s_database(monkeypatch):
    """The evaluator's transaction-level lock is held through its transaction on the
    scheduler's database. With the transaction on "default", the lock's statement ran in
    autocommit on the scheduler's connection and was let go at once: a second evaluator
    could take it while the first one's rules ran."""
    from scheduler_app.alerts import rules
    from scheduler_app.alerts.evaluator import evaluate
    from scheduler_app.db.postgresql.locks import ALERT_LOCK

    other = connections.create_connection("scheduler")
    taken_by_another: list[bool] = []

    def another_evaluator_tries(situation):
        with other.cursor() as cursor:
            cursor.execute(ALERT_LOCK)
            taken_by_another.append(cursor.fetchone()[0])
        return []

    monkeypatch.setitem(rules.RULES, "another_evaluator_tries", another_evaluator_tries)
    try:
        assert not evaluate().skipped
    finally:
        other.close()
    assert taken_by_another == [False]
