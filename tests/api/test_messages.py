"""POST messages/: schedule one email with an undo window; undo it with jobs/{id}/undo/."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail

from scheduler_app import clock
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job
from scheduler_app.sends.task_names import SEND_MESSAGE_TASK
from tests.api.conftest import client_for
from tests.api.helpers import grant
from tests.helpers import running_worker, wait_for_status

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
MESSAGE = {"to": "ann@example.com", "subject": "Hello", "text": "Hi Ann"}


@pytest.fixture(autouse=True)
def _ada_may_send(ada):
    """Ada sends the messages of these tests: she holds scheduler_app.send_message."""
    grant(ada, "send_message")


def make_due(job_id: int) -> None:
    """The undo window has passed: the job is due now."""
    Job.objects.filter(pk=job_id).update(run_at=clock.now())


@pytest.mark.django_db
def test_schedules_the_message_and_returns_the_job_and_its_undo_deadline(api, ada):
    with frozen_clock(T0):
        response = api.post("/api/messages/", {**MESSAGE, "undo_seconds": 30}, format="json")

    assert response.status_code == 201
    body = response.json()
    job = Job.objects.get(pk=body["job"])
    assert body == {
        "job": job.pk,
        "undo_deadline": "2030-01-01T12:00:30Z",
        "undo_url": "http://testserver/api/jobs/%s/undo/" % job.pk,
    }
    assert (job.task_name, job.owner_id, job.status) == (SEND_MESSAGE_TASK, ada.pk, "pending")
    assert job.payload == {**MESSAGE, "html": "", "provider": "email"}


@pytest.mark.django_db
def test_the_undo_window_defaults_to_ten_seconds(api):
    with frozen_clock(T0):
        body = api.post("/api/messages/", {**MESSAGE, "html": "<p>Hi</p>"}, format="json").json()

    assert body["undo_deadline"] == "2030-01-01T12:00:10Z"
    assert Job.objects.get(pk=body["job"]).payload["html"] == "<p>Hi</p>"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"to": "not-an-address"}, "to"),
        ({"to": ""}, "to"),
        ({"to": None}, "to"),
        ({"subject": ""}, "subject"),
        ({"subject": "   "}, "subject"),
        ({"subject": "Hello\nBcc: eve@example.com"}, "subject"),
        # Python's email package splits a header on these too (str.splitlines()).
        ({"subject": "Hello\x0bBcc: eve@example.com"}, "subject"),
        ({"subject": "Hello\x1cX"}, "subject"),
        ({"subject": "Hello\u2028X"}, "subject"),
        ({"text": ""}, "text"),
        ({"text": "a\x00b"}, "text"),
        ({"undo_seconds": -1}, "undo_seconds"),
        ({"undo_seconds": 3601}, "undo_seconds"),
        ({"undo_seconds": "soon"}, "undo_seconds"),
        ({"undo_seconds": "10"}, "undo_seconds"),
        ({"undo_seconds": True}, "undo_seconds"),
        ({"html": -0.5}, "html"),
        ({"subject": 42}, "subject"),
    ],
)
def test_invalid_fields_are_400_naming_the_field(api, change, field):
    response = api.post("/api/messages/", {**MESSAGE, **change}, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {field}
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_missing_fields_are_named_and_a_non_object_body_is_400(api):
    response = api.post("/api/messages/", {}, format="json")
    assert set(response.json()["error"]["fields"]) == {"to", "subject", "text"}

    response = api.post("/api/messages/", [1], format="json")
    assert response.status_code == 400
    response = api.post("/api/messages/", "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


@pytest.mark.django_db
def test_a_body_nested_too_deeply_to_read_is_a_400_parse_error(api):
    nested = b"[" * 5000 + b"]" * 5000  # 10 kB, far below DATA_UPLOAD_MAX_MEMORY_SIZE
    body = b'{"to": "ann@example.com", "subject": "Hello", "text": ' + nested + b"}"

    response = api.post("/api/messages/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "parse_error",
            "message": "JSON parse error - it is nested too deeply.",
            "fields": {},
        }
    }
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_is_a_413_in_the_apis_error_format(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = api.post("/api/messages/", {**MESSAGE, "text": "x" * 2000}, format="json")

    assert response.status_code == 413
    assert response.json() == {
        "error": {
            "code": "too_large",
            "message": "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE (1000 bytes).",
            "fields": {},
        }
    }
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_anonymous_is_401_and_writes_are_throttled(ada, settings):
    assert client_for(None).post("/api/messages/", MESSAGE, format="json").status_code == 401
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "1/min"}}
    api = client_for(ada)
    codes = [api.post("/api/messages/", MESSAGE, format="json").status_code for _ in range(2)]
    assert codes == [201, 429]


@pytest.mark.django_db
def test_another_user_cannot_undo_the_message(api, bob):
    job_id = api.post("/api/messages/", MESSAGE, format="json").json()["job"]

    assert client_for(bob).post("/api/jobs/%s/undo/" % job_id).status_code == 404
    assert Job.objects.get(pk=job_id).status == Job.Status.PENDING


@pytest.mark.django_db(transaction=True)
def test_undone_inside_the_window_it_is_never_sent(api):
    body = api.post("/api/messages/", {**MESSAGE, "undo_seconds": 60}, format="json").json()

    undo = api.post(body["undo_url"])

    assert undo.status_code == 200
    assert undo.json()["outcome"] == "cancelled"
    with running_worker():
        make_due(body["job"])  # its time comes: still nothing, it is cancelled
        kept = api.post("/api/messages/", {**MESSAGE, "to": "bob@example.com"}, format="json")
        make_due(kept.json()["job"])
        wait_for_status(Job.objects.get(pk=kept.json()["job"]), Job.Status.SUCCEEDED)
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    assert Job.objects.get(pk=body["job"]).status == Job.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_not_undone_it_is_sent_once_and_then_undo_is_409(api):
    body = api.post("/api/messages/", MESSAGE, format="json").json()

    with running_worker():
        make_due(body["job"])
        wait_for_status(Job.objects.get(pk=body["job"]), Job.Status.SUCCEEDED)

    assert [(m.to, m.subject, m.body) for m in mail.outbox] == [
        (["ann@example.com"], "Hello", "Hi Ann")
    ]
    late = api.post(body["undo_url"])
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "already_finished"
