"""Every admin page respects Django's model permissions; dangerous actions need their own."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.models import Job, Recipient, Schedule, SendBatch
from tests.admin.conftest import client_for, offered_actions, post_action

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(make_job, make_batch):
    batch = make_batch(status=SendBatch.Status.SCHEDULED, undo_window=dt.timedelta(seconds=30))
    recipient = Recipient.objects.create(batch=batch, recipient_key="k1", address="a@example.com")
    schedule = Schedule.objects.create(name="nightly", task_name="tests.noop", cron="0 3 * * *")
    return {"job": make_job(), "batch": batch, "recipient": recipient, "schedule": schedule}


def pages(objects):
    job, batch = objects["job"], objects["batch"]
    return [
        "/admin/scheduler_app/job/",
        "/admin/scheduler_app/job/%s/change/" % job.pk,
        "/admin/scheduler_app/control/",
        "/admin/scheduler_app/sendbatch/",
        "/admin/scheduler_app/sendbatch/add/",
        "/admin/scheduler_app/sendbatch/%s/change/" % batch.pk,
        "/admin/scheduler_app/sendbatch/%s/progress/" % batch.pk,
        "/admin/scheduler_app/sendbatch/%s/report/" % batch.pk,
        "/admin/scheduler_app/recipient/",
        "/admin/scheduler_app/recipient/%s/change/" % objects["recipient"].pk,
        "/admin/scheduler_app/schedule/",
        "/admin/scheduler_app/schedule/%s/change/" % objects["schedule"].pk,
        "/admin/scheduler_app/latenessoverview/",
        "/admin/scheduler_app/ratelimit/",
    ]


def test_staff_without_view_permission_gets_403_on_every_page(staff, objects):
    client = client_for(staff("nobody"))
    statuses = {url: client.get(url).status_code for url in pages(objects)}
    assert statuses == dict.fromkeys(pages(objects), 403)


def test_staff_without_permission_cannot_post_actions_switches_or_undo(staff, objects):
    client = client_for(staff("nobody"))
    job, batch = objects["job"], objects["batch"]
    assert post_action(client, "job", "cancel_jobs", [job]).status_code == 403
    assert (
        post_action(
            client, "sendbatch", "pause_action", [batch], confirm="yes", reason="x"
        ).status_code
        == 403
    )
    assert (
        client.post(
            "/admin/scheduler_app/control/",
            {"scope": "global", "action": "pause", "reason": "x"},
        ).status_code
        == 403
    )
    assert client.post("/admin/scheduler_app/sendbatch/%s/undo/" % batch.pk).status_code == 403
    assert Job.objects.get(pk=job.pk).status == Job.Status.PENDING
    assert SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.SCHEDULED


def test_superuser_sees_every_page(admin, objects):
    statuses = {url: admin.get(url).status_code for url in pages(objects)}
    statuses.pop("/admin/scheduler_app/sendbatch/%s/report/" % objects["batch"].pk)  # no dry-run
    assert set(statuses.values()) == {200}


def test_view_only_users_get_no_actions(staff, objects):
    client = client_for(
        staff("viewer", "view_job", "view_sendbatch", "view_schedule", "view_recipient")
    )
    for model in ("job", "sendbatch", "schedule"):
        assert offered_actions(client, model) == set(), model
    response = post_action(client, "job", "cancel_jobs", [objects["job"]])
    assert Job.objects.get(pk=objects["job"].pk).status == Job.Status.PENDING
    assert response.status_code == 200  # the list again; no action ran


def test_change_permission_offers_the_ordinary_actions(staff, objects):
    client = client_for(
        staff("operator", "view_job", "change_job", "view_schedule", "change_schedule")
    )
    assert offered_actions(client, "job") == {"cancel_jobs", "run_now", "retry_failed"}
    assert offered_actions(client, "schedule") == {"enable", "disable", "prune"}
