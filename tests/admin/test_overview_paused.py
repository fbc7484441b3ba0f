"""The overview says first what is paused, and shows the current send and drain rates (#38)."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import controls
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, SendBatch

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
URL = "/admin/scheduler_app/operationsoverview/"


def test_paused_scopes_and_batches_come_first(admin, make_batch):
    controls.pause("global", reason="Provider incident")
    controls.pause("queue", "emails", reason="Bounce storm")
    make_batch(status=SendBatch.Status.PAUSED, status_reason="Typo in the subject")
    html = admin.get(URL).content.decode()
    first_heading = html.split("<h2", 2)[1]
    assert first_heading.startswith(' id="paused" class="scheduler-paused">Paused: 3</h2>')
    assert html.index('id="paused"') < html.index('id="alerts"')
    paused = html.split('id="paused"', 1)[1].split("</table>", 1)[0]
    for text in (
        "Everything",
        "Provider incident",
        "Queue emails",
        "Bounce storm",
        "Send batch Spring news",
        "Typo in the subject",
    ):
        assert text in paused


def test_nothing_paused_says_so_after_the_rates(admin):
    html = admin.get(URL).content.decode()
    assert "Nothing is paused." in html


def test_the_rates_are_the_sending_batches_and_the_jobs_finished_in_the_last_minute(
    admin, make_batch
):
    make_batch(status=SendBatch.Status.SENDING, started_at=T0 - dt.timedelta(seconds=100), sent=500)
    make_batch(
        name="Other",
        status=SendBatch.Status.SENDING,
        started_at=T0 - dt.timedelta(seconds=10),
        sent=30,
    )
    for seconds_ago in (5, 30, 59, 61, 300):
        Job.objects.create(
            task_name="tests.record",
            scheduled_for=T0,
            run_at=T0,
            status=Job.Status.SUCCEEDED,
            finished_at=T0 - dt.timedelta(seconds=seconds_ago),
        )
    with frozen_clock(T0):
        response = admin.get(URL)
    assert response.context["send_rate"] == 8.0  # 500 / 100 s + 30 / 10 s
    assert response.context["drain_rate"] == 0.05  # 3 jobs in the last 60 s
    html = response.content.decode()
    assert "Sending 8.0 messages/s; finishing 0.05 jobs/s (last minute)." in html
