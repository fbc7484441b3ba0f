"""Send batches admin: drafts, dry-run and its report, seed send, checklist-guarded schedule,
pause / resume / cancel, each with a clear message, refusals changing nothing."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import override_settings

from scheduler_app import clock
from scheduler_app.db import database_now
from scheduler_app.models import ControlEvent, Job, Recipient, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.admin.conftest import (
    BATCH_FIELDS,
    UNPREPARED,
    change,
    changelist,
    client_for,
    delete,
    form_data,
    get,
    messages_of,
    offered_actions,
    post_action,
    snapshot,
)
from tests.testapp.models import ProviderBehaviour, ProviderCall

pytestmark = pytest.mark.django_db

#: What pausing with a reason like the stale-send guard's is refused with.
STALE_REASON_REFUSED = (
    'A pause reason cannot start with "stale:": that marks the stale-send guard\'s own pauses.'
)

Status = SendBatch.Status
CHANGE = ("view_sendbatch", "change_sendbatch")


def lanes(batch, status=Job.Status.PENDING):
    return Job.objects.filter(
        task_name=SEND_BATCH_TASK,
        unique_key__startswith="batch:%s:lane:" % batch.pk,
        status=status,
    ).count()


def report_text(response) -> str:
    try:
        return b"".join(response.streaming_content).decode()
    finally:
        response.close()


# -- drafts ------------------------------------------------------------------------


def test_add_form_creates_a_draft_owned_by_the_operator(admin, superuser):
    response = admin.post(
        "/admin/scheduler_app/sendbatch/add/",
        {
            "name": "Autumn",
            "subject_template": "Hello",
            "text_template": "Hi {{ first_name }}, autumn is here.",
            "audience": "tests.customers",
            "audience_params": '{"plan": "pro"}',
            "expected_max_audience": "10",
            "seed_list": "seed@example.com",
            "seed_context": "first_name = Seed",
            "scheduled_at_0": "2026-10-01",
            "scheduled_at_1": "08:00:00",
            "timezone": "Europe/Paris",
            "undo_window": "00:00:30",
            "provider": "fake",
            "rate_limit_key": "fake",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    batch = SendBatch.objects.get(name="Autumn")
    assert (batch.status, batch.owner, batch.audience_params, batch.undo_window) == (
        Status.DRAFT,
        superuser,
        {"plan": "pro"},
        dt.timedelta(seconds=30),
    )
    assert batch.scheduled_at == dt.datetime(2026, 10, 1, 8, 0, tzinfo=dt.UTC)


def test_a_draft_with_an_unknown_time_zone_gets_a_field_error(admin, make_batch):
    batch = make_batch()
    page = admin.get(change("sendbatch", batch.pk))
    data = form_data(page)
    data["timezone"] = "Mars/Olympus"
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["timezone"]
    assert response.context["adminform"].form.errors["timezone"] == [
        "Unknown time zone 'Mars/Olympus'; use an IANA name such as Europe/London."
    ]
    assert SendBatch.objects.get(pk=batch.pk).timezone == "Europe/Paris"


def test_a_draft_can_be_edited(admin, make_batch):
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data["text_template"] = "Hi {{ first_name }}, the news changed."
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 302
    stored = SendBatch.objects.get(pk=batch.pk)
    assert (stored.text_template, stored.status) == (data["text_template"], Status.DRAFT)


def test_a_batch_that_is_no_longer_a_draft_cannot_be_edited(admin, make_batch):
    batch = make_batch(status=Status.SENDING)
    page = admin.get(change("sendbatch", batch.pk))
    assert 'name="text_template"' not in page.content.decode()
    admin.post(change("sendbatch", batch.pk), {"text_template": "changed", "name": "changed"})
    stored = SendBatch.objects.get(pk=batch.pk)
    assert (stored.name, stored.text_template) == (batch.name, batch.text_template)


@pytest.mark.parametrize(
    "status", [Status.SCHEDULED, Status.SENDING, Status.PAUSED, Status.COMPLETED, Status.CANCELLED]
)
def test_only_drafts_can_be_deleted_the_sent_markers_stay(admin, make_batch, status):
    draft = make_batch(name="draft")
    batch = make_batch(status=status, total=1, sent=1)
    Recipient.objects.create(
        batch=batch, recipient_key="k1", address="a@example.com", status=Recipient.Status.SENT
    )
    response = post_action(admin, "sendbatch", "delete_selected", [draft, batch], post="yes")
    assert messages_of(response) == [
        (
            "error",
            "Only draft batches can be deleted; nothing was deleted. Not drafts: %s (%s)."
            % (batch, batch.get_status_display()),
        )
    ]
    assert SendBatch.objects.filter(pk__in=[draft.pk, batch.pk]).count() == 2
    assert Recipient.objects.filter(batch=batch).count() == 1
    assert admin.post(delete("sendbatch", batch.pk), {"post": "yes"}).status_code == 403
    assert SendBatch.objects.filter(pk=batch.pk).exists()


def test_a_draft_can_be_deleted(admin, make_batch):
    draft = make_batch()
    response = post_action(admin, "sendbatch", "delete_selected", [draft], post="yes")
    assert messages_of(response) == [("success", "Successfully deleted 1 send batch.")]
    assert not SendBatch.objects.filter(pk=draft.pk).exists()


# -- dry-run -----------------------------------------------------------------------------


def test_dry_run_action_reports_its_summary_and_links_the_downloadable_report(
    admin, make_batch, customers
):
    batch = make_batch()
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    assert messages_of(response) == [
        ("success", "Spring news: dry-run rendered 3 of 3 recipients, 0 problem(s).")
    ]
    assert ProviderCall.objects.count() == 0

    page = admin.get(change("sendbatch", batch.pk)).content.decode()
    report_url = "/admin/scheduler_app/sendbatch/%s/report/" % batch.pk
    assert 'class="dry-run-report" href="%s"' % report_url in page
    shown = page.split(' <a class="dry-run-report"')[0].rsplit(" — ", 1)[1]
    assert set(shown.split(", ")) == {  # a set: PostgreSQL's jsonb keeps its own key order
        "rows 3",
        "recipients 3",
        "rendered 3",
        "failed 0",
        "empty 0",
        "very short 0",
        "leftover syntax 0",
        "invalid addresses 0",
        "duplicate addresses 0",
        "duplicate keys 0",
        "suppressed 0",
        "problems 0",
    }

    response = admin.get(report_url)
    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        'attachment; filename="dry-run-batch-%s.txt"' % batch.pk
    )
    text = report_text(response)
    assert text.startswith("Dry-run of batch %s (Spring news) at " % batch.pk)
    assert "rendered             3\n" in text
    assert "problems             0\n" in text
    assert "ada@example.com\tNews for Ada\t" in text


def test_dry_run_with_problems_is_a_warning_and_the_report_names_them(admin, make_batch, customers):
    customers[1].first_name = ""
    customers[1].save()
    batch = make_batch(text_template="Hi {{ first_name }}, here is the spring news.")
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    assert messages_of(response) == [
        ("warning", "Spring news: dry-run rendered 2 of 3 recipients, 1 problem(s).")
    ]
    text = report_text(admin.get("/admin/scheduler_app/sendbatch/%s/report/" % batch.pk))
    assert "failed               1\n" in text
    assert "grace@example.com" in text


def test_dry_run_of_a_template_that_does_not_compile_fails_with_the_reason(admin, make_batch):
    batch = make_batch(text_template="Hi {% if %}")
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    [(level, text)] = messages_of(response)
    assert level == "error"
    assert text.startswith("Spring news: dry-run failed: Template syntax error: ")
    assert SendBatch.objects.get(pk=batch.pk).dry_run_at is None


def test_report_link_of_a_batch_without_a_dry_run_is_404(admin, make_batch):
    batch = make_batch()
    response = admin.get("/admin/scheduler_app/sendbatch/%s/report/" % batch.pk)
    assert response.status_code == 404


# -- seed send ------------------------------------------------------------------------------


def test_seed_send_sends_to_the_seed_list_through_the_provider(admin, make_batch, customers):
    batch = make_batch(seed_list=["seed@example.com"], seed_context={"first_name": "Seed"})
    response = post_action(admin, "sendbatch", "seed_send_action", [batch])
    assert messages_of(response) == [
        ("success", "Spring news: seed send went to 1 of 1 seed addresses.")
    ]
    [call] = ProviderCall.objects.all()
    assert (call.address, call.subject) == ("seed@example.com", "News for Seed")
    assert SendBatch.objects.get(pk=batch.pk).seed_sent_at is not None


def test_seed_send_that_the_provider_refuses_is_a_warning(admin, make_batch):
    ProviderBehaviour.objects.create(address="seed@example.com", answer="permanent")
    batch = make_batch(seed_list=["seed@example.com"])
    response = post_action(admin, "sendbatch", "seed_send_action", [batch])
    assert messages_of(response) == [
        ("warning", "Spring news: seed send went to 0 of 1 seed addresses.")
    ]
    assert SendBatch.objects.get(pk=batch.pk).seed_sent_at is None


def test_seed_send_without_a_seed_list_is_refused(admin, make_batch):
    batch = make_batch()
    response = post_action(admin, "sendbatch", "seed_send_action", [batch])
    assert messages_of(response) == [
        ("error", "Spring news: seed send refused: The batch has no seed list.")
    ]
    assert ProviderCall.objects.count() == 0


# -- schedule ------------------------------------------------------------------------------


def test_schedule_first_shows_the_checklist_and_changes_nothing(admin, make_batch):
    batch = make_batch()
    response = post_action(admin, "sendbatch", "schedule_action", [batch])
    assert response.status_code == 200
    assert response.templates[0].name == "admin/scheduler_app/batch_confirm.html"
    [(shown, labelled, _)] = response.context["items"]
    items = [item for item, _ in labelled]
    assert shown == batch
    assert [i.name for i in items if not i.ok] == list(UNPREPARED)
    html = response.content.decode()
    assert "Schedule these send batches?" in html
    assert html.count('name="relax"') == 3  # the superuser may relax each failing item
    assert SendBatch.objects.get(pk=batch.pk).status == Status.DRAFT


def utc(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def planned_start(page: str) -> dt.datetime:
    """Return the start a confirmation page announces."""
    [shown] = re.findall(r"Sending starts at (\S+ \S+) UTC", page)
    return dt.datetime.fromisoformat(shown).replace(tzinfo=dt.UTC)


@override_settings(SCHEDULER_APP={"UNDO_SAFETY_MARGIN": 2.0})
def test_schedule_confirmation_shows_the_real_start_after_the_undo_window_and_margin(
    admin, make_batch
):
    batch = make_batch(scheduled_at=clock.now(), undo_window=dt.timedelta(seconds=30))
    before = database_now().replace(microsecond=0)
    page = post_action(admin, "sendbatch", "schedule_action", [batch]).content.decode()
    after = database_now()
    assert (
        before + dt.timedelta(seconds=32) <= planned_start(page) <= after + dt.timedelta(seconds=32)
    )
    assert "after the 30.0 s undo window and the 2.0 s safety margin" in page
    assert page.count("Sending starts at") == 1
    assert "UTC UTC" not in page and "+00:00 UTC" not in page


def test_schedule_confirmation_shows_a_later_send_time_as_the_start(admin, make_batch):
    batch = make_batch(undo_window=dt.timedelta(seconds=30))  # sends in an hour
    page = post_action(admin, "sendbatch", "schedule_action", [batch]).content.decode()
    assert planned_start(page) == batch.scheduled_at.replace(microsecond=0)
    assert "UTC UTC" not in page


def test_schedule_with_a_failing_checklist_is_refused_listing_the_failing_items(admin, make_batch):
    batch = make_batch()
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(admin, "sendbatch", "schedule_action", [batch], confirm="yes")
    assert messages_of(response) == [
        (
            "error",
            "Spring news was not scheduled. Failing: "
            "audience_within_limit (The audience has not been counted; run a dry-run.); "
            "dry_run_clean (No dry-run of the current template and audience.); "
            "seed_sent (No seed send of the current template and audience.)",
        )
    ]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert before["status"] == Status.DRAFT
    assert lanes(batch) == 0
    assert not ControlEvent.objects.exists()


def test_schedule_after_dry_run_and_seed_send_passes_the_checklist(admin, make_batch, customers):
    batch = make_batch(seed_list=["seed@example.com"], seed_context={"first_name": "Seed"})
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    assert messages_of(response)[0][0] == "success"
    response = post_action(admin, "sendbatch", "seed_send_action", [batch])
    assert messages_of(response)[0][0] == "success"
    checklist = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert "failing" not in checklist
    response = post_action(admin, "sendbatch", "schedule_action", [batch], confirm="yes")
    assert messages_of(response) == [
        ("success", "Spring news scheduled; sending starts at %s." % utc(batch.scheduled_at))
    ]
    stored = SendBatch.objects.get(pk=batch.pk)
    assert stored.status == Status.SCHEDULED
    assert lanes(batch) == 2
    assert set(Job.objects.filter(task_name=SEND_BATCH_TASK).values_list("run_at", flat=True)) == {
        batch.scheduled_at
    }


def test_schedule_with_relaxed_items_needs_the_relax_checklist_permission(staff, make_batch):
    batch = make_batch()
    client = client_for(staff("operator", *CHANGE))
    confirm_page = post_action(client, "sendbatch", "schedule_action", [batch])
    assert 'name="relax"' not in confirm_page.content.decode()
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(
        client, "sendbatch", "schedule_action", [batch], confirm="yes", relax=list(UNPREPARED)
    )
    assert messages_of(response) == [
        ("error", "You do not have permission to relax checklist items.")
    ]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert lanes(batch) == 0


def test_schedule_with_relaxed_items_and_the_permission_schedules_and_audits_them(
    staff, make_batch
):
    batch = make_batch()
    client = client_for(staff("lead", *CHANGE, "relax_checklist"))
    response = post_action(
        client, "sendbatch", "schedule_action", [batch], confirm="yes", relax=list(UNPREPARED)
    )
    assert messages_of(response) == [
        ("success", "Spring news scheduled; sending starts at %s." % utc(batch.scheduled_at))
    ]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SCHEDULED
    event = ControlEvent.objects.get(action="schedule")
    assert (event.target, event.reason, event.by.username) == (
        str(batch.pk),
        ", ".join(UNPREPARED),
        "lead",
    )


def test_relaxing_only_some_failing_items_still_refuses_with_the_rest(admin, make_batch):
    batch = make_batch()
    response = post_action(
        admin, "sendbatch", "schedule_action", [batch], confirm="yes", relax=["seed_sent"]
    )
    assert messages_of(response) == [
        (
            "error",
            "Spring news was not scheduled. Failing: "
            "audience_within_limit (The audience has not been counted; run a dry-run.); "
            "dry_run_clean (No dry-run of the current template and audience.)",
        )
    ]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.DRAFT


def test_scheduling_a_batch_that_is_not_a_draft_is_refused(admin, make_batch):
    batch = make_batch(status=Status.SENDING)
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(
        admin, "sendbatch", "schedule_action", [batch], confirm="yes", relax=list(UNPREPARED)
    )
    assert messages_of(response) == [
        (
            "error",
            "Spring news was not scheduled: Only a draft can be scheduled; this batch is sending.",
        )
    ]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert lanes(batch) == 0


TOO_LONG = (
    "undo_window puts the run time after 9000-01-01T00:00:00+00:00, the latest allowed; "
    "got 3000000 days, 0:00:00."
)


def test_scheduling_a_draft_stored_with_an_undo_window_too_long_is_refused_with_a_message(
    admin, make_batch
):
    """Stored before the form refused it: the start it would have is past any calendar."""
    batch = make_batch(undo_window=dt.timedelta(days=3_000_000))
    before = snapshot(batch, *BATCH_FIELDS)

    asked = post_action(admin, "sendbatch", "schedule_action", [batch])

    assert asked.status_code == 200
    assert messages_of(asked) == [("error", "Spring news cannot be scheduled: %s" % TOO_LONG)]
    assert "Sending starts at" not in asked.content.decode()

    response = post_action(
        admin, "sendbatch", "schedule_action", [batch], confirm="yes", relax=list(UNPREPARED)
    )

    assert messages_of(response) == [("error", "Spring news was not scheduled: %s" % TOO_LONG)]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert lanes(batch) == 0


# -- pause / resume / cancel ---------------------------------------------------------------


def test_pause_asks_for_a_reason_first(admin, make_batch):
    batch = make_batch(status=Status.SENDING)
    response = post_action(admin, "sendbatch", "pause_action", [batch])
    assert response.status_code == 200
    assert "Pause these send batches?" in response.content.decode()
    assert messages_of(response) == []
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SENDING


@pytest.mark.parametrize("reason", ["", "  "])
def test_pause_without_a_reason_is_refused_and_changes_nothing(admin, make_batch, reason):
    batch = make_batch(status=Status.SENDING)
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(
        admin, "sendbatch", "pause_action", [batch], confirm="yes", reason=reason
    )
    assert response.status_code == 200  # the form again, with the error
    assert messages_of(response) == [
        ("error", "A reason is required to pause. Nothing was paused.")
    ]
    assert response.context["form"].errors == {"reason": ["A reason is required to pause."]}
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert not ControlEvent.objects.exists()


def test_pause_with_the_stale_send_guards_reason_is_refused_and_changes_nothing(admin, make_batch):
    batch = make_batch(status=Status.SENDING)
    response = post_action(
        admin, "sendbatch", "pause_action", [batch], confirm="yes", reason="stale: hold on"
    )
    assert response.context["form"].errors == {"reason": [STALE_REASON_REFUSED]}
    assert messages_of(response) == [("error", STALE_REASON_REFUSED + " Nothing was paused.")]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SENDING


def test_pause_with_a_reason_pauses_and_records_it(admin, superuser, make_batch):
    batch = make_batch(status=Status.SENDING)
    response = post_action(
        admin, "sendbatch", "pause_action", [batch], confirm="yes", reason="Wrong link"
    )
    assert messages_of(response) == [("success", "Spring news paused.")]
    stored = SendBatch.objects.get(pk=batch.pk)
    assert (stored.status, stored.status_reason, stored.status_changed_by) == (
        Status.PAUSED,
        "Wrong link",
        superuser,
    )
    assert ControlEvent.objects.filter(action="pause", reason="Wrong link").count() == 1


@pytest.mark.parametrize("status", [Status.DRAFT, Status.COMPLETED, Status.PAUSED])
def test_pausing_a_batch_that_is_not_scheduled_or_sending_is_refused(admin, make_batch, status):
    batch = make_batch(status=status)
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(
        admin, "sendbatch", "pause_action", [batch], confirm="yes", reason="Why not"
    )
    assert messages_of(response) == [("error", "Spring news was not paused: it is %s." % status)]
    assert snapshot(batch, *BATCH_FIELDS) == before


def test_resume_of_a_completed_batch_gives_a_clear_error_and_changes_nothing(admin, make_batch):
    batch = make_batch(status=Status.COMPLETED)
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(admin, "sendbatch", "resume_action", [batch])
    assert messages_of(response) == [
        (
            "error",
            "Spring news was not resumed: "
            "Only a paused batch can be resumed; this batch is completed.",
        )
    ]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert lanes(batch) == 0


def test_resume_of_a_paused_batch_continues_it(admin, make_batch):
    batch = make_batch(status=Status.PAUSED)
    response = post_action(admin, "sendbatch", "resume_action", [batch])
    assert messages_of(response) == [("success", "Spring news resumed.")]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SCHEDULED  # never started
    assert lanes(batch) == 2


def test_resume_is_not_offered_without_the_resume_sendbatch_permission(staff, make_batch):
    batch = make_batch(status=Status.PAUSED)
    client = client_for(staff("operator", *CHANGE))
    assert offered_actions(client, "sendbatch") == {
        "dry_run_action",
        "seed_send_action",
        "schedule_action",
        "pause_action",
        "cancel_action",
    }
    response = post_action(client, "sendbatch", "resume_action", [batch])
    assert messages_of(response) == [("warning", "No action selected.")]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.PAUSED
    assert lanes(batch) == 0

    lead = client_for(staff("lead", *CHANGE, "resume_sendbatch"))
    assert "resume_action" in offered_actions(lead, "sendbatch")
    response = post_action(lead, "sendbatch", "resume_action", [batch])
    assert messages_of(response) == [("success", "Spring news resumed.")]


def test_cancel_goes_through_a_confirmation_page(admin, make_batch):
    batch = make_batch()
    schedule_batch(batch, relax=UNPREPARED)
    response = post_action(admin, "sendbatch", "cancel_action", [batch])
    assert response.status_code == 200
    html = response.content.decode()
    assert "Cancel these send batches?" in html
    assert "Yes, cancel" in html
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SCHEDULED

    response = post_action(admin, "sendbatch", "cancel_action", [batch], confirm="yes")
    assert messages_of(response) == [("success", "Spring news cancelled; 0 were already sent.")]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.CANCELLED
    assert lanes(batch) == 0
    assert lanes(batch, Job.Status.CANCELLED) == 2


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.CANCELLED, Status.FAILED])
def test_cancelling_a_finished_batch_is_refused(admin, make_batch, status):
    batch = make_batch(status=status)
    before = snapshot(batch, *BATCH_FIELDS)
    response = post_action(admin, "sendbatch", "cancel_action", [batch], confirm="yes")
    assert messages_of(response) == [("error", "Spring news was not cancelled: it is %s." % status)]
    assert snapshot(batch, *BATCH_FIELDS) == before


def test_batch_list_shows_progress_and_counts(admin, make_batch):
    make_batch(status=Status.SENDING, total=4, sent=1, failed=1)
    response = get(admin, changelist("sendbatch"))
    html = response.content.decode()
    assert 'max="100" value="50.0"' in html
    assert '<span class="scheduler-progress-text">50.0%</span>' in html


# -- bad input that must not become a 500 ---------------------------------------------------


def test_add_form_with_blank_json_fields_saves_them_empty(admin):
    response = admin.post(
        "/admin/scheduler_app/sendbatch/add/",
        {
            "name": "Blank",
            "subject_template": "Hello",
            "text_template": "Hi {{ first_name }}, hello.",
            "audience": "tests.customers",
            "audience_params": "",
            "expected_max_audience": "10",
            "seed_list": "",
            "seed_context": "",
            "timezone": "UTC",
            "undo_window": "0",
            "provider": "fake",
            "rate_limit_key": "fake",
        },
    )
    assert response.status_code == 302
    batch = SendBatch.objects.get(name="Blank")
    assert (batch.audience_params, batch.seed_list, batch.seed_context) == ({}, [], {})


def test_audience_params_must_be_a_json_object(admin, make_batch):
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data["audience_params"] = '["pro"]'
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "audience_params": ["Audience parameters must be a JSON object."]
    }
    assert SendBatch.objects.get(pk=batch.pk).audience_params == {}


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [
        ("seed_context", 'first_name = "a\\u0000"', "seed context"),
        ("seed_context", "first_name = a\x00", "seed context"),
        ("audience_params", '{"plan": "a\\u0000"}', "audience parameter object"),
        ("seed_list", "qa\x00@example.com", "seed list"),
    ],
)
def test_a_json_field_with_a_nul_is_a_form_error_not_a_500(admin, make_batch, field, value, what):
    """PostgreSQL's jsonb refuses a NUL (a 500); SQLite would store it."""
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data[field] = value
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        field: ["The %s contains a NUL character (\\x00), which the database cannot store." % what]
    }
    assert getattr(SendBatch.objects.get(pk=batch.pk), field) == getattr(batch, field)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("-00:00:10", "undo_window must not be negative; got -1 day, 23:59:50."),
        (
            "999999999 00:00:00",
            "undo_window puts the run time after 9000-01-01T00:00:00+00:00, the latest allowed; "
            "got 999999999 days, 0:00:00.",
        ),
    ],
)
def test_an_undo_window_the_scheduling_api_refuses_is_a_form_error(admin, make_batch, given, error):
    """A huge one was a 500 on save (SQLite) or on scheduling; a negative one was saved."""
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data["undo_window"] = given
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"undo_window": [error]}
    assert SendBatch.objects.get(pk=batch.pk).undo_window == dt.timedelta(0)


