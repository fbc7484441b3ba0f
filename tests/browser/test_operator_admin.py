"""The operator's admin in a real headless Chromium: log in, dry-run and its report, undo inside
the window, pause a running send from the switchboard, watch the progress bar move."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends import limiter
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.browser.conftest import PASSWORD, USERNAME
from tests.helpers import wait_until
from tests.processes.conftest import WorkerProcess
from tests.testapp.models import Customer, ProviderBehaviour, ProviderCall

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

Status = SendBatch.Status
#: Checklist items these batches skip (no dry-run or seed send first).
RELAX = ("audience_within_limit", "dry_run_clean", "seed_sent")


def make_customers(count: int) -> None:
    Customer.objects.bulk_create(
        Customer(email="c%s@example.com" % n, first_name="Name%s" % n) for n in range(count)
    )


def make_batch(**fields) -> SendBatch:
    values = {
        "name": "Spring news",
        "subject_template": "News for {{ first_name }}",
        "text_template": "Hi {{ first_name }}, here is the spring news.",
        "audience": "tests.customers",
        "expected_max_audience": 1000,
        "provider": "fake",
        "rate_limit_key": "fake",
        "scheduled_at": timezone.now(),
        "timezone": "Europe/Paris",
        **fields,
    }
    return SendBatch.objects.create(**values)


def batch_status(batch: SendBatch) -> str:
    return SendBatch.objects.filter(pk=batch.pk).values_list("status", flat=True).get()


def calls(batch: SendBatch) -> int:
    return ProviderCall.objects.filter(idempotency_key__startswith="%s:" % batch.pk).count()


def lanes_unfinished(batch: SendBatch) -> int:
    return (
        Job.objects.unfinished()
        .filter(task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:lane:" % batch.pk)
        .count()
    )


def run_action(page, batch: SendBatch, action: str) -> None:
    """Tick the batch on the send batch list, pick ``action`` and press Go."""
    page.goto("/admin/scheduler_app/sendbatch/")
    page.check('input[name="_selected_action"][value="%s"]' % batch.pk)
    page.select_option('select[name="action"]', action)
    page.click('button[name="index"]')


def message(page, level: str) -> str:
    return page.locator("ul.messagelist li.%s" % level).inner_text()


@pytest.fixture
def send_worker(transactional_db) -> Iterator[Callable[[], WorkerProcess]]:
    """Start real runworker subprocesses on the live server's database; kill them afterwards."""
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        worker = WorkerProcess(
            "--concurrency", "2", "--no-scheduler", "--poll-interval", "0.2", "--lease", "5"
        )
        started.append(worker)
        worker.wait_for_output("worker started")
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()


@pytest.fixture
def slow_send(transactional_db) -> Callable[[int], SendBatch]:
    """Return a function that schedules a batch to ``count`` customers that takes seconds.

    10 sends per second (so lanes claim chunks of 10 and see a pause every
    second), and the fake provider takes 50 ms per call.
    """

    def make(count: int) -> SendBatch:
        make_customers(count)
        limiter.set_rate("fake", 10, burst=10)
        ProviderBehaviour.objects.create(answer="ok", delay=0.05)
        return schedule_batch(make_batch(), relax=RELAX)

    return make


def test_log_in_shows_the_scheduler_admin(page, operator):
    page.goto("/admin/")
    page.wait_for_url("**/admin/login/**")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url("**/admin/")
    assert page.locator("#site-name").inner_text() == "Django administration"
    for link in ("job", "sendbatch", "control", "schedule", "latenessoverview", "recipient"):
        assert page.locator('a[href="/admin/scheduler_app/%s/"]' % link).count() >= 1, link


def test_dry_run_from_the_list_then_download_its_report(admin_page):
    page = admin_page
    make_customers(3)
    batch = make_batch(status=Status.DRAFT)
    run_action(page, batch, "dry_run_action")
    assert message(page, "success") == (
        "Spring news: dry-run rendered 3 of 3 recipients, 0 problem(s)."
    )
    assert ProviderCall.objects.count() == 0

    page.click('#result_list a:text-is("Spring news")')  # the batch's change page
    page.wait_for_url("**/sendbatch/%s/change/" % batch.pk)
    report = page.locator("a.dry-run-report")
    assert report.inner_text() == "Download the report"
    with page.expect_download() as info:
        report.click()
    download = info.value
    assert download.suggested_filename == "dry-run-batch-%s.txt" % batch.pk
    text = Path(download.path()).read_text()
    assert text.startswith("Dry-run of batch %s (Spring news) at " % batch.pk)
    assert "rows                 3\n" in text
    assert "rendered             3\n" in text
    assert "problems             0\n" in text
    assert "c0@example.com\tNews for Name0\t" in text


