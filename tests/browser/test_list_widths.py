"""Every scheduler change list fits a 1280 px wide window with realistic rows (#38): no
horizontal overflow, long text wraps; the overviews, the switchboard and the job page's
attempt history fit too."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib import admin
from django.utils import timezone

from scheduler_app import schedule
from scheduler_app.controls import pause
from scheduler_app.models import (
    FeedbackEvent,
    Job,
    JobAttempt,
    PruneRun,
    RateLimit,
    Recipient,
    Schedule,
    ScheduleOccurrence,
    Suppression,
    SuppressionRemoval,
    WorkerHeartbeat,
)
from scheduler_app.sends.start import start_sending
from tests.browser.test_admin_polish import scheduled_batch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ERROR = (
    'Traceback (most recent call last):\n  File "/srv/app/tasks.py", line 42, in sync\n'
    "ValueError: the invoice service answered 503 Service Unavailable for "
    "https://billing.internal.example.com/api/v2/invoices?customer=1234567890&page=17"
)
ADDRESS = "customer.service.department+newsletters@subsidiary.example-holding.co.uk"
MESSAGE_ID = "<0123456789abcdef0123456789abcdef@mail.example.com>"
WORKER = "worker-host-1.eu-west-1.compute.internal:12345:0123456789abcdef"
#: The pages that are not lists of rows: the two overviews and the switchboard.
DASHBOARDS = {"operationsoverview", "latenessoverview", "control"}


def scheduler_pages() -> list[str]:
    """Return the model name of every scheduler_app page registered in the admin."""
    return sorted(
        model._meta.model_name
        for model in admin.site._registry
        if model._meta.app_label == "scheduler_app"
    )


@pytest.fixture
def rows(operator):
    """One or more realistic rows in each list, long text included."""
    from scheduler_app.alerts import open_alert
    from scheduler_app.models import Alert

    batch = scheduled_batch(name="Quarterly newsletter for every customer of the shop")
    start_sending(batch.pk)
    Recipient.objects.filter(batch=batch).update(
        status=Recipient.Status.FAILED,
        attempts=3,
        last_error=ERROR,
        provider_message_id=MESSAGE_ID,
    )
    job = schedule(
        "tests.record", {}, delay=3600, owner=operator, unique_key="invoice-sync:" + "x" * 60
    )
    Job.objects.filter(pk=job.pk).update(last_error=ERROR, attempts=2)
    JobAttempt.objects.create(
        job=job,
        attempt=1,
        task_name=job.task_name,
        worker_id=WORKER,
        due_at=job.run_at,
        started_at=job.run_at + dt.timedelta(seconds=2),
        finished_at=job.run_at + dt.timedelta(seconds=3),
        outcome=JobAttempt.Outcome.FAILED,
        error=ERROR,
    )
    open_alert(kind=Alert.Kind.OVERDUE, subject="task:tests.record", summary=ERROR)
    nightly = Schedule.objects.create(
        name="nightly invoice sync for every customer account in every region",
        task_name="tests.noop",
        cron="0 3 * * *",
    )
    now = timezone.now()
    ScheduleOccurrence.objects.create(
        schedule=nightly,
        occurrence_at=now,
        outcome=ScheduleOccurrence.Outcome.SKIPPED_OVERLAP,
        job=job,
        detail=ERROR,
    )
    PruneRun.objects.create(
        reference_time=now,
        source="job:1234567",
        outcome=PruneRun.Outcome.REFUSED,
        counts={"jobs": 1_250_000, "recipients": 48_000_000, "recipient_contexts": 3_000_000},
        max_rows=1_000_000,
        detail="More rows qualify than MAX_PRUNE_ROWS allows: jobs 1250000 of 1000000. " * 2,
        finished_at=now,
    )
    RateLimit.objects.create(key="anymail:sendgrid:marketing-eu-west-1", rate=47.5, burst=100)
    Suppression.objects.create(
        address=ADDRESS,
        scope="newsletter:weekly-digest-for-premium-customers",
        reason=Suppression.Reason.SOFT_BOUNCES,
        source=Suppression.Source.ANYMAIL,
        detail=ERROR,
        batch=batch,
    )
    SuppressionRemoval.objects.create(
        address=ADDRESS,
        scope="newsletter:weekly-digest-for-premium-customers",
        was_reason=Suppression.Reason.HARD_BOUNCE,
        was_source=Suppression.Source.WEBHOOK,
        why="The customer wrote to support: the mailbox is full again since they moved. " * 2,
        removed_by=operator,
    )
    FeedbackEvent.objects.create(
        event_id="sendgrid:" + "e" * 80,
        kind=FeedbackEvent.Kind.COMPLAINT,
        source=Suppression.Source.ANYMAIL,
        address=ADDRESS,
        batch=batch,
        message=MESSAGE_ID.strip("<>"),
        detail=ERROR,
    )
    WorkerHeartbeat.objects.create(
        worker_id=WORKER,
        host="worker-host-1.eu-west-1.compute.internal",
        pid=1234567,
        version="1.4.0.dev0+g3f2a1b9c",
        queues=["default", "sends", "reports-nightly", "billing-and-invoices"],
        concurrency=18,
        started_at=now - dt.timedelta(hours=30),
        last_seen_at=now,
        running=12,
    )
    pause("queue", "emails", by=operator, reason=ERROR)
    return job


def test_every_scheduler_page_is_covered_and_every_list_has_rows(rows):
    """The width test below walks every registered scheduler page; each list has a row."""
    from django.apps import apps

    pages = scheduler_pages()
    assert {"job", "recipient", "workerheartbeat", "prunerun"} <= set(pages)
    for name in sorted(set(pages) - DASHBOARDS):
        assert apps.get_model("scheduler_app", name)._default_manager.exists(), name


def test_every_scheduler_list_and_the_job_page_fit_1280_pixels(admin_page, rows):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 900})
    too_wide = {}
    for model in scheduler_pages():
        page.goto("/admin/scheduler_app/%s/" % model)
        if model not in DASHBOARDS:
            assert page.locator("#result_list tbody tr").count() >= 1, model
        width = page.evaluate("document.documentElement.scrollWidth")
        overflow = page.evaluate(
            "Math.max(0, ...Array.from(document.querySelectorAll('#content table, "
            "#changelist .results'), el => el.scrollWidth - el.parentElement.clientWidth))"
        )
        if width > 1280 or overflow > 0:
            too_wide[model] = (width, overflow)
    page.goto("/admin/scheduler_app/job/%s/change/" % rows.pk)
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > 1280:
        too_wide["job page"] = (width, 0)
    assert too_wide == {}
