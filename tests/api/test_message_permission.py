"""POST messages/ is not an open relay: sending needs the scheduler_app.send_message permission."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from scheduler_app.models import Job
from tests.api.conftest import client_for
from tests.api.helpers import grant

pytestmark = pytest.mark.django_db

MESSAGE = {"to": "ann@example.com", "subject": "Hello", "text": "Hi Ann"}
FORBIDDEN = {
    "error": {
        "code": "permission_denied",
        "message": "You do not have permission to send messages (scheduler_app.send_message).",
        "fields": {},
    }
}


def test_a_user_without_the_permission_gets_403_and_nothing_is_scheduled(api):
    response = api.post("/api/messages/", MESSAGE, format="json")

    assert response.status_code == 403
    assert response.json() == FORBIDDEN
    assert not Job.objects.exists()


def test_staff_with_change_job_but_not_the_permission_gets_403(operator):
    response = client_for(operator).post("/api/messages/", MESSAGE, format="json")

    assert (response.status_code, response.json()) == (403, FORBIDDEN)


def test_the_permission_is_checked_before_the_body(api):
    response = api.post("/api/messages/", {"to": "not-an-address"}, format="json")

    assert (response.status_code, response.json()) == (403, FORBIDDEN)


def test_a_user_with_the_permission_sends(ada):
    response = client_for(grant(ada, "send_message")).post("/api/messages/", MESSAGE, format="json")

    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["job"]).owner_id == ada.pk


def test_a_group_holding_the_permission_lets_its_members_send(bob):
    senders = Group.objects.create(name="senders")
    senders.permissions.add(
        Permission.objects.get(content_type__app_label="scheduler_app", codename="send_message")
    )
    bob.groups.add(senders)

    response = client_for(bob).post("/api/messages/", MESSAGE, format="json")

    assert response.status_code == 201


def test_a_superuser_sends():
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw")

    assert client_for(root).post("/api/messages/", MESSAGE, format="json").status_code == 201
