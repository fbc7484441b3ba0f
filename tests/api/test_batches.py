"""Send batches: list, progress, pause, resume, cancel and undo; every status code and body."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import clock
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.api.conftest import client_for
from tests.api.helpers import grant, make_batch
from tests.testapp.models import Customer

pytestmark = pytest.mark.django_db

#: What pausing with a reason like the stale-send guard's is refused with.
STALE_REASON_REFUSED = (
    'A pause reason cannot start with "stale:": that marks the stale-send guard\'s own pauses.'
)

Status = SendBatch.Status
NOT_FOUND = {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}
RELAX = ("audience_within_limit", "dry_run_clean", "seed_sent")
#: Every character str.strip() removes.
WHITESPACE = "".join(char for char in map(chr, range(0x110000)) if char.isspace())


def url(batch: SendBatch, action: str = "") -> str:
    return "/api/batches/%s/%s" % (batch.pk, action + "/" if action else "")


def stored(batch: SendBatch) -> SendBatch:
    return SendBatch.objects.get(pk=batch.pk)


@pytest.fixture
def scheduled(ada):
    """Ada's batch of three customers, scheduled an hour from now: two pending lane jobs."""
    for name in ("ann", "ben", "cy"):
        Customer.objects.create(email="%s@example.com" % name, first_name=name)
    batch = make_batch(ada, status=Status.DRAFT, scheduled_at=clock.now() + dt.timedelta(hours=1))
    return schedule_batch(batch, by=ada, relax=RELAX)


def lanes(batch: SendBatch) -> list[str]:
    return sorted(
        Job.objects.filter(
            task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:" % batch.pk
        ).values_list("status", flat=True)
    )


# list and retrieve --------------------------------------------------------------


def test_list_shows_only_the_callers_batches_newest_first_in_cursor_pages(api, ada, bob):
    mine = [make_batch(ada) for _ in range(3)]
    make_batch(bob)

    first = api.get("/api/batches/?page_size=2").json()
    second = api.get(first["next"]).json()

    assert [b["id"] for b in first["results"] + second["results"]] == [b.pk for b in reversed(mine)]
    assert second["next"] is None


def test_list_rejects_a_bad_page_size_naming_it(api):
    response = api.get("/api/batches/?page_size=0")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "page_size": ["Must be an integer from 1 to 200."]
    }


def test_retrieve_shows_status_and_progress(api, ada):
    deadline = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    batch = make_batch(
        ada,
        status=Status.PAUSED,
        status_reason="Typo in the subject",
        total=10,
        sent=4,
        failed=1,
        skipped=1,
        undo_deadline=deadline,
    )

    response = api.get(url(batch))

    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("id", "status", "status_reason", "owner")} == {
        "id": batch.pk,
        "status": "paused",
        "status_reason": "Typo in the subject",
        "owner": ada.pk,
    }
    assert {k: body[k] for k in ("total", "sent", "failed", "skipped", "remaining")} == {
        "total": 10,
        "sent": 4,
        "failed": 1,
        "skipped": 1,
        "remaining": 4,
    }
    assert body["percent"] == 60.0
    assert body["undo_deadline"] == "2030-01-01T12:00:00Z"


def test_retrieve_before_the_freeze_has_no_total(api, ada):
    body = api.get(url(make_batch(ada, status=Status.DRAFT))).json()

    assert (body["total"], body["remaining"], body["percent"]) == (None, None, 0)


@pytest.mark.parametrize("raw", ["0", "999999", "abc", "1.5", "99999999999999999999"])
def test_unknown_or_malformed_id_is_404(api, raw):
    assert api.get("/api/batches/%s/" % raw).json() == NOT_FOUND
    assert api.post("/api/batches/%s/cancel/" % raw).status_code == 404


def test_anonymous_is_401(ada):
    batch = make_batch(ada)
    for response in (client_for(None).get(url(batch)), client_for(None).post(url(batch, "undo"))):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"


# ownership ----------------------------------------------------------------------


@pytest.mark.parametrize("action", ["pause", "resume", "cancel", "undo"])
def test_another_users_batch_is_404_and_left_alone(ada, bob, action):
    theirs = make_batch(bob, status=Status.PAUSED if action == "resume" else Status.SCHEDULED)
    api = client_for(grant(ada, "resume_sendbatch"))

    response = api.post(url(theirs, action), {"reason": "mine now"}, format="json")

    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert stored(theirs).status == theirs.status
    assert api.get(url(theirs)).json() == NOT_FOUND
    assert api.get("/api/batches/").json()["results"] == []


