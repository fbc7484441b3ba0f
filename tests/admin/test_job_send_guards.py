"""Jobs admin: a send lane is never cancelled as a job, and "run now" keeps every undo window."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends.batches import schedule_batch, send_message
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.admin.conftest import JOB_FIELDS, UNPREPARED, messages_of, post_action, snapshot

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
#: The undo window of the message and the batch below, and UNDO_SAFETY_MARGIN.
WINDOW = dt.timedelta(minutes=10)
MARGIN = dt.timedelta(seconds=5)
HELD = (
    "warning",
    "%(n)s inside %(its)s undo window: %(it)s will run once the window and its safety "
    "margin have passed, not before.",
)


@pytest.fixture(autouse=True)
def _margin(settings):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "UNDO_SAFETY_MARGIN": 5}


def run_at(job: Job) -> dt.datetime:
    return Job.objects.get(pk=job.pk).run_at


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
        batch = make_batch(undo_window=WINDOW, scheduled_at=T0 + dt.timedelta(hours=1))
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


@pytest.fixture
def message() -> Job:
    """A message scheduled at T0 with a 10-minute undo window."""
    with frozen_clock(T0):
        return send_message("ann@example.com", "Hello", "Hi Ann", undo_window=WINDOW)


def test_run_now_inside_the_undo_window_holds_a_message_and_lanes_until_it_closes(
    admin, message, scheduled
):
    lanes = lanes_of(scheduled)
    with frozen_clock(T0 + dt.timedelta(minutes=1)):
        response = post_action(admin, "job", "run_now", [message, *lanes])

    assert messages_of(response) == [
        (HELD[0], HELD[1] % {"n": "3 jobs are", "its": "their", "it": "they"})
    ]
    assert run_at(message) == T0 + WINDOW + MARGIN
    assert [run_at(lane) for lane in lanes] == [T0 + WINDOW + MARGIN] * 2
    assert {j.status for j in [message, *lanes_of(scheduled)]} == {Job.Status.PENDING}


def test_run_now_after_the_undo_window_runs_now(admin, message, scheduled, make_job):
    lanes = lanes_of(scheduled)
    plain = make_job()
    now = T0 + WINDOW + MARGIN + dt.timedelta(seconds=1)
    with frozen_clock(now):
        response = post_action(admin, "job", "run_now", [message, plain, *lanes])

    assert messages_of(response) == [("success", "4 jobs will run now.")]
    assert [run_at(job) for job in [message, plain, *lanes]] == [now] * 4


def test_run_now_reports_held_and_moved_jobs_separately(admin, message, make_job):
    plain = make_job()
    with frozen_clock(T0 + WINDOW):  # the window closed, the margin has not passed
        response = post_action(admin, "job", "run_now", [message, plain])

    assert messages_of(response) == [
        ("success", "1 job will run now."),
        (HELD[0], HELD[1] % {"n": "1 job is", "its": "its", "it": "it"}),
    ]
    assert run_at(message) == T0 + WINDOW + MARGIN
    assert run_at(plain) == T0 + WINDOW