THRESHOLD = "The breaker threshold must be above 0 and at most 1 (a share of failed attempts)."


@pytest.mark.parametrize(
    ("field", "given", "error"),
    [
        ("breaker_threshold", "-1", THRESHOLD),
        ("breaker_threshold", "0", THRESHOLD),
        ("breaker_threshold", "5", THRESHOLD),
        ("breaker_window", "0", "Ensure this value is greater than or equal to 1."),
    ],
)
def test_a_breaker_setting_it_cannot_mean_is_a_form_error(admin, make_batch, field, given, error):
    """-1 would trip on a clean send, 5 never, 0 was taken as the default."""
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data[field] = given
    response = admin.post(change("sendbatch", batch.pk), data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {field: [error]}
    assert getattr(SendBatch.objects.get(pk=batch.pk), field) is None


def test_the_breaker_bounds_themselves_are_accepted(admin, make_batch):
    batch = make_batch()
    data = form_data(admin.get(change("sendbatch", batch.pk)))
    data.update(breaker_threshold="1", breaker_window="1")
    assert admin.post(change("sendbatch", batch.pk), data).status_code == 302
    stored = SendBatch.objects.get(pk=batch.pk)
    assert (stored.breaker_threshold, stored.breaker_window) == (1.0, 1)


def test_dry_run_of_a_batch_whose_audience_params_are_not_an_object_fails_clearly(
    admin, make_batch
):
    batch = make_batch(audience_params=["pro"])
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    assert messages_of(response) == [
        (
            "error",
            "Spring news: dry-run failed: Audience 'tests.customers' needs its parameters "
            "as a JSON object, not list.",
        )
    ]


def test_dry_run_of_an_unknown_audience_fails_clearly(admin, make_batch):
    batch = make_batch(audience="tests.nobody")
    response = post_action(admin, "sendbatch", "dry_run_action", [batch])
    [(level, text)] = messages_of(response)
    assert level == "error"
    assert text.startswith(
        "Spring news: dry-run failed: Unknown audience 'tests.nobody'; registered: "
    )


def test_a_kill_switch_that_stops_sends_shows_on_the_batch_list(admin, superuser, make_batch):
    from scheduler_app import controls

    make_batch(status=Status.SENDING)
    controls.pause("global", by=superuser, reason="Incident")
    response = get(admin, changelist("sendbatch"))
    assert messages_of(response) == [("warning", "Paused by kill switch: EVERYTHING.")]
