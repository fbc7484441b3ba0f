"""Batch states: pause, resume, cancel and undo are guarded, audited, and keep the markers."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import clock
from scheduler_app.exceptions import RetryLater, ValidationError
from scheduler_app.models import ControlEvent, Job, Recipient, SendBatch
from scheduler_app.sends.batches import (
    BatchStateError,
    UndoOutcome,
    cancel_batch,
    pause_batch,
    resume_batch,
    schedule_batch,
    undo_batch,
)
from scheduler_app.sends.dispatch import run_lane
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.sends.helpers import run_lane_now
from tests.testapp.models import ProviderCall

# No dry-run or seed send in these tests: let those checklist items through.
RELAX = ("audience_within_limit", "dry_run_clean", "seed_sent")
RELAXED = "audience_within_limit, dry_run_clean, seed_sent"


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("operator")


@pytest.fixture
def five_customers(customer):
    for name in ("ann", "bob", "cat", "dan", "eve"):
        customer("%s@example.com" % name, name.title())


@pytest.fixture
def scheduled(make_batch, five_customers, operator):
    """A batch scheduled an hour from now through schedule_batch: two pending lane jobs."""
    batch = make_batch(
        status=SendBatch.Status.DRAFT, scheduled_at=clock.now() + dt.timedelta(hours=1)
    )
    return schedule_batch(batch, by=operator, relax=RELAX)


def lanes() -> list[str]:
    return sorted(Job.objects.filter(task_name=SEND_BATCH_TASK).values_list("status", flat=True))


def events(batch: SendBatch) -> list[tuple[str, str, str | None]]:
    return [
        (e.action, e.reason, e.by.username if e.by else None)
        for e in ControlEvent.objects.filter(scope="batch", target=str(batch.pk)).order_by("id")
    ]


def send_one_chunk(batch: SendBatch) -> None:
    """Send two recipients (a chunk of SEND_CHUNK_SIZE 2), then stop as a worker shutting down.

    Markers are written as each recipient is sent, so "stop once two are
    marked sent" stops the lane before its third provider call.
    """

    def two_sent() -> bool:
        return Recipient.objects.filter(batch=batch, status="sent").count() >= 2

    with pytest.raises(RetryLater):
        run_lane(batch.pk, claim="test:one-chunk", should_stop=two_sent)


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["", "   "])
def test_pause_needs_a_reason(scheduled, reason):
    with pytest.raises(ValidationError) as caught:
        pause_batch(scheduled.pk, reason=reason)

    assert caught.value.message == "A reason is required to pause."
    scheduled.refresh_from_db()
    assert scheduled.status == "scheduled"
    assert [action for action, _, _ in events(scheduled)] == ["schedule"]


@pytest.mark.django_db
def test_pause_and_resume_are_recorded_and_resume_continues(scheduled, operator):
    assert pause_batch(scheduled.pk, by=operator, reason="Wrong coupon code") is True
    scheduled.refresh_from_db()
    assert (scheduled.status, scheduled.status_reason, scheduled.status_changed_by) == (
        "paused",
        "Wrong coupon code",
        operator,
    )
    # A second pause finds nothing to change.
    assert pause_batch(scheduled.pk, by=operator, reason="again") is False
    # A paused batch sends nothing.
    assert run_lane_now(scheduled).counts == {}
    assert ProviderCall.objects.count() == 0

    assert resume_batch(scheduled.pk, by=operator) is True
    scheduled.refresh_from_db()
    assert scheduled.status == "scheduled"  # it had not started yet
    # The first lanes still wait: resume adds none (it used to add SEND_LANES more).
    assert lanes() == ["pending"] * 2
    assert events(scheduled) == [
        ("schedule", RELAXED, "operator"),
        ("pause", "Wrong coupon code", "operator"),
        ("resume", "", "operator"),
    ]


@pytest.mark.django_db
def test_pausing_mid_send_stops_the_lane_and_resume_finishes_exactly_the_rest(
    make_batch, five_customers, settings, operator
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 2}
    batch = make_batch()
    send_one_chunk(batch)
    assert pause_batch(batch.pk, by=operator, reason="Complaints") is True

    assert run_lane_now(batch).counts == {}
    assert ProviderCall.objects.count() == 2

    resume_batch(batch.pk, by=operator)
    batch.refresh_from_db()
    assert batch.status == "sending"
    assert lanes() == ["pending"] * 2  # no lane was waiting: resume gives it SEND_LANES
    run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 5)
    keys = list(ProviderCall.objects.values_list("idempotency_key", flat=True))
    assert len(keys) == len(set(keys)) == 5
    assert [a for a, _, _ in events(batch)] == ["pause", "resume"]


@pytest.mark.django_db
def test_resuming_a_completed_batch_is_refused(make_batch, five_customers):
    batch = make_batch()
    run_lane_now(batch)

    with pytest.raises(BatchStateError) as caught:
        resume_batch(batch.pk)

    assert caught.value.message == "Only a paused batch can be resumed; this batch is completed."
    assert caught.value.code == "invalid_state"
    assert not ControlEvent.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_scheduling_a_batch_twice_is_refused(scheduled):
    scheduled.status = SendBatch.Status.DRAFT  # a stale copy of the batch
    with pytest.raises(BatchStateError) as caught:
        schedule_batch(scheduled, relax=RELAX)
    assert caught.value.message == "Only a draft can be scheduled; this batch is scheduled."
    assert lanes() == ["pending", "pending"]


@pytest.mark.django_db
def test_cancel_mid_send_keeps_the_markers_and_cancels_the_lanes(
    make_batch, five_customers, settings, operator
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 2}
    batch = make_batch(status=SendBatch.Status.DRAFT)
    schedule_batch(batch, relax=RELAX)
    send_one_chunk(batch)

    assert cancel_batch(batch.pk, by=operator, reason="Sent to the wrong list") is True

    batch.refresh_from_db()
    assert (batch.status, batch.status_reason, batch.sent, batch.total) == (
        "cancelled",
        "Sent to the wrong list",
        2,
        5,
    )
    assert sorted(Recipient.objects.filter(batch=batch).values_list("status", flat=True)) == [
        "pending",
        "pending",
        "pending",
        "sent",
        "sent",
    ]
    assert lanes() == ["cancelled", "cancelled"]
    assert events(batch)[-1] == ("cancel", "Sent to the wrong list", "operator")
    # A lane that was already running stops before its next chunk.
    assert run_lane_now(batch).counts == {}
    assert ProviderCall.objects.count() == 2
    # Cancelling again changes nothing and records nothing.
    assert cancel_batch(batch.pk, by=operator) is False
    assert [a for a, _, _ in events(batch)] == ["schedule", "cancel"]


@pytest.mark.django_db
def test_undo_before_the_lanes_start_cancels_the_batch_and_its_lanes(scheduled, operator):
    outcome = undo_batch(scheduled.pk, by=operator)

    assert outcome == UndoOutcome(cancelled=True, status="cancelled")
    scheduled.refresh_from_db()
    assert (scheduled.status, scheduled.status_reason, scheduled.status_changed_by) == (
        "cancelled",
        "Undone.",
        operator,
    )
    assert lanes() == ["cancelled", "cancelled"]
    assert set(Job.objects.values_list("cancelled_by__username", flat=True)) == {"operator"}
    assert events(scheduled) == [("schedule", RELAXED, "operator"), ("undo", "", "operator")]
    assert run_lane_now(scheduled).counts == {}
    assert ProviderCall.objects.count() == 0
    assert not Recipient.objects.exists()


@pytest.mark.django_db
def test_undo_after_sending_started_reports_too_late_with_progress(
    make_batch, five_customers, settings, operator
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 2}
    batch = make_batch()
    send_one_chunk(batch)

    outcome = undo_batch(batch.pk, by=operator)

    assert outcome == UndoOutcome(cancelled=False, status="sending", sent=2, total=5)
    batch.refresh_from_db()
    assert batch.status == "sending"
    assert not ControlEvent.objects.exists()

    run_lane_now(batch)
    assert undo_batch(batch.pk) == UndoOutcome(cancelled=False, status="completed", sent=5, total=5)


@pytest.mark.django_db
def test_resuming_a_batch_that_has_not_started_keeps_its_scheduled_time(scheduled):
    pause_batch(scheduled.pk, reason="Check the coupon")
    resume_batch(scheduled.pk)

    run_at = set(
        Job.objects.filter(task_name=SEND_BATCH_TASK, status="pending").values_list(
            "run_at", flat=True
        )
    )
    assert run_at == {scheduled.scheduled_at}
