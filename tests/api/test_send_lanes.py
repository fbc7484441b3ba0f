"""A send lane is never cancelled as a job: the jobs API points to the batch's cancel."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import CancelOutcome, cancel, cancel_by_key, clock
from scheduler_app.exceptions import SendLaneNotCancellable
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.api.conftest import client_for
from tests.api.helpers import make_batch

pytestmark = pytest.mark.django_db

RELAX = ("audience_within_limit", "dry_run_clean", "seed_sent")


@pytest.fixture
def lane(ada) -> Job:
    """One pending lane job of Ada's batch, scheduled an hour from now."""
    batch = make_batch(
        ada, status=SendBatch.Status.DRAFT, scheduled_at=clock.now() + dt.timedelta(hours=1)
    )
    schedule_batch(batch, by=ada, relax=RELAX)
    return Job.objects.filter(task_name=SEND_BATCH_TASK).order_by("id").first()


def test_cancelling_a_pending_lane_through_the_api_is_409_pointing_to_the_batch_cancel(api, lane):
    batch_id = lane.payload["batch"]

    response = api.post("/api/jobs/%s/cancel/" % lane.pk)

    assert response.status_code == 409
    body = response.json()
    assert body["error"] == {
        "code": "send_lane",
        "message": "Job %s is a lane of send batch %s and cannot be cancelled on its own; "
        "cancel the batch instead: POST http://testserver/api/batches/%s/cancel/."
        % (lane.pk, batch_id, batch_id),
        "fields": {},
    }
    assert body["job"]["status"] == "pending"
    assert Job.objects.filter(task_name=SEND_BATCH_TASK, status="pending").count() == 2
    assert SendBatch.objects.get(pk=batch_id).status == SendBatch.Status.SCHEDULED


def test_cancel_of_a_lane_raises_naming_its_batch_and_changes_nothing(lane):
    batch_id = lane.payload["batch"]

    with pytest.raises(SendLaneNotCancellable) as caught:
        cancel(lane.pk)
    assert caught.value.code == "send_lane"
    assert caught.value.message == (
        "Job %s is a lane of send batch %s and cannot be cancelled on its own; "
        "cancel the batch instead." % (lane.pk, batch_id)
    )
    assert caught.value.params == {"job": lane.pk, "batch": batch_id}
    with pytest.raises(SendLaneNotCancellable):
        cancel_by_key(SEND_BATCH_TASK, lane.unique_key)
    assert Job.objects.get(pk=lane.pk).status == Job.Status.PENDING


def test_a_finished_or_cancelled_lane_reports_its_outcome(lane):
    Job.objects.filter(pk=lane.pk).update(status=Job.Status.CANCELLED)
    assert cancel(lane.pk) is CancelOutcome.ALREADY_CANCELLED
    Job.objects.filter(pk=lane.pk).update(status=Job.Status.SUCCEEDED)
    assert cancel(lane.pk) is CancelOutcome.ALREADY_FINISHED


def test_a_lane_the_caller_cannot_see_is_404(lane, bob):
    response = client_for(bob).post("/api/jobs/%s/cancel/" % lane.pk)

    assert response.status_code == 404


def test_undoing_a_pending_lane_with_an_undo_deadline_is_409_pointing_to_the_batch_cancel(
    api, lane
):
    """A lane never carries an undo deadline itself; if one did, undo still refuses it."""
    batch_id = lane.payload["batch"]
    Job.objects.filter(pk=lane.pk).update(undo_deadline=clock.now() + dt.timedelta(hours=1))

    response = api.post("/api/jobs/%s/undo/" % lane.pk)

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "send_lane",
        "message": "Job %s is a lane of send batch %s and cannot be cancelled on its own; "
        "cancel the batch instead: POST http://testserver/api/batches/%s/cancel/."
        % (lane.pk, batch_id, batch_id),
        "fields": {},
    }
    assert Job.objects.get(pk=lane.pk).status == Job.Status.PENDING
