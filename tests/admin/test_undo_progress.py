"""Undo window on the batch page, the progress JSON, and the recipients list ("who got what")."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry

from scheduler_app.clock import frozen_clock
from scheduler_app.models import ControlEvent, Job, Recipient, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.start import start_sending
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.admin.conftest import (
    BATCH_FIELDS,
    UNPREPARED,
    change,
    changelist,
    client_for,
    get,
    messages_of,
    snapshot,
)

pytestmark = pytest.mark.django_db

Status = SendBatch.Status
T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def undo_url(batch) -> str:
    return "/admin/scheduler_app/sendbatch/%s/undo/" % batch.pk


def progress_url(batch) -> str:
    return "/admin/scheduler_app/sendbatch/%s/progress/" % batch.pk


def lane_statuses(batch) -> list[str]:
    return sorted(
        Job.objects.filter(
            task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:lane:" % batch.pk
        ).values_list("status", flat=True)
    )


@pytest.fixture
def scheduled_with_undo(make_batch, customers):
    """A batch scheduled a moment ago with a 30 s undo window."""
    batch = make_batch(undo_window=dt.timedelta(seconds=30), scheduled_at=None)
    return schedule_batch(batch, relax=(*UNPREPARED, "schedule_unambiguous"))


def test_batch_page_shows_the_undo_countdown_and_button_inside_the_window(
    admin, scheduled_with_undo
):
    batch = scheduled_with_undo
    html = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert 'action="%s"' % undo_url(batch) in html
    assert 'data-deadline="%s"' % batch.undo_deadline.isoformat() in html
    assert 'class="button undo-button">Undo</button>' in html
    assert "scheduler_app/admin.js" in html


def test_undo_inside_the_window_cancels_the_batch_and_its_lanes(
    admin, superuser, scheduled_with_undo
):
    batch = scheduled_with_undo
    assert lane_statuses(batch) == ["pending", "pending"]
    response = admin.post(undo_url(batch))
    assert response.status_code == 302
    assert response["Location"] == change("sendbatch", batch.pk)
    assert messages_of(response) == [
        (
            "success",
            "Undone: Spring news will not be sent. "
            "To fix it and send it again, use Duplicate as draft.",
        )
    ]
    stored = SendBatch.objects.get(pk=batch.pk)
    assert (stored.status, stored.status_reason, stored.status_changed_by) == (
        Status.CANCELLED,
        "Undone.",
        superuser,
    )
    assert lane_statuses(batch) == ["cancelled", "cancelled"]
    assert ControlEvent.objects.filter(action="undo", target=str(batch.pk)).count() == 1
    assert list(
        LogEntry.objects.filter(object_id=str(batch.pk)).values_list(
            "user__username", "change_message"
        )
    ) == [("root", "Undone.")]
    # The page no longer offers an undo (the box stays for the live script, hidden).
    page = admin.get(change("sendbatch", batch.pk))
    assert page.context["batch_actions"] == []
    assert (
        '<div class="undo-box" style="margin:1em 0;padding:1em;border:2px solid #ba2121" hidden>'
        in (page.content.decode())
    )


def test_undo_after_the_worker_claimed_the_batch_is_too_late_and_changes_nothing(
    admin, scheduled_with_undo
):
    batch = scheduled_with_undo
    assert start_sending(batch.pk) is not None  # what a lane does first: freeze, then sending
    before = snapshot(batch, *BATCH_FIELDS)
    lanes_before = lane_statuses(batch)
    response = admin.post(undo_url(batch))
    assert response.status_code == 302
    assert messages_of(response) == [
        ("error", "Too late, already sending: 0 of 3 sent. Nothing was changed.")
    ]
    assert snapshot(batch, *BATCH_FIELDS) == before
    assert before["status"] == Status.SENDING
    assert lane_statuses(batch) == lanes_before
    assert not ControlEvent.objects.filter(action="undo").exists()


def test_undo_of_a_completed_batch_reports_how_far_it_got(admin, make_batch):
    batch = make_batch(status=Status.COMPLETED, total=3, sent=3)
    response = admin.post(undo_url(batch))
    assert messages_of(response) == [
        ("error", "Too late, already completed: 3 of 3 sent. Nothing was changed.")
    ]
    assert SendBatch.objects.get(pk=batch.pk).status == Status.COMPLETED


def test_undo_is_post_only_and_needs_the_change_permission(staff, scheduled_with_undo):
    batch = scheduled_with_undo
    viewer = client_for(staff("viewer", "view_sendbatch"))
    assert viewer.post(undo_url(batch)).status_code == 403
    operator = client_for(staff("operator", "view_sendbatch", "change_sendbatch"))
    assert operator.get(undo_url(batch)).status_code in (403, 405)
    assert SendBatch.objects.get(pk=batch.pk).status == Status.SCHEDULED
    assert lane_statuses(batch) == ["pending", "pending"]


def test_progress_endpoint_returns_counts_share_and_rate(admin, make_batch):
    batch = make_batch(
        status=Status.SENDING,
        total=10,
        sent=4,
        failed=1,
        skipped=1,
        started_at=T0 - dt.timedelta(seconds=2),
    )
    with frozen_clock(T0):
        response = admin.get(progress_url(batch))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "status": "sending",
        "total": 10,
        "sent": 4,
        "failed": 1,
        "skipped": 1,
        "remaining": 4,
        "percent": 60.0,
        "rate": 2.0,
        "undo_deadline": None,
        "status_reason": "",
        "actions": ["pause", "cancel"],
    }


def test_progress_endpoint_of_a_batch_not_yet_frozen(admin, scheduled_with_undo):
    batch = scheduled_with_undo
    data = admin.get(progress_url(batch)).json()
    assert (data["status"], data["total"], data["remaining"], data["percent"]) == (
        "scheduled",
        None,
        None,
        0,
    )
    assert data["undo_deadline"] == batch.undo_deadline.isoformat()


def test_progress_endpoint_needs_view_permission_and_an_existing_batch(staff, admin, make_batch):
    batch = make_batch()
    nobody = client_for(staff("nobody"))
    assert nobody.get(progress_url(batch)).status_code == 403
    assert admin.get("/admin/scheduler_app/sendbatch/999999/progress/").status_code == 404


def test_batch_page_has_a_live_progress_block_pointing_at_the_endpoint(admin, make_batch):
    batch = make_batch(status=Status.SENDING, total=4, sent=2)
    html = admin.get(change("sendbatch", batch.pk)).content.decode()
    assert (
        'class="scheduler-live" data-url="%s" data-status="sending"' % progress_url(batch) in html
    )
    assert 'sent <b class="p-sent">2</b>' in html
    assert 'remaining <b class="p-remaining">2</b>' in html


# -- recipients: who got what ---------------------------------------------------------------


@pytest.fixture
def frozen_batch(make_batch, customers):
    batch = make_batch()
    schedule_batch(batch, relax=UNPREPARED)
    assert start_sending(batch.pk) is not None
    return batch


def test_recipients_list_is_searchable_by_address(admin, frozen_batch):
    response = get(admin, changelist("recipient"), {"q": "grace@example.com"})
    assert [r.address for r in response.context["cl"].result_list] == ["grace@example.com"]
    # Part of an address finds it too.
    response = get(admin, changelist("recipient"), {"q": "example.org"})
    assert [r.address for r in response.context["cl"].result_list] == ["linus@example.org"]


def test_recipients_list_is_searchable_by_recipient_key(admin, frozen_batch, customers):
    key = str(customers[2].pk)
    assert Recipient.objects.filter(recipient_key=key).exists()
    response = get(admin, changelist("recipient"), {"q": key})
    assert [r.address for r in response.context["cl"].result_list] == ["linus@example.org"]


def test_recipients_are_read_only(admin, frozen_batch):
    marker = Recipient.objects.get(address="ada@example.com")
    assert admin.get("/admin/scheduler_app/recipient/add/").status_code == 403
    admin.post(change("recipient", marker.pk), {"status": "sent", "address": "x@example.com"})
    marker.refresh_from_db()
    assert (marker.status, marker.address) == ("pending", "ada@example.com")
