"""The operations overview page: alerts, live workers, queues and server-drawn lateness charts."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Alert, Job, JobAttempt, WorkerHeartbeat
from tests.admin.conftest import client_for

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
URL = "/admin/scheduler_app/operationsoverview/"


def attempt(parent, *, hours_ago, late):
    started = T0 - dt.timedelta(hours=hours_ago)
    JobAttempt.objects.create(
        job=parent,
        attempt=1,
        task_name=parent.task_name,
        due_at=started - dt.timedelta(seconds=late),
        started_at=started,
        finished_at=started,
        outcome=JobAttempt.Outcome.SUCCEEDED,
    )


@pytest.fixture
def situation():
    Alert.objects.create(
        kind="absent",
        subject="task:shop.sync",
        summary="shop.sync has not succeeded for 26 h",
        opened_at=T0 - dt.timedelta(hours=2),
    )
    Alert.objects.create(
        kind="late", subject="task:old", summary="resolved long ago", resolved_at=T0
    )
    WorkerHeartbeat.objects.create(
        worker_id="web-1:42:abc",
        host="web-1",
        pid=42,
        queues=["default"],
        concurrency=4,
        running=3,
        started_at=T0 - dt.timedelta(hours=5),
        last_seen_at=dt.datetime.now(dt.UTC),
    )
    WorkerHeartbeat.objects.create(
        worker_id="gone:1:x",
        host="gone",
        pid=1,
        concurrency=1,
        status="lost",
        started_at=T0 - dt.timedelta(days=1),
        last_seen_at=T0 - dt.timedelta(days=1),
    )
    for seconds in (300, 30):
        run_at = T0 - dt.timedelta(seconds=seconds)
        Job.objects.create(task_name="tests.record", scheduled_for=run_at, run_at=run_at)
    parent = Job.objects.create(
        task_name="tests.record", scheduled_for=T0, run_at=T0, status=Job.Status.SUCCEEDED
    )
    attempt(parent, hours_ago=1.5, late=4)  # the hour 10:00-11:00 (second-to-last bar)
    attempt(parent, hours_ago=20.5, late=1)
    attempt(parent, hours_ago=30, late=99)  # older than the charts


def test_the_overview_shows_alerts_workers_queues_and_lateness_charts(admin, situation):
    with frozen_clock(T0):
        response = admin.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Open alerts: 1" in html
    assert "shop.sync has not succeeded for 26 h" in html
    assert "resolved long ago" not in html
    assert "Live workers: 1" in html and "web-1:42:abc" in html and "gone:1:x" not in html
    assert "3 / 4" in html
    queue = response.context["queues"][0]
    assert (queue[0].queue, queue[0].pending, queue[0].due, queue[1]) == ("default", 2, 2, 300)
    assert "300 s (due" in html
    # One chart for the task, drawn on the server: an inline SVG, no script.
    [(task, worst, chart)] = response.context["charts"]
    assert (task, worst) == ("tests.record", 4)
    content = html.split('id="content-main"')[1].split("<!-- END Content -->")[0]
    assert content.count("<svg") == 1 and "<script" not in content
    bars = re.findall(
        r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)">'
        r"<title>([^<]+)</title>",
        chart,
    )
    assert [title for _, _, title in bars] == ["15:00-16:00 UTC: 1 s", "10:00-11:00 UTC: 4 s"]
    assert [float(height) for _, height, _ in bars] == [12.0, 48.0]  # one scale, 0 to the max


def test_an_empty_overview_says_so(admin):
    with frozen_clock(T0):
        html = admin.get(URL).content.decode()
    assert "No open alert." in html
    assert "No worker seen in the last 60 s." in html
    assert "No pending or running job." in html
    assert "No run in the last 24 h." in html


def test_the_overview_needs_view_job_and_is_listed_in_the_admin_index(staff):
    assert client_for(staff("nobody")).get(URL).status_code == 403
    viewer = client_for(staff("viewer", "view_job"))
    assert viewer.get(URL).status_code == 200
    assert URL in viewer.get("/admin/").content.decode()
