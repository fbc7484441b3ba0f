"""Alerts and live workers in the admin: acknowledge records who and when; workers are read-only."""

from __future__ import annotations

import pytest

from scheduler_app import clock
from scheduler_app.alerts import open_alert
from scheduler_app.models import Alert, WorkerHeartbeat
from tests.admin.conftest import change, changelist, get, messages_of, post_action

pytestmark = pytest.mark.django_db


def test_acknowledge_records_who_and_when_and_reports_what_was_already_done(admin, superuser):
    first, _ = open_alert(kind=Alert.Kind.OVERDUE, subject="task:a", summary="late")
    second, _ = open_alert(kind=Alert.Kind.OVERDUE, subject="task:b", summary="late")
    Alert.objects.filter(pk=second.pk).update(resolved_at=clock.now())

    response = post_action(admin, "alert", "acknowledge_alerts", [first, second])

    assert messages_of(response) == [
        ("success", "1 alert acknowledged."),
        ("info", "1 alert was resolved or acknowledged already."),
    ]
    first.refresh_from_db()
    assert first.acknowledged_by == superuser and first.acknowledged_at is not None
    page = get(admin, changelist("alert"), {"state": "open"})
    assert "task:a" in page.content.decode() and "task:b" not in page.content.decode()


def test_an_alert_opens_as_a_view_page_without_save_buttons(admin):
    """Nothing on an alert can be edited: its page offers no Save, and a POST changes nothing."""
    alert, _ = open_alert(kind=Alert.Kind.OVERDUE, subject="task:a", summary="late")

    page = get(admin, change("alert", alert.pk)).content.decode()

    assert "<h1>View alert</h1>" in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    response = admin.post(change("alert", alert.pk), {"summary": "other"})
    assert response.status_code == 403
    assert Alert.objects.get().summary == "late"


def test_workers_are_listed_and_cannot_be_changed(admin):
    now = clock.now()
    worker = WorkerHeartbeat.objects.create(
        worker_id="host:1:abc",
        host="host",
        pid=1,
        queues=["default", "emails"],
        concurrency=4,
        started_at=now,
        last_seen_at=now,
    )
    page = get(admin, changelist("workerheartbeat"))
    assert "host:1:abc" in page.content.decode()
    assert '<td class="field-queues_display">default, emails</td>' in page.content.decode()
    response = admin.post(
        "/admin/scheduler_app/workerheartbeat/%s/change/" % worker.pk, {"host": "other"}
    )
    assert response.status_code == 403
    assert WorkerHeartbeat.objects.get().host == "host"