def test_staff_with_change_permission_sees_and_cancels_every_batch(ada, operator):
    batch = make_batch(ada)
    staff = client_for(grant(operator, "change_sendbatch"))

    assert [b["id"] for b in staff.get("/api/batches/").json()["results"]] == [batch.pk]
    assert staff.post(url(batch, "cancel")).json()["outcome"] == "cancelled"


def test_staff_without_the_permission_sees_only_their_own(ada, staff_without_permission):
    batch = make_batch(ada)

    assert client_for(staff_without_permission).get(url(batch)).status_code == 404


# pause --------------------------------------------------------------------------


def test_pause_requires_a_reason_naming_the_field(api, ada):
    batch = make_batch(ada)

    for body in ({}, {"reason": ""}, {"reason": "   "}):
        response = api.post(url(batch, "pause"), body, format="json")
        assert response.status_code == 400
        assert set(response.json()["error"]["fields"]) == {"reason"}
    assert response.json()["error"]["code"] == "invalid"
    assert stored(batch).status == Status.SCHEDULED


def test_a_pause_reason_cannot_pass_for_the_stale_send_guards(api, ada):
    # Resuming a guard's pause allows the stale send for good (stale_send_allowed).
    batch = make_batch(ada, status=Status.SENDING)

    response = api.post(url(batch, "pause"), {"reason": " stale: hold on"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"reason": [STALE_REASON_REFUSED]}
    assert stored(batch).status == Status.SENDING


def test_a_reason_of_only_characters_python_strips_is_a_400_naming_the_field(api, ada):
    """pause_batch() calls such a reason blank; the serializer refuses it first, naming it."""
    batch = make_batch(ada)
    blank = {"reason": ["This field may not be blank."]}

    for char in WHITESPACE:
        response = api.post(url(batch, "pause"), {"reason": char}, format="json")
        assert response.status_code == 400, repr(char)
        assert response.json()["error"]["fields"] == blank, repr(char)
    assert stored(batch).status == Status.SCHEDULED


def test_pause_with_a_body_nested_too_deeply_to_read_is_a_400_parse_error(api, ada):
    batch = make_batch(ada)
    body = b'{"reason": ' + b"[" * 5000 + b"]" * 5000 + b"}"

    response = api.post(url(batch, "pause"), body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "parse_error",
            "message": "JSON parse error - it is nested too deeply.",
            "fields": {},
        }
    }
    assert stored(batch).status == Status.SCHEDULED


def test_pause_pauses_and_keeps_the_reason_and_repeating_it_is_harmless(api, ada):
    batch = make_batch(ada, status=Status.SENDING)

    response = api.post(url(batch, "pause"), {"reason": "Typo"}, format="json")

    assert response.status_code == 200
    assert response.json()["outcome"] == "paused"
    assert response.json()["batch"]["status"] == "paused"
    assert response.json()["batch"]["status_reason"] == "Typo"
    again = api.post(url(batch, "pause"), {"reason": "Again"}, format="json")
    assert again.status_code == 200
    assert again.json()["outcome"] == "already_paused"
    assert stored(batch).status_reason == "Typo"


@pytest.mark.parametrize("status", [Status.DRAFT, Status.CANCELLED, Status.COMPLETED])
def test_pause_in_a_state_that_does_not_allow_it_is_409(api, ada, status):
    batch = make_batch(ada, status=status)

    response = api.post(url(batch, "pause"), {"reason": "stop"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "invalid_state",
        "message": "Only a scheduled or sending batch can be paused; batch %s is %s."
        % (batch.pk, status),
        "fields": {},
    }
    assert response.json()["batch"]["status"] == status


# resume -------------------------------------------------------------------------


def test_resume_without_the_permission_is_403_and_changes_nothing(api, ada):
    batch = make_batch(ada, status=Status.PAUSED)

    response = api.post(url(batch, "resume"))

    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "permission_denied",
            "message": "You do not have permission to resume sends.",
            "fields": {},
        }
    }
    assert stored(batch).status == Status.PAUSED


def test_resume_resumes_a_paused_batch_where_it_stopped(ada):
    api = client_for(grant(ada, "resume_sendbatch"))
    started = make_batch(ada, status=Status.PAUSED, started=True)
    not_started = make_batch(ada, status=Status.PAUSED)

    assert api.post(url(started, "resume")).json()["batch"]["status"] == "sending"
    response = api.post(url(not_started, "resume"))
    assert response.status_code == 200
    assert response.json()["outcome"] == "resumed"
    assert response.json()["batch"]["status"] == "scheduled"
    assert lanes(not_started) == ["pending", "pending"]


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.SENDING, Status.CANCELLED])
def test_resume_in_a_state_that_does_not_allow_it_is_409(ada, status):
    api = client_for(grant(ada, "resume_sendbatch"))
    batch = make_batch(ada, status=status)

    response = api.post(url(batch, "resume"))

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "invalid_state",
        "message": "Only a paused batch can be resumed; batch %s is %s." % (batch.pk, status),
        "fields": {},
    }


