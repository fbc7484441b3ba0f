"""The scheduler's change lists fit a 1280 px wide window with realistic rows (#38): no
horizontal overflow, long text wraps; the job page's attempt history fits too."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import schedule
from scheduler_app.models import Job, JobAttempt, Recipient, Schedule
from scheduler_app.sends.start import start_sending
from tests.browser.test_admin_polish import scheduled_batch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ERROR = (
    'Traceback (most recent call last):\n  File "/srv/app/tasks.py", line 42, in sync\n'
    "ValueError: the invoice service answered 503 Service Unavailable for "
    "https://billing.internal.example.com/api/v2/invoices?customer=1234567890&page=17"
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
        provider_message_id="<0123456789abcdef0123456789abcdef@mail.example.com>",
    )
    job = schedule(
        "tests.record", {}, delay=3600, owner=operator, unique_key="invoice-sync:" + "x" * 60
    )
    Job.objects.filter(pk=job.pk).update(last_error=ERROR, attempts=2)
    JobAttempt.objects.create(
        job=job,
        attempt=1,
        task_name=job.task_name,
        worker_id="worker-host-1.example.com:12345:abcdef",
        due_at=job.run_at,
        started_at=job.run_at + dt.timedelta(seconds=2),
        finished_at=job.run_at + dt.timedelta(seconds=3),
        outcome=JobAttempt.Outcome.FAILED,
        error=ERROR,
    )
    open_alert(kind=Alert.Kind.OVERDUE, subject="task:tests.record", summary=ERROR)
    Schedule.objects.create(name="nightly invoice sync", task_name="tests.noop", cron="0 3 * * *")
    return job


LISTS = ["job", "recipient", "sendbatch", "schedule", "alert"]


def test_every_scheduler_list_and_the_job_page_fit_1280_pixels(admin_page, rows):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 900})
    too_wide = {}
    for model in LISTS:
        page.goto("/admin/scheduler_app/%s/" % model)
        assert page.locator("#result_list tbody tr").count() >= 1, model
        width = page.evaluate("document.documentElement.scrollWidth")
        results = page.locator("#changelist .results")
        overflow = results.evaluate("el => el.scrollWidth - el.clientWidth")
        if width > 1280 or overflow > 0:
            too_wide[model] = (width, overflow)
    page.goto("/admin/scheduler_app/job/%s/change/" % rows.pk)
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > 1280:
        too_wide["job page"] = (width, 0)
    assert too_wide == {}
