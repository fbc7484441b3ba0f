"""What a newcomer meets in the admin, in a real headless Chromium: a sent batch's page shows
each field once and nothing to save, the batch page follows its batch live, every operator
action works from the keyboard with named controls, the list fits 1280 px, and axe-core finds
no serious or critical accessibility problem on the operator's pages."""

from __future__ import annotations

import datetime as dt

import pytest
from axe_playwright_python.sync_playwright import Axe

from scheduler_app import schedule
from scheduler_app.models import Control, Job, Schedule, SendBatch
from scheduler_app.sends import states
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.start import start_sending
from tests.browser.test_operator_admin import RELAX, batch_status, make_batch, make_customers

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

Status = SendBatch.Status
#: The fields of a batch's page once it is no longer a draft (scheduler_app.admin.sends).
BATCH_PAGE_FIELDS = [
    "name",
    "subject_template",
    "text_template",
    "html_template",
    "audience",
    "audience_params",
    "expected_max_audience",
    "seed_list",
    "seed_context",
    "scheduled_at",
    "timezone",
    "local_delivery_time",
    "undo_window",
    "provider",
    "rate_limit_key",
    "breaker_window",
    "breaker_threshold",
    "status",
    "status_reason",
    "progress_display",
    "checklist_display",
    "dry_run_display",
]


def tab_to(page, locator, *, limit: int = 300) -> None:
    """Press Tab until ``locator`` has the focus: proves it is reachable by keyboard."""
    target = locator.element_handle()
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("el => el === document.activeElement", target):
            return
    raise AssertionError("Tab never reached %s" % locator)


def submit(page, key: str) -> None:
    """Press ``key`` on the focused control and wait for the page it loads."""
    with page.expect_navigation():
        page.keyboard.press(key)


def message(page, level: str) -> str:
    return page.locator("ul.messagelist li.%s" % level).inner_text()


def scheduled_batch(**fields) -> SendBatch:
    make_customers(3)
    return schedule_batch(make_batch(**fields), relax=RELAX)


def test_a_sent_batch_page_shows_each_field_once_and_no_save_buttons(admin_page):
    page = admin_page
    batch = make_batch(status=Status.COMPLETED)

    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)

    for field in BATCH_PAGE_FIELDS:
        assert page.locator(".form-row.field-%s" % field).count() == 1, field
    assert page.locator("label:text-is('Name:')").count() == 1
    assert page.locator("label:text-is('Breaker threshold:')").count() == 1
    for button in ("_save", "_continue", "_addanother"):
        assert page.locator('[name="%s"]' % button).count() == 0, button
    form = page.locator("#sendbatch_form")
    # The preview's picker sits in the page but belongs to its own form (form="preview-form").
    assert (
        form.locator("input:not([type=hidden]):not([form]), textarea, select:not([form])").count()
        == 0
    )
    assert page.locator("h1").inner_text() == "View send batch"
    crumbs = page.locator(".breadcrumbs a").all_inner_texts()  # a list on Django 6.1
    assert [c.strip() for c in crumbs[:3]] == ["Home", "Scheduler", "Send batches"]


def test_the_plural_reads_send_batches(admin_page):
    page = admin_page
    assert page.locator('a[href="/admin/scheduler_app/sendbatch/"]').first.inner_text() == (
        "Send batches"
    )
    assert "batchs" not in page.content()


def test_a_page_opened_while_scheduled_follows_the_batch_into_sending_and_pause(admin_page):
    page = admin_page
    batch = scheduled_batch(undo_window=dt.timedelta(seconds=60))
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    page.evaluate("window.notReloaded = true")
    status = page.locator(".field-status .readonly")
    assert status.inner_text() == "scheduled"
    assert page.locator(".undo-box").is_visible()
    assert (
        page.locator(".undo-box .scheduler-countdown").inner_text().startswith("Undo possible for")
    )
    visible = "els => els.filter(e => !e.hidden).map(e => e.dataset.action)"
    assert page.locator(".batch-action").evaluate_all(visible) == ["pause", "cancel"]

    assert start_sending(batch.pk) is not None  # what the first lane does

    page.wait_for_function(
        "document.querySelector('.field-status .readonly').textContent === 'sending'"
    )
    page.wait_for_function("document.querySelector('.undo-box').hidden")
    assert page.locator(".batch-action").evaluate_all(visible) == ["pause", "cancel"]
    assert page.locator(".undo-button").is_hidden()

    assert states.pause(batch.pk, reason="Wrong link in the footer")  # another operator
    page.wait_for_function(
        "document.querySelector('.field-status .readonly').textContent === 'paused'"
    )
    assert page.locator(".field-status_reason .readonly").inner_text() == (
        "Wrong link in the footer"
    )
    assert page.locator(".batch-action").evaluate_all(visible) == ["resume", "cancel"]
    assert page.evaluate("window.notReloaded") is True


