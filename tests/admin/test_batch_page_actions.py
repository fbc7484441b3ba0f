"""The batch page's own buttons (pause, resume, cancel): the list actions on one batch, with the
same guards and messages, back on the batch's page; and the actions each user is offered."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.models import SendBatch
from scheduler_app.sends.batches import schedule_batch
from tests.admin.conftest import UNPREPARED, change, client_for, messages_of

pytestmark = pytest.mark.django_db

Status = SendBatch.Status
VIEW, CHANGE = ("view_sendbatch",), ("view_sendbatch", "change_sendbatch")


def action_url(batch, name: str) -> str:
    return "/admin/scheduler_app/sendbatch/%s/actions/%s/" % (batch.pk, name)


def progress(client, batch) -> dict:
    return client.get("/admin/scheduler_app/sendbatch/%s/progress/" % batch.pk).json()


@pytest.fixture
def scheduled(make_batch, customers):
    batch = make_batch(undo_window=dt.timedelta(seconds=600), scheduled_at=None)
    return schedule_batch(batch, relax=(*UNPREPARED, "schedule_unambiguous"))


def status(batch) -> str:
    return SendBatch.objects.values_list("status", flat=True).get(pk=batch.pk)


def test_pause_from_the_page_needs_a_reason_then_returns_to_the_page(admin, scheduled):
    response = admin.post(action_url(scheduled, "pause"), {"confirm": "yes", "reason": " "})
    assert response.status_code == 200  # the reason form again, nothing paused
    assert messages_of(response) == [
        ("error", "A reason is required to pause. Nothing was paused.")
    ]
    assert status(scheduled) == Status.SCHEDULED

    response = admin.post(action_url(scheduled, "pause"), {"confirm": "yes", "reason": "Typo"})
    assert response.status_code == 302
    assert response["Location"] == change("sendbatch", scheduled.pk)
    assert messages_of(response) == [("success", "Spring news paused.")]
    stored = SendBatch.objects.get(pk=scheduled.pk)
    assert (stored.status, stored.status_reason) == (Status.PAUSED, "Typo")


def test_resume_and_cancel_from_the_page(admin, scheduled):
    admin.post(action_url(scheduled, "pause"), {"confirm": "yes", "reason": "Typo"})
    assert progress(admin, scheduled)["actions"] == ["resume", "cancel"]

    response = admin.post(action_url(scheduled, "resume"))
    assert messages_of(response)[-1] == ("success", "Spring news resumed.")
    assert status(scheduled) == Status.SCHEDULED

    confirm = admin.post(action_url(scheduled, "cancel"))
    assert confirm.templates[0].name == "admin/scheduler_app/batch_confirm.html"
    assert status(scheduled) == Status.SCHEDULED  # not before the confirmation
    response = admin.post(action_url(scheduled, "cancel"), {"confirm": "yes"})
    assert response["Location"] == change("sendbatch", scheduled.pk)
    assert status(scheduled) == Status.CANCELLED
    assert progress(admin, scheduled)["actions"] == []


def test_page_actions_are_posts_of_known_actions_by_permitted_users(staff, admin, scheduled):
    assert admin.get(action_url(scheduled, "pause")).status_code == 405
    assert admin.post(action_url(scheduled, "delete_selected")).status_code == 404
    assert admin.post("/admin/scheduler_app/sendbatch/999999/actions/pause/").status_code == 404
    operator = client_for(staff("operator", *CHANGE))
    assert operator.post(action_url(scheduled, "resume")).status_code == 403  # no resume perm
    viewer = client_for(staff("viewer", *VIEW))
    response = viewer.post(action_url(scheduled, "pause"), {"confirm": "yes", "reason": "x"})
    assert response.status_code == 403
    assert status(scheduled) == Status.SCHEDULED


def test_progress_offers_only_what_the_user_may_do(staff, admin, scheduled):
    assert progress(admin, scheduled)["actions"] == ["undo", "pause", "cancel"]
    assert progress(client_for(staff("operator", *CHANGE)), scheduled)["actions"] == [
        "undo",
        "pause",
        "cancel",
    ]
    assert progress(client_for(staff("viewer", *VIEW)), scheduled)["actions"] == []


def test_a_batch_that_is_no_longer_a_draft_refuses_a_save(admin, make_batch):
    batch = make_batch(status=Status.COMPLETED)
    page = admin.get(change("sendbatch", batch.pk))
    assert page.context["title"] == "View send batch"
    assert 'name="_save"' not in page.content.decode()
    response = admin.post(change("sendbatch", batch.pk), {"name": "changed"})
    assert response.status_code == 403
    assert SendBatch.objects.get(pk=batch.pk).name == batch.name
