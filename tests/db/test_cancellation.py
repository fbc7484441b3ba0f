"""cancel(): each outcome it reports, owner scoping, and undo windows a worker respects."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model

from scheduler_app import CancelOutcome, cancel, clock, schedule, task
from scheduler_app.conf import app_settings
from scheduler_app.db import backend
from scheduler_app.models import Job, JobAttempt
from scheduler_app.worker.execution import ClaimedJob, execute
from tests.helpers import running_worker, wait_for_status

SECOND = dt.timedelta(seconds=1)
LEASE = dt.timedelta(seconds=30)
Status = Job.Status

RAN: list[int] = []


@task(name="tests.outcomes.cancellable")
def cancellable(ctx):
    RAN.append(ctx.job_id)
    return "ran"


@task(name="tests.outcomes.cancellable_broken", max_attempts=1)
def cancellable_broken(ctx):
    raise ValueError("broken on purpose")


def claim_one(worker="w"):
    """Claim the one due job the way a worker does; return its ClaimedJob."""
    [row] = backend().claim_jobs(worker=worker, queues=["default"], limit=1, lease=LEASE)
    return ClaimedJob.from_row(row)


@pytest.fixture
def user():
    return get_user_model().objects.create_user("ada")


@pytest.mark.django_db
def test_cancel_pending_job_reports_cancelled_and_records_who_and_when(user):
    job = schedule("tests.outcomes.cancellable", delay=60)
    before = clock.now()

    outcome = cancel(job.pk, by=user)

    stored = Job.objects.get(pk=job.pk)
    assert outcome is CancelOutcome.CANCELLED
    assert outcome.changed
    assert stored.status == Status.CANCELLED
    assert before <= stored.cancelled_at <= clock.now()
    assert stored.cancelled_by == user
    assert stored.finished_at == stored.cancelled_at
    assert stored.attempts == 0


@pytest.mark.django_db
def test_cancel_twice_reports_already_cancelled_and_keeps_the_first_record(user):
    job = schedule("tests.outcomes.cancellable", delay=60)
    assert cancel(job.pk, by=user) is CancelOutcome.CANCELLED
    first = Job.objects.get(pk=job.pk)

    outcome = cancel(job.pk)

    stored = Job.objects.get(pk=job.pk)
    assert outcome is CancelOutcome.ALREADY_CANCELLED
    assert not outcome.changed
    assert (stored.cancelled_at, stored.cancelled_by) == (first.cancelled_at, user)


@pytest.mark.django_db
def test_cancel_after_claim_reports_too_late_and_changes_nothing():
    job = schedule("tests.outcomes.cancellable")
    claimed = claim_one(worker="w-1")
    running = Job.objects.get(pk=job.pk)

    outcome = cancel(job.pk)

    stored = Job.objects.get(pk=job.pk)
    assert claimed.id == job.pk
    assert outcome is CancelOutcome.TOO_LATE
    assert not outcome.changed
    assert stored.status == Status.RUNNING
    assert stored.worker_id == "w-1"
    assert stored.lease_token == running.lease_token == claimed.lease_token
    assert stored.lease_expires_at == running.lease_expires_at
    assert stored.cancelled_at is None and stored.cancelled_by is None
    assert stored.finished_at is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("task_name", "status"),
    [
        ("tests.outcomes.cancellable", Status.SUCCEEDED),
        ("tests.outcomes.cancellable_broken", Status.FAILED),
    ],
)
def test_cancel_finished_job_reports_already_finished(task_name, status):
    job = schedule(task_name)
    finish = execute(claim_one())
    assert backend().finish_jobs([finish.as_row()], worker="w") == {finish.job.fence}
    finished = Job.objects.get(pk=job.pk)
    assert finished.status == status

    outcome = cancel(job.pk)

    stored = Job.objects.get(pk=job.pk)
    assert outcome is CancelOutcome.ALREADY_FINISHED
    assert stored.status == status
    assert stored.finished_at == finished.finished_at
    assert stored.cancelled_at is None


@pytest.mark.django_db
def test_cancel_missing_job_reports_not_found():
    job = schedule("tests.outcomes.cancellable", delay=60)

    assert cancel(job.pk + 1000) is CancelOutcome.NOT_FOUND
    assert Job.objects.get(pk=job.pk).status == Status.PENDING


@pytest.mark.django_db
def test_cancel_through_a_queryset_treats_other_users_jobs_as_not_found(user):
    other = get_user_model().objects.create_user("mallory")
    job = schedule("tests.outcomes.cancellable", delay=60, owner=user)

    outcome = cancel(job.pk, by=other, queryset=Job.objects.filter(owner=other))

    assert outcome is CancelOutcome.NOT_FOUND
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == Status.PENDING
    assert stored.cancelled_at is None

    assert cancel(job.pk, by=user, queryset=Job.objects.filter(owner=user)) is (
        CancelOutcome.CANCELLED
    )
    # Outcomes other than "cancelled" are scoped too: a stranger learns nothing.
    assert cancel(job.pk, queryset=Job.objects.filter(owner=other)) is CancelOutcome.NOT_FOUND
    assert cancel(job.pk, queryset=Job.objects.filter(owner=user)) is (
        CancelOutcome.ALREADY_CANCELLED
    )


@pytest.mark.django_db(transaction=True)
def test_cancel_inside_the_undo_window_means_a_worker_never_runs_it(user):
    RAN.clear()
    before = clock.now()
    job = schedule("tests.outcomes.cancellable", undo_window=10, owner=user)
    assert before + 10 * SECOND <= job.undo_deadline <= clock.now() + 10 * SECOND
    margin = dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN)
    assert job.run_at == job.undo_deadline + margin > job.undo_deadline

    assert cancel(job.pk, by=user) is CancelOutcome.CANCELLED

    # Were it still pending it would be due now; a later job proves the worker claimed after it.
    Job.objects.filter(pk=job.pk).update(run_at=clock.now() - dt.timedelta(minutes=1))
    canary = schedule("tests.outcomes.cancellable")
    with running_worker():
        wait_for_status(canary, Status.SUCCEEDED)

    stored = Job.objects.get(pk=job.pk)
    assert [canary.pk] == RAN
    assert stored.status == Status.CANCELLED
    assert stored.attempts == 0
    assert stored.started_at is None
    assert not JobAttempt.objects.filter(job_id=job.pk).exists()