def test_every_batch_page_action_works_from_the_keyboard(admin_page):
    page = admin_page
    batch = scheduled_batch(undo_window=dt.timedelta(seconds=600))
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)

    reason = page.get_by_role("textbox", name="Reason to pause")
    assert reason.get_attribute("required") is not None
    tab_to(page, reason)
    page.keyboard.type("Checking the audience")
    submit(page, "Enter")
    assert page.url.endswith("/sendbatch/%s/change/" % batch.pk)  # back on the batch's page
    assert message(page, "success") == "Spring news paused."
    assert batch_status(batch) == Status.PAUSED

    tab_to(page, page.get_by_role("button", name="Resume this send"))
    submit(page, "Space")
    assert message(page, "success") == "Spring news resumed."
    assert batch_status(batch) == Status.SCHEDULED

    tab_to(page, page.get_by_role("button", name="Undo"))
    submit(page, "Enter")
    assert (
        message(page, "success") == "Undone: Spring news will not be sent. "
        "To fix it and send it again, use Duplicate as draft."
    )
    assert batch_status(batch) == Status.CANCELLED

    other = scheduled_batch(name="Summer news")
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % other.pk)
    tab_to(page, page.get_by_role("button", name="Cancel this send…"))
    submit(page, "Enter")
    tab_to(page, page.get_by_role("button", name="Yes, cancel"))
    submit(page, "Enter")
    assert page.url.endswith("/sendbatch/%s/change/" % other.pk)
    assert message(page, "success") == "Summer news cancelled; 0 were already sent."
    assert batch_status(other) == Status.CANCELLED


def test_list_actions_work_from_the_keyboard(admin_page):
    page = admin_page
    make_customers(2)
    batch = make_batch(status=Status.DRAFT)
    job = schedule("tests.record", {}, delay=3600)

    page.goto("/admin/scheduler_app/sendbatch/")
    tab_to(page, page.locator('input[name="_selected_action"][value="%s"]' % batch.pk))
    page.keyboard.press("Space")
    tab_to(page, page.locator('select[name="action"]'))
    while page.locator('select[name="action"]').input_value() != "dry_run_action":
        page.keyboard.press("ArrowDown")
    tab_to(page, page.locator('button[name="index"]'))
    submit(page, "Enter")
    assert message(page, "success") == (
        "Spring news: dry-run rendered 2 of 2 recipients, 0 problem(s)."
    )

    page.goto("/admin/scheduler_app/job/")
    tab_to(page, page.locator('input[name="_selected_action"][value="%s"]' % job.pk))
    page.keyboard.press("Space")
    tab_to(page, page.locator('select[name="action"]'))
    while page.locator('select[name="action"]').input_value() != "cancel_jobs":
        page.keyboard.press("ArrowDown")
    tab_to(page, page.locator('button[name="index"]'))
    submit(page, "Enter")
    assert Job.objects.get(pk=job.pk).status == Job.Status.CANCELLED


def test_switchboard_controls_are_named_and_work_from_the_keyboard(admin_page):
    page = admin_page
    batch = scheduled_batch()
    page.goto("/admin/scheduler_app/control/")

    reason = page.get_by_role("textbox", name="Reason to pause Queue emails")
    assert reason.get_attribute("required") is not None
    pause = page.get_by_role("button", name="Pause Queue emails", exact=True)
    assert page.get_by_role("button", name="Pause Queue default", exact=True).count() == 1
    assert page.get_by_role("button", name="Pause send Spring news", exact=True).count() == 1
    assert page.get_by_role("button", name="Pause Everything", exact=True).count() == 1
    names = page.locator("button.switch-pause").evaluate_all(
        "els => els.map(e => e.textContent.trim())"
    )
    assert len(names) == len(set(names)), names  # no two buttons announced alike

    tab_to(page, pause)
    page.keyboard.press("Enter")  # without a reason, the browser refuses to submit
    assert page.evaluate("document.activeElement.name") == "reason"
    assert not Control.objects.filter(paused=True).exists()
    page.keyboard.type("Provider outage")
    submit(page, "Enter")
    assert message(page, "success") == "Queue emails: paused."
    assert Control.objects.get(scope="queue", target="emails").paused

    tab_to(page, page.get_by_role("button", name="Resume Queue emails", exact=True))
    submit(page, "Space")
    assert message(page, "success") == "Queue emails: resumed."
    assert not Control.objects.get(scope="queue", target="emails").paused

    tab_to(page, page.get_by_role("textbox", name="Reason to pause send Spring news"))
    page.keyboard.type("Wrong link")
    submit(page, "Enter")
    assert batch_status(batch) == Status.PAUSED


