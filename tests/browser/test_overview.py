"""The operations overview in a real browser: the lateness charts draw without any network."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app.models import Job, JobAttempt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_lateness_chart_draws_from_inline_svg_alone(admin_page):
    page = admin_page
    now = timezone.now()
    parent = Job.objects.create(
        task_name="tests.record", scheduled_for=now, run_at=now, status=Job.Status.SUCCEEDED
    )
    for hours_ago, late in ((3.5, 2.0), (0.5, 8.0)):
        started = now - dt.timedelta(hours=hours_ago)
        JobAttempt.objects.create(
            job=parent,
            attempt=1,
            task_name=parent.task_name,
            due_at=started - dt.timedelta(seconds=late),
            started_at=started,
            finished_at=started,
            outcome=JobAttempt.Outcome.SUCCEEDED,
        )
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto("/admin/scheduler_app/operationsoverview/")
    bars = page.locator("svg.scheduler-chart rect:not(.frame)")
    assert bars.count() == 2
    heights = [bars.nth(i).bounding_box()["height"] for i in range(2)]
    assert heights == [pytest.approx(12.0), pytest.approx(48.0)]  # 2 s and 8 s on one scale
    assert bars.nth(1).locator("title").text_content().endswith(": 8 s")
    # Nothing but the live server was asked for anything: no CDN, no chart library.
    assert requests and all(url.startswith(page.url.split("/admin/")[0]) for url in requests)


def test_a_pause_shows_first_on_the_open_overview_without_a_reload(admin_page):
    from scheduler_app import controls

    page = admin_page
    page.goto("/admin/scheduler_app/operationsoverview/")
    assert "Nothing is paused." in page.locator(".scheduler-rates").inner_text()
    page.evaluate("window.notReloaded = true")
    controls.pause("global", reason="Provider incident")
    page.wait_for_function(
        "() => document.querySelector('#content-main h2').textContent === 'Paused: 1'",
        timeout=10_000,
    )
    assert page.locator("tr.scheduler-paused").inner_text().split("\t")[:2] == [
        "⏸ Everything",
        "Provider incident",
    ]
    assert page.evaluate("window.notReloaded") is True