def test_schedule_with_an_undo_window_then_undo_inside_it(admin_page):
    page = admin_page
    make_customers(2)
    batch = make_batch(status=Status.DRAFT, undo_window=dt.timedelta(seconds=30))

    run_action(page, batch, "schedule_action")
    assert page.locator("h2").first.inner_text() == "Schedule these send batches?"
    for item in RELAX:  # the superuser may relax the failing checklist items
        page.check('input[name="relax"][value="%s"]' % item)
    page.click("button.confirm-action")
    assert message(page, "success").startswith("Spring news scheduled; sending starts at ")
    assert batch_status(batch) == Status.SCHEDULED

    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    countdown = page.locator(".undo-box .scheduler-countdown")
    page.wait_for_function(
        "el => el.textContent.startsWith('Undo possible for')", arg=countdown.element_handle()
    )
    seconds_left = float(countdown.inner_text().split("for ")[1].split(" s")[0])
    assert 0 < seconds_left <= 30
    page.click("button.undo-button")
    page.wait_for_url("**/sendbatch/%s/change/" % batch.pk)
    assert (
        message(page, "success") == "Undone: Spring news will not be sent. "
        "To fix it and send it again, use Duplicate as draft."
    )
    assert page.locator(".undo-box").is_hidden()
    assert batch_status(batch) == Status.CANCELLED
    assert lanes_unfinished(batch) == 0


def test_pause_a_running_send_from_the_switchboard(admin_page, slow_send, send_worker):
    page, batch = admin_page, slow_send(100)
    send_worker()
    wait_until(lambda: calls(batch) >= 5, timeout=30, message="the send to be under way")

    page.goto("/admin/scheduler_app/control/")
    row = page.locator('tr.switch-row[data-scope="batch"][data-target="%s"]' % batch.pk)
    assert row.locator(".switch-state").inner_text() == "sending"
    row.locator("input.switch-reason").fill("Wrong link in the footer")
    row.locator("button.switch-pause").click()
    page.wait_for_url("**/admin/scheduler_app/control/")
    at_pause = calls(batch)
    assert message(page, "success") == "Batch %s: paused." % batch.pk
    row = page.locator('tr.switch-row[data-scope="batch"][data-target="%s"]' % batch.pk)
    assert row.locator(".switch-state").inner_text() == "PAUSED"
    assert "Wrong link in the footer" in row.inner_text()
    assert batch_status(batch) == Status.PAUSED

    # The lanes see the pause before their next chunk and end: nothing sends any more.
    wait_until(lambda: lanes_unfinished(batch) == 0, timeout=15, message="the lanes to stop")
    stopped = calls(batch)
    assert stopped - at_pause <= 2 * 10  # at most the chunk each lane had in flight
    assert stopped < 100
    stored = SendBatch.objects.get(pk=batch.pk)
    sent = Recipient.objects.filter(batch=batch, status=Recipient.Status.SENT).count()
    assert (stored.status, stored.sent, sent) == (Status.PAUSED, stopped, stopped)

    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    assert page.locator(".field-status .readonly").inner_text() == "paused"
    assert calls(batch) == stopped


def test_progress_bar_moves_without_reloading_the_page(admin_page, slow_send, send_worker):
    page, batch = admin_page, slow_send(60)
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    bar = ".scheduler-live .scheduler-progress"
    assert page.eval_on_selector(bar, "el => el.value") == 0
    page.evaluate("window.notReloaded = true")

    send_worker()
    page.wait_for_function("document.querySelector('%s').value > 0" % bar, timeout=30_000)
    first = page.eval_on_selector(bar, "el => el.value")
    assert first < 100
    page.wait_for_function("document.querySelector('%s').value > %s" % (bar, first))
    second = page.eval_on_selector(bar, "el => el.value")
    assert first < second
    assert page.evaluate("window.notReloaded") is True  # the same page, refreshed by itself

    page.wait_for_function(
        "document.querySelector('.scheduler-live').dataset.status === 'completed'",
        timeout=30_000,
    )
    assert page.eval_on_selector(bar, "el => el.value") == 100
    assert page.locator(".scheduler-live .p-sent").inner_text() == "60"
    assert page.locator(".scheduler-live .p-remaining").inner_text() == "0"
    assert page.locator(".scheduler-live .scheduler-progress-text").inner_text() == "100%"
    assert page.evaluate("window.notReloaded") is True