def test_progress_bars_have_accessible_names(admin_page):
    page = admin_page
    batch = scheduled_batch()
    page.goto("/admin/scheduler_app/sendbatch/")
    assert page.get_by_role("progressbar", name="Progress of Spring news").count() == 1
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    assert page.get_by_role("progressbar", name="Send progress").count() == 1


def test_send_batch_list_fits_1280_pixels(admin_page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    make_batch(
        name="Quarterly newsletter for every customer",
        status=Status.SENDING,
        total=1_234_567,
        sent=1_000_000,
        failed=12_345,
        skipped=1_234,
    )
    page.goto("/admin/scheduler_app/sendbatch/")

    assert page.locator("#result_list thead th").count() == 6  # checkbox + 5 columns
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    results = page.locator("#changelist .results")
    assert results.evaluate("el => el.scrollWidth <= el.clientWidth")


@pytest.fixture
def audited_pages(admin_page):
    """Pages an operator uses, with something on each."""
    make_customers(2)
    batch = scheduled_batch(undo_window=dt.timedelta(seconds=600))
    schedule("tests.record", {}, delay=3600)
    return admin_page, {
        "admin index": "/admin/",
        "jobs": "/admin/scheduler_app/job/",
        "send batch": "/admin/scheduler_app/sendbatch/%s/change/" % batch.pk,
        "switchboard": "/admin/scheduler_app/control/",
        "lateness": "/admin/scheduler_app/latenessoverview/",
    }


def test_axe_finds_no_serious_or_critical_problem_on_the_operator_pages(audited_pages):
    page, pages = audited_pages
    axe = Axe()
    found = {}
    for name, url in pages.items():
        page.goto(url)
        violations = axe.run(page).response["violations"]
        serious = [
            "%s (%s): %s" % (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
            for v in violations
            if v["impact"] in ("serious", "critical")
        ]
        if serious:
            found[name] = serious
    assert found == {}


@pytest.fixture
def more_scheduler_pages(admin_page):
    """The scheduler's other admin pages (lists and object pages), with something on each."""
    from scheduler_app.alerts import open_alert
    from scheduler_app.models import Alert

    make_customers(2)
    scheduled_batch()
    job = schedule("tests.record", {}, delay=3600)
    alert, _ = open_alert(kind=Alert.Kind.OVERDUE, subject="task:tests.record", summary="late")
    nightly = Schedule.objects.create(name="nightly", task_name="tests.noop", cron="0 3 * * *")
    return admin_page, {
        "schedule": "/admin/scheduler_app/schedule/%s/change/" % nightly.pk,
        "operations overview": "/admin/scheduler_app/operationsoverview/",
        "alert": "/admin/scheduler_app/alert/%s/change/" % alert.pk,
        "job": "/admin/scheduler_app/job/%s/change/" % job.pk,
        "send batches": "/admin/scheduler_app/sendbatch/",
        "recipients": "/admin/scheduler_app/recipient/",
        "worker heartbeats": "/admin/scheduler_app/workerheartbeat/",
        "prune runs": "/admin/scheduler_app/prunerun/",
        "suppressions": "/admin/scheduler_app/suppression/",
    }


def test_axe_finds_no_serious_or_critical_problem_on_the_other_scheduler_pages(
    more_scheduler_pages,
):
    """Breadcrumb links are underlined on every scheduler page, not only the ones audited above,
    and a schedule's start date and time boxes have names."""
    test_axe_finds_no_serious_or_critical_problem_on_the_operator_pages(more_scheduler_pages)
