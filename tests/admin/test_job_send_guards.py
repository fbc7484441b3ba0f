"""Jobs admin: a send lane is never cancelled as a job, and "run now" keeps every undo window."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.dispatch import SEND_BATCH_TASK
from tests.admin.conftest import JOB_FIELDS, UNPREPARED, messages_of, post_action, snapshot

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def lanes_of(batch: SendBatch) -> list[Job]:
    return list(
        Job.objects.filter(
            task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:lane:" % batch.pk
        ).order_by("id")
    )


@pytest.fixture
def scheduled(make_batch, customers) -> SendBatch:
    """A batch scheduled at T0 with a 10-minute undo window, due an hour later."""
    with frozen_clock(T0):
        batch = make_batch(
            undo_window=dt.timedelta(minutes=10), scheduled_at=T0 + dt.timedelta(hours=1)
        )
        return schedule_batch(batch, relax=UNPREPARED)


def test_cancel_of_a_lane_is_an_error_pointing_to_the_batch_and_changes_nothing(
    admin, make_job, scheduled
):
    lane = lanes_of(scheduled)[0]
    job = make_job()
    before = snapshot(lane, *JOB_FIELDS)

    response = post_action(admin, "job", "cancel_jobs", [lane, job])

    assert messages_of(response) == [
        ("success", "1 job cancelled."),
        (
            "error",
            "Job %s not cancelled: it is a lane of send batch %s, which cannot be cancelled "
            'on its own. Cancel the batch instead (the "Cancel" action on '
            '<a href="/admin/scheduler_app/sendbatch/%s/change/">send batch %s</a>).'
            % (lane.pk, scheduled.pk, scheduled.pk, scheduled.pk),
        ),
    ]
    assert snapshot(lane, *JOB_FIELDS) == before
    assert [j.status for j in lanes_of(scheduled)] == ["pending", "pending"]
    assert SendBatch.objects.get(pk=scheduled.pk).status == SendBatch.Status.SCHEDULED