# cancel -------------------------------------------------------------------------


def test_cancel_cancels_the_lanes_and_repeating_it_is_idempotent(api, scheduled):
    response = api.post(url(scheduled, "cancel"))

    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled"
    assert response.json()["batch"]["status"] == "cancelled"
    assert lanes(scheduled) == ["cancelled", "cancelled"]
    again = api.post(url(scheduled, "cancel"))
    assert again.status_code == 200
    assert again.json()["outcome"] == "already_cancelled"


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED])
def test_cancel_of_a_finished_batch_is_409(api, ada, status):
    batch = make_batch(ada, status=status)

    response = api.post(url(batch, "cancel"))

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_finished"
    assert response.json()["error"]["message"] == (
        "Batch %s has already finished (%s); there is nothing to cancel." % (batch.pk, status)
    )


# undo ---------------------------------------------------------------------------


def test_undo_of_a_scheduled_batch_cancels_it_and_its_lanes(api, scheduled):
    assert lanes(scheduled) == ["pending", "pending"]

    response = api.post(url(scheduled, "undo"))

    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled"
    assert response.json()["batch"]["status"] == "cancelled"
    assert response.json()["batch"]["status_reason"] == "Undone."
    assert lanes(scheduled) == ["cancelled", "cancelled"]
    again = api.post(url(scheduled, "undo"))
    assert (again.status_code, again.json()["outcome"]) == (200, "already_cancelled")


def test_undo_of_a_sending_batch_is_409_with_how_far_it_got(api, ada):
    batch = make_batch(ada, status=Status.SENDING, total=50, sent=12)

    response = api.post(url(batch, "undo"))

    assert response.status_code == 409
    body = response.json()
    assert body["error"] == {
        "code": "already_sending",
        "message": "Too late to undo: batch %s is already being sent (12 of 50 sent)." % batch.pk,
        "fields": {},
    }
    assert (body["sent"], body["total"]) == (12, 50)
    assert body["batch"]["status"] == "sending"
    assert stored(batch).status == Status.SENDING


def test_undo_of_a_finished_batch_is_409_already_finished(api, ada):
    batch = make_batch(ada, status=Status.COMPLETED, total=3, sent=3)

    body = api.post(url(batch, "undo")).json()

    assert body["error"]["code"] == "already_finished"
    assert (body["sent"], body["total"]) == (3, 3)


def test_undo_of_a_draft_or_unstarted_paused_batch_is_409_invalid_state(api, ada):
    for status in (Status.DRAFT, Status.PAUSED):
        batch = make_batch(ada, status=status)
        response = api.post(url(batch, "undo"))
        assert response.status_code == 409
        assert response.json()["error"]["message"] == (
            "Only a scheduled batch can be undone; batch %s is %s." % (batch.pk, status)
        )
        assert response.json()["total"] is None


def test_undo_of_a_paused_batch_that_started_is_already_sending(api, ada):
    batch = make_batch(ada, status=Status.PAUSED, started=True, total=9, sent=2)

    assert api.post(url(batch, "undo")).json()["error"]["code"] == "already_sending"


def test_undo_of_a_batch_cancelled_after_it_started_sending_is_too_late(api, ada):
    # Cancelled mid-send (or a cancel that won the race after a lane started): not undone.
    batch = make_batch(ada, status=Status.CANCELLED, started=True, total=50, sent=12)

    response = api.post(url(batch, "undo"))

    assert response.status_code == 409
    body = response.json()
    assert body["error"]["code"] == "already_sending"
    assert body["error"]["message"] == (
        "Too late to undo: batch %s was cancelled after it had started sending (12 of 50 sent)."
        % batch.pk
    )
    assert (body["sent"], body["total"]) == (12, 50)


def test_undo_of_a_batch_cancelled_before_it_started_is_already_cancelled(api, ada):
    batch = make_batch(ada, status=Status.CANCELLED)

    response = api.post(url(batch, "undo"))

    assert (response.status_code, response.json()["outcome"]) == (200, "already_cancelled")


def test_batch_write_actions_are_throttled(ada, settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "2/min"}}
    api = client_for(ada)
    batch = make_batch(ada)

    codes = [api.post(url(batch, "cancel")).status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert api.get(url(batch)).status_code == 200
