"""The lateness overview: per-task p50 / p95 / max from JobAttempt rows, overdue and oldest due."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, JobAttempt
from tests.admin.conftest import client_for

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
URL = "/admin/scheduler_app/latenessoverview/"


def job(task="tests.record", *, run_at, status=Job.Status.PENDING, queue="default"):
    return Job.objects.create(
        task_name=task, queue=queue, scheduled_for=run_at, run_at=run_at, status=status
    )


def attempt(parent, *, started_ago, late):
    """An attempt that started ``started_ago`` before T0, ``late`` seconds after it was due."""
    started = T0 - dt.timedelta(seconds=started_ago)
    JobAttempt.objects.create(
        job=parent,
        attempt=1,
        task_name=parent.task_name,
        worker_id="w",
        due_at=started - dt.timedelta(seconds=late),
        started_at=started,
        finished_at=started + dt.timedelta(seconds=1),
        outcome=JobAttempt.Outcome.SUCCEEDED,
    )


@pytest.fixture
def history():
    record = job(run_at=T0 - dt.timedelta(days=2), status=Job.Status.SUCCEEDED)
    noop = job("tests.noop", run_at=T0 - dt.timedelta(days=2), status=Job.Status.SUCCEEDED)
    for late in (1, 2, 3, 4, 10):
        attempt(record, started_ago=600, late=late)  # 10 minutes ago: in the last hour
    attempt(record, started_ago=7200, late=100)  # 2 hours ago: only in the last day
    attempt(record, started_ago=2 * 86400, late=1000)  # 2 days ago: in neither
    attempt(noop, started_ago=60, late=0.5)


def rows(response, label):
    windows = dict(response.context["windows"])
    return [(r.task_name, r.count, r.p50, r.p95, r.max) for r in windows[label]]


def test_percentiles_per_task_over_the_last_hour_and_day(admin, history):
    with frozen_clock(T0):
        response = admin.get(URL)
    assert response.status_code == 200
    assert rows(response, "Last hour") == [
        ("tests.noop", 1, 0.5, 0.5, 0.5),
        ("tests.record", 5, 3.0, pytest.approx(8.8), 10.0),
    ]
    assert rows(response, "Last day") == [
        ("tests.noop", 1, 0.5, 0.5, 0.5),
        ("tests.record", 6, 3.5, pytest.approx(77.5), 100.0),
    ]
    html = response.content.decode()
    assert "<td>tests.record</td><td>5</td><td>3.000</td><td>8.800</td><td>10.000</td>" in html
    assert "<td>tests.record</td><td>6</td><td>3.500</td><td>77.500</td><td>100.000</td>" in html


def test_no_runs_shows_an_empty_table_not_an_error(admin):
    with frozen_clock(T0):
        response = admin.get(URL)
    assert rows(response, "Last hour") == []
    html = response.content.decode()
    assert (
        html.count("No runs in this window: each job a worker starts adds its lateness here.") == 2
    )
    assert "Nothing overdue." in html
    assert "<h2>Oldest pending due job</h2>\n  <p>None.</p>" in html


@pytest.fixture
def pending():
    return {
        "oldest": job(run_at=T0 - dt.timedelta(minutes=10), queue="emails"),
        "overdue": job(run_at=T0 - dt.timedelta(minutes=5)),
        "just_due": job(run_at=T0 - dt.timedelta(seconds=30)),
        "future": job(run_at=T0 + dt.timedelta(minutes=5)),
        "running": job(run_at=T0 - dt.timedelta(hours=1), status=Job.Status.RUNNING),
    }


def test_overdue_jobs_past_the_threshold_and_the_oldest_pending_due_job(admin, pending):
    with frozen_clock(T0):
        response = admin.get(URL)
    assert response.context["threshold"] == 60
    assert response.context["overdue_count"] == 2
    assert [j.pk for j in response.context["overdue"]] == [
        pending["oldest"].pk,
        pending["overdue"].pk,
    ]
    assert response.context["oldest"] == pending["oldest"]
    html = response.content.decode()
    assert "Overdue by more than 60 s: 2" in html
    assert "#%s tests.record</a>, due" % pending["oldest"].pk in html
    assert "(10\xa0minutes ago)" in html


@pytest.mark.parametrize(
    ("given", "threshold", "count"), [("0", 0, 3), ("600", 600, 0), ("abc", 60, 2), ("-5", 0, 3)]
)
def test_overdue_threshold_comes_from_the_query_string(admin, pending, given, threshold, count):
    with frozen_clock(T0):
        response = admin.get(URL, {"overdue": given})
    assert response.status_code == 200
    assert (response.context["threshold"], response.context["overdue_count"]) == (
        threshold,
        count,
    )


def test_lateness_overview_is_linked_from_the_app_index(admin):
    html = admin.get("/admin/scheduler_app/").content.decode()
    assert 'href="%s"' % URL in html
    assert "Lateness overview" in html


def test_lateness_overview_needs_view_job(staff):
    assert client_for(staff("nobody")).get(URL).status_code == 403
    assert client_for(staff("watcher", "view_job")).get(URL).status_code == 200
