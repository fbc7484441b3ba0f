"""The send flow in a real Chromium (#38): a checked batch saved with a new send time stays
checked; the undo countdown in minutes and seconds, and an undone batch duplicated as a draft;
a job's page has its buttons, no Save; a draft previewed, dry-run, seed sent and scheduled from
its page; a frozen batch previewed for a recipient of its frozen or its live audience."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import schedule
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.batches import schedule_batch, seed_send
from scheduler_app.sends.checklist import run_checklist
from scheduler_app.sends.dry_run import dry_run
from scheduler_app.sends.start import start_sending
from tests.browser.test_operator_admin import RELAX, make_batch, make_customers, message
from tests.testapp.models import Customer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def failing(batch: SendBatch) -> list[str]:
    batch.refresh_from_db()
    return [item.name for item in run_checklist(batch) if not item.ok]


def test_saving_only_a_new_send_time_keeps_the_dry_run_and_the_seed_send(admin_page):
    page = admin_page
    make_customers(2)
    batch = make_batch(
        text_template="Hi {{ first_name }},\n\nhere is the spring news.\n",
        scheduled_at=dt.datetime(2026, 12, 24, 8, 0, tzinfo=dt.UTC),
        seed_list=["seed@example.com"],
        seed_context={"first_name": "Seed"},
    )
    dry_run(batch)
    seed_send(batch)
    assert failing(batch) == []
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    page.fill("#id_scheduled_at_1", "09:30:00")
    page.click('input[name="_continue"]')
    assert "was changed successfully" in message(page, "success")
    assert page.locator("ul.checklist li.failing").count() == 0
    assert failing(batch) == []


def test_an_undone_batch_is_duplicated_as_a_draft_from_its_page(admin_page):
    page = admin_page
    make_customers(1)
    batch = schedule_batch(
        make_batch(undo_window=dt.timedelta(seconds=600), scheduled_at=None),
        relax=(*RELAX, "schedule_unambiguous"),
    )
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    countdown = page.locator(".undo-box .scheduler-countdown")
    page.wait_for_function(
        "el => /^Undo possible for (9 min [0-5]?[0-9]|10 min 0) s$/.test(el.textContent)",
        arg=countdown.element_handle(),
    )
    page.get_by_role("button", name="Undo").click()
    assert "use Duplicate as draft" in message(page, "success")
    page.get_by_role("button", name="Duplicate as draft").click()
    copy = SendBatch.objects.exclude(pk=batch.pk).get()
    page.wait_for_url("**/sendbatch/%s/change/" % copy.pk)
    assert page.locator("#id_name").input_value() == "Spring news (copy)"
    assert page.locator("#id_text_template").input_value() == batch.text_template


def test_the_job_page_runs_its_actions_and_offers_no_save(admin_page):
    page = admin_page
    job = schedule("tests.record", {}, delay=3600)
    page.goto("/admin/scheduler_app/job/%s/change/" % job.pk)
    assert page.locator('input[name="_save"]').count() == 0
    page.get_by_role("button", name="Run now").click()
    assert message(page, "success") == "1 job will run now."
    assert page.url.endswith("/admin/scheduler_app/job/%s/change/" % job.pk)
    assert page.get_by_role("button", name="Run now").count() == 1  # still pending
    page.get_by_role("button", name="Cancel this job").click()
    assert message(page, "success") == "1 job cancelled."
    assert Job.objects.get(pk=job.pk).status == Job.Status.CANCELLED
    assert page.locator(".scheduler-actions button").count() == 0


def test_a_draft_is_previewed_dry_run_seed_sent_and_scheduled_from_its_page(admin_page):
    page = admin_page
    make_customers(2)
    batch = make_batch(
        scheduled_at=dt.datetime(2026, 12, 24, 8, 0, tzinfo=dt.UTC),
        seed_list=["seed@example.com"],
        seed_context={"first_name": "Seed"},
    )
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    assert page.locator("pre.preview-subject").inner_text() == "News for Name0"
    page.select_option("#preview-recipient", label="c1@example.com")
    page.get_by_role("button", name="Preview", exact=True).click()
    assert page.locator("pre.preview-subject").inner_text() == "News for Name1"
    assert page.locator("pre.preview-text").inner_text() == "Hi Name1, here is the spring news."
    assert page.get_by_role("button", name="Cancel this send…").is_hidden()
    assert page.get_by_role("button", name="Seed send").is_disabled()
    page.get_by_role("button", name="Dry-run").click()
    assert "dry-run rendered 2 of 2 recipients" in message(page, "success")
    page.get_by_role("button", name="Seed send").click()
    assert "seed send went to 1 of 1" in message(page, "success")
    assert page.locator("ul.checklist li.failing").count() == 0
    page.get_by_role("button", name="Schedule…").click()
    page.get_by_role("button", name="Yes, schedule").click()
    assert "Spring news scheduled" in message(page, "success")
    assert page.url.endswith("/sendbatch/%s/change/" % batch.pk)
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.SCHEDULED


def test_a_sending_batch_is_previewed_for_a_frozen_or_a_live_recipient(admin_page):
    page = admin_page
    make_customers(3)
    batch = schedule_batch(make_batch(), relax=RELAX)
    assert start_sending(batch.pk) is not None  # the audience is frozen
    first, _, last = Customer.objects.order_by("pk")
    Customer.objects.filter(pk=first.pk).update(first_name="Renamed")  # after the freeze
    page.goto("/admin/scheduler_app/sendbatch/%s/change/" % batch.pk)
    picker = page.locator("#preview-recipient")
    assert picker.locator("optgroup").evaluate_all("groups => groups.map(g => g.label)") == [
        "Frozen audience (who this batch sends to)",
        "Live audience (as it is now)",
    ]
    assert picker.input_value() == "frozen:%s" % first.pk
    assert page.locator("pre.preview-subject").inner_text() == "News for Name0"
    picker.select_option("live:%s" % first.pk)
    page.get_by_role("button", name="Preview", exact=True).click()
    assert page.locator("pre.preview-subject").inner_text() == "News for Renamed"
    page.fill("#preview-find", "C2@EXAMPLE.COM")
    page.get_by_role("button", name="Find", exact=True).click()
    assert page.locator("pre.preview-subject").inner_text() == "News for Name2"
    assert page.locator("#preview-recipient").input_value() == "frozen:%s" % last.pk
    assert page.locator("#preview-recipient option:checked").inner_text() == (
        "c2@example.com (pending)"
    )
