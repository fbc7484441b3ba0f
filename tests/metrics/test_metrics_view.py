"""The metrics view: the database's gauges, parsed with prometheus_client, access and cache."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client, override_settings

from scheduler_app import clock
from scheduler_app.clock import frozen_clock
from scheduler_app.db import database_now
from scheduler_app.models import Alert, Job, JobAttempt, SendBatch, WorkerHeartbeat
from tests.metrics.conftest import parse, series, value

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
LOCAL = {"METRICS_ALLOWED_IPS": ["127.0.0.1"], "QUEUES": ["default", "emails", "slow"]}


def scrape(client: Client | None = None, **extra) -> str:
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


def job(task="tests.record", *, run_at, status=Job.Status.PENDING, queue="default"):
    return Job.objects.create(
        task_name=task, queue=queue, scheduled_for=run_at, run_at=run_at, status=status
    )


def attempt(parent, *, number=1, late, outcome=JobAttempt.Outcome.SUCCEEDED, started_ago=60):
    started = T0 - dt.timedelta(seconds=started_ago)
    JobAttempt.objects.create(
        job=parent,
        attempt=number,
        task_name=parent.task_name,
        due_at=started - dt.timedelta(seconds=late),
        started_at=started,
        finished_at=started + dt.timedelta(seconds=1),
        outcome=outcome,
    )


def batch(status, *, total=10, sent=0, failed=0, name="news"):
    return SendBatch.objects.create(
        name=name,
        subject_template="s",
        text_template="t",
        audience="tests.customers",
        expected_max_audience=100,
        status=status,
        total=total,
        sent=sent,
        failed=failed,
    )


@override_settings(SCHEDULER_APP=LOCAL)
def test_jobs_by_queue_and_state_and_the_oldest_due_job():
    job(run_at=T0 - dt.timedelta(seconds=90))  # due for 90 s
    job(run_at=T0 - dt.timedelta(seconds=10))
    job(run_at=T0 + dt.timedelta(hours=1))  # pending, not due
    job(run_at=T0 - dt.timedelta(seconds=5), queue="emails", status=Job.Status.RUNNING)
    job(run_at=T0 - dt.timedelta(days=3), status=Job.Status.SUCCEEDED)  # finished: not counted
    with frozen_clock(T0):
        samples = parse(scrape())
    assert value(samples, "scheduler_jobs", queue="default", state="pending") == 3
    assert value(samples, "scheduler_jobs", queue="default", state="running") == 0
    assert value(samples, "scheduler_jobs", queue="emails", state="running") == 1
    assert value(samples, "scheduler_jobs_due", queue="default") == 2
    assert value(samples, "scheduler_oldest_due_job_age_seconds", queue="default") == 90
    # A queue with nothing in it still has its series, at 0.
    assert value(samples, "scheduler_jobs", queue="slow", state="pending") == 0
    assert value(samples, "scheduler_oldest_due_job_age_seconds", queue="emails") == 0


@override_settings(SCHEDULER_APP={**LOCAL, "METRICS_WINDOW": 3600})
def test_recent_runs_lateness_histogram_and_first_attempt_success_ratio():
    parent = job(run_at=T0 - dt.timedelta(days=1), status=Job.Status.SUCCEEDED)
    for late in (0.05, 0.3, 2, 45):
        attempt(parent, late=late)
    attempt(parent, late=7, outcome=JobAttempt.Outcome.FAILED)
    attempt(parent, late=3, outcome=JobAttempt.Outcome.DEFERRED)  # no attempt used
    attempt(parent, number=2, late=500, outcome=JobAttempt.Outcome.SUCCEEDED)  # a retry
    attempt(parent, late=1, started_ago=7200)  # before the window
    other = job("tests.noop", run_at=T0, status=Job.Status.FAILED)
    attempt(other, late=1, outcome=JobAttempt.Outcome.RETRIED)
    with frozen_clock(T0):
        samples = parse(scrape())
    runs = "scheduler_recent_runs"
    assert value(samples, runs, task="tests.record", outcome="succeeded") == 5
    assert value(samples, runs, task="tests.record", outcome="failed") == 1
    assert value(samples, runs, task="tests.record", outcome="deferred") == 1
    assert value(samples, runs, task="tests.noop", outcome="retried") == 1
    bucket = "scheduler_recent_lateness_seconds_bucket"
    # First attempts only (the retry's 500 s is left out): 0.05, 0.3, 2, 45, 7, 3.
    assert value(samples, bucket, task="tests.record", le="0.1") == 1
    assert value(samples, bucket, task="tests.record", le="0.5") == 2
    assert value(samples, bucket, task="tests.record", le="5.0") == 4
    assert value(samples, bucket, task="tests.record", le="10.0") == 5
    assert value(samples, bucket, task="tests.record", le="60.0") == 6
    assert value(samples, bucket, task="tests.record", le="+Inf") == 6
    assert value(samples, "scheduler_recent_lateness_seconds_gcount", task="tests.record") == 6
    assert value(
        samples, "scheduler_recent_lateness_seconds_gsum", task="tests.record"
    ) == pytest.approx(57.35)
    ratio = "scheduler_recent_first_attempt_success_ratio"
    # 4 succeeded of 5 decided first attempts (the deferred one decided nothing).
    assert value(samples, ratio, task="tests.record") == pytest.approx(0.8)
    assert value(samples, ratio, task="tests.noop") == 0


@override_settings(SCHEDULER_APP={**LOCAL, "METRICS_MAX_BATCHES": 2})
def test_send_progress_for_a_bounded_number_of_sending_and_paused_batches():
    oldest = batch(SendBatch.Status.SENDING, sent=1)
    paused = batch(SendBatch.Status.PAUSED, total=10, sent=4, failed=2)
    sending = batch(SendBatch.Status.SENDING, total=None)  # not frozen yet
    batch(SendBatch.Status.COMPLETED, sent=10)
    batch(SendBatch.Status.SCHEDULED)
    samples = parse(scrape())
    assert value(samples, "scheduler_send_batches", status="sending") == 2
    assert value(samples, "scheduler_send_batches", status="paused") == 1
    assert value(samples, "scheduler_send_batches", status="scheduled") == 1
    recipients = "scheduler_send_batch_recipients"
    assert {s["batch"] for s in series(samples, recipients)} == {str(paused.pk), str(sending.pk)}
    assert str(oldest.pk) not in {s["batch"] for s in series(samples, recipients)}
    assert value(samples, recipients, batch=paused.pk, status="sent") == 4
    assert value(samples, recipients, batch=paused.pk, status="failed") == 2
    assert value(samples, recipients, batch=paused.pk, status="pending") == 4
    assert value(samples, "scheduler_send_batch_paused", batch=paused.pk) == 1
    assert value(samples, "scheduler_send_batch_paused", batch=sending.pk) == 0


@override_settings(SCHEDULER_APP={**LOCAL, "METRICS_CACHE_SECONDS": 60})
def test_a_scrape_reads_the_database_in_few_queries_and_is_cached(django_assert_num_queries):
    job(run_at=T0)
    # PostgreSQL reads its clock in one more query (SQLite's is this host's).
    with django_assert_num_queries(9 if connection.vendor == "postgresql" else 8):
        first = scrape()
    Job.objects.all().delete()
    with django_assert_num_queries(0):
        assert scrape() == first


@override_settings(SCHEDULER_APP=LOCAL)
def test_open_alerts_by_kind_and_acknowledgement_and_live_workers():
    Alert.objects.create(kind="late", subject="task:a", summary="s")
    Alert.objects.create(kind="late", subject="task:b", summary="s", acknowledged_at=clock.now())
    Alert.objects.create(kind="absent", subject="task:a", summary="s", resolved_at=clock.now())
    heartbeat = {"host": "h", "pid": 1, "concurrency": 1, "started_at": clock.now()}
    WorkerHeartbeat.objects.create(worker_id="w1", last_seen_at=clock.now(), **heartbeat)
    WorkerHeartbeat.objects.create(
        worker_id="w2", last_seen_at=clock.now() - dt.timedelta(hours=1), **heartbeat
    )
    WorkerHeartbeat.objects.create(
        worker_id="w3", status="stopped", last_seen_at=clock.now(), **heartbeat
    )
    samples = parse(scrape())
    assert value(samples, "scheduler_open_alerts", kind="late", acknowledged="false") == 1
    assert value(samples, "scheduler_open_alerts", kind="late", acknowledged="true") == 1
    assert value(samples, "scheduler_open_alerts", kind="absent", acknowledged="false") == 0
    assert value(samples, "scheduler_live_workers") == 1


@override_settings(SCHEDULER_APP={**LOCAL, "METRICS_CACHE_SECONDS": 0})
def test_without_a_cache_every_scrape_reads_the_database():
    job(run_at=T0 - dt.timedelta(seconds=1))
    assert value(parse(scrape()), "scheduler_jobs", queue="default", state="pending") == 1
    Job.objects.all().delete()
    assert value(parse(scrape()), "scheduler_jobs", queue="default", state="pending") == 0


@pytest.mark.parametrize(
    ("allowed", "address", "served"),
    [
        ([], "127.0.0.1", False),  # nobody by default
        (["127.0.0.1"], "127.0.0.1", True),
        (["127.0.0.1"], "10.1.2.3", False),
        (["10.0.0.0/8"], "10.1.2.3", True),
        (["::1"], "::1", True),
        (["127.0.0.1"], "::ffff:127.0.0.1", True),  # IPv4 on a dual-stack socket
        (["127.0.0.1"], "not-an-address", False),
    ],
)
def test_access_by_client_address(allowed, address, served):
    with override_settings(SCHEDULER_APP={"METRICS_ALLOWED_IPS": allowed}):
        response = Client(REMOTE_ADDR=address).get("/metrics")
    assert response.status_code == (200 if served else 403)
    if not served:
        assert b"METRICS_ALLOWED_IPS" in response.content


@override_settings(SCHEDULER_APP={"METRICS_TOKEN": "s3cret"})
def test_a_bearer_token_is_served_from_any_address():
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics").status_code == 403


@override_settings(SCHEDULER_APP=LOCAL)
def test_only_get_is_served():
    assert Client().post("/metrics").status_code == 405


@override_settings(
    SCHEDULER_APP={"METRICS_TOKEN": "s3cret"},
    MIDDLEWARE=[*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"],
)
def test_a_scraper_is_not_sent_to_the_login_page():
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200


@pytest.mark.postgres_only
@override_settings(SCHEDULER_APP=LOCAL)
def test_a_host_20s_ahead_ages_due_jobs_by_the_database_clock(monkeypatch):
    """On PostgreSQL (SQLite's clock is the host's), a scrape on a host whose clock is off
    measures from the database's clock, which run times are written from."""
    due = database_now() - dt.timedelta(seconds=30)
    job(run_at=due)
    real = clock.now
    monkeypatch.setattr(clock, "now", lambda: real() + dt.timedelta(seconds=20))

    age = value(parse(scrape()), "scheduler_oldest_due_job_age_seconds", queue="default")

    assert 30 <= age < 32, age
