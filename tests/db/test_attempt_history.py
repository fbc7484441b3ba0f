"""Attempt history: a first attempt that succeeds is told by the job row alone (no
JobAttempt row); Job.attempt_history(), lateness_by_task and the admin merge the job
row with the JobAttempt rows, and count each attempt once."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import RetryPolicy, schedule, task
from scheduler_app.lateness import TaskLateness, lateness_by_task
from scheduler_app.models import Job, JobAttempt
from tests.helpers import running_worker, wait_for_status

Status = Job.Status
Outcome = JobAttempt.Outcome
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
TASK = "tests.history.late"


@task(name="tests.history.echo")
def echo(ctx):
    return ctx.payload


@task(
    name="tests.history.fails_once",
    max_attempts=2,
    retry=RetryPolicy(base=dt.timedelta(milliseconds=10), cap=dt.timedelta(seconds=1)),
)
def fails_once(ctx):
    if ctx.attempt == 1:
        raise ConnectionError("first attempt fails")
    return "ok"


def succeeded_job(*, lateness: float, attempts: int = 1, worker_id: str = "w-row") -> Job:
    """A job row as the worker leaves a success: started ``lateness`` s after it was due."""
    due = T0 - dt.timedelta(seconds=lateness)
    return Job.objects.create(
        task_name=TASK,
        status=Status.SUCCEEDED,
        scheduled_for=due,
        run_at=due,
        attempts=attempts,
        worker_id=worker_id,
        started_at=T0,
        finished_at=T0 + dt.timedelta(seconds=1),
    )


def recorded(job: Job, attempt: int, outcome: str, *, started_at: dt.datetime) -> JobAttempt:
    return JobAttempt.objects.create(
        job=job,
        attempt=attempt,
        task_name=job.task_name,
        worker_id="w-history",
        due_at=job.run_at,
        started_at=started_at,
        finished_at=started_at + dt.timedelta(seconds=1),
        outcome=outcome,
        error="boom" if outcome != Outcome.SUCCEEDED else "",
    )


@pytest.mark.django_db(transaction=True)
def test_first_attempt_success_writes_no_attempt_row_and_the_job_row_tells_it():
    with running_worker(worker_id="w-first") as worker:
        job = schedule("tests.history.echo", {"n": 1})
        stored = wait_for_status(job, Status.SUCCEEDED)

    assert not JobAttempt.objects.filter(job_id=job.pk).exists()
    assert (stored.worker_id, stored.attempts) == (worker.id, 1)
    [attempt] = stored.attempt_history()
    assert attempt.pk is None  # described by the job row, not stored
    assert (attempt.attempt, attempt.outcome, attempt.worker_id) == (
        1,
        Outcome.SUCCEEDED,
        "w-first",
    )
    assert (attempt.due_at, attempt.started_at, attempt.finished_at) == (
        stored.run_at,
        stored.started_at,
        stored.finished_at,
    )


@pytest.mark.django_db(transaction=True)
def test_a_retried_job_keeps_every_attempt_row_and_its_success_row():
    with running_worker():
        job = schedule("tests.history.fails_once")
        stored = wait_for_status(job, Status.SUCCEEDED)

    history = stored.attempt_history()
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, Outcome.RETRIED),
        (2, Outcome.SUCCEEDED),
    ]
    assert all(a.pk is not None for a in history)
    assert stored.worker_id == ""  # the history row names the worker


@pytest.mark.django_db
def test_attempt_history_merges_rows_and_the_job_row_oldest_first():
    job = succeeded_job(lateness=2)
    recorded(job, 1, Outcome.DEFERRED, started_at=T0 - dt.timedelta(minutes=1))

    history = job.attempt_history()

    assert [(a.attempt, a.outcome, a.worker_id) for a in history] == [
        (1, Outcome.DEFERRED, "w-history"),
        (1, Outcome.SUCCEEDED, "w-row"),
    ]


@pytest.mark.django_db
def test_attempt_history_counts_a_success_recorded_before_the_upgrade_once():
    job = succeeded_job(lateness=2)
    recorded(job, 1, Outcome.SUCCEEDED, started_at=T0)

    assert [(a.attempt, a.outcome) for a in job.attempt_history()] == [(1, Outcome.SUCCEEDED)]


@pytest.mark.django_db
def test_lateness_by_task_counts_first_attempt_successes_from_job_rows_once():
    succeeded_job(lateness=1)  # told by its row only
    succeeded_job(lateness=3)  # told by its row only
    old = succeeded_job(lateness=5)  # finished before the upgrade: also a success row
    recorded(old, 1, Outcome.SUCCEEDED, started_at=T0)
    pending = Job.objects.create(task_name=TASK, scheduled_for=T0, run_at=T0)  # no attempt yet
    assert pending.attempt_history() == []

    rows = lateness_by_task(T0 - dt.timedelta(hours=1), T0 + dt.timedelta(hours=1))

    assert rows == [TaskLateness(task_name=TASK, count=3, p50=3.0, p95=4.8, max=5.0)]


@pytest.mark.django_db
def test_admin_job_page_shows_an_attempt_the_job_row_tells(admin_client):
    job = succeeded_job(lateness=2, worker_id="w-told-by-row")

    html = admin_client.get("/admin/scheduler_app/job/%s/change/" % job.pk).content.decode()

    assert "w-told-by-row" in html
    assert "<td>succeeded</td>" in html
