"""Jobs admin: cancel / run now / retry report per job what they did, and change nothing else."""

from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest

from scheduler_app import partitions, schedule
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, JobAttempt
from tests.admin.conftest import (
    JOB_FIELDS,
    change,
    changelist,
    delete,
    messages_of,
    offered_actions,
    post_action,
    snapshot,
)
from tests.helpers import database_url, wait_until

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def test_cancel_a_pending_job_reports_cancelled_and_records_who(admin, superuser, make_job):
    job = make_job()
    response = post_action(admin, "job", "cancel_jobs", [job])
    assert response.status_code == 302
    assert messages_of(response) == [("success", "1 job cancelled.")]
    job.refresh_from_db()
    assert (job.status, job.cancelled_by) == (Job.Status.CANCELLED, superuser)


def test_cancel_a_running_job_reports_too_late_and_changes_nothing(admin, make_job):
    job = make_job(Job.Status.RUNNING)
    before = snapshot(job, *JOB_FIELDS)
    response = post_action(admin, "job", "cancel_jobs", [job])
    assert messages_of(response) == [
        ("warning", "1 job not cancelled: too late, it is already running.")
    ]
    assert snapshot(job, *JOB_FIELDS) == before
    assert before["status"] == Job.Status.RUNNING


@pytest.mark.parametrize("status", [Job.Status.SUCCEEDED, Job.Status.FAILED])
def test_cancel_a_finished_job_reports_already_finished_and_changes_nothing(
    admin, make_job, status
):
    job = make_job(status)
    before = snapshot(job, *JOB_FIELDS)
    response = post_action(admin, "job", "cancel_jobs", [job])
    assert messages_of(response) == [("warning", "1 job not cancelled: it already finished.")]
    assert snapshot(job, *JOB_FIELDS) == before


def test_cancel_a_mixed_selection_reports_each_outcome_with_its_count(admin, make_job):
    pending = [make_job(), make_job()]
    running = make_job(Job.Status.RUNNING)
    done = make_job(Job.Status.SUCCEEDED)
    cancelled = make_job(Job.Status.CANCELLED)
    response = post_action(admin, "job", "cancel_jobs", [*pending, running, done, cancelled])
    assert sorted(messages_of(response)) == sorted(
        [
            ("success", "2 jobs cancelled."),
            ("warning", "1 job not cancelled: too late, it is already running."),
            ("warning", "1 job not cancelled: it already finished."),
            ("info", "1 job was already cancelled."),
        ]
    )
    assert Job.objects.get(pk=running.pk).status == Job.Status.RUNNING
    assert Job.objects.get(pk=done.pk).status == Job.Status.SUCCEEDED


def test_run_now_moves_a_pending_job_to_now_and_keeps_scheduled_for(admin, make_job):
    job = make_job(delay=3600)
    with frozen_clock(T0):
        response = post_action(admin, "job", "run_now", [job])
    assert messages_of(response) == [("success", "1 job will run now.")]
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.run_at, stored.scheduled_for) == (
        Job.Status.PENDING,
        T0,
        job.scheduled_for,
    )


@pytest.mark.parametrize(
    "status", [Job.Status.RUNNING, Job.Status.SUCCEEDED, Job.Status.FAILED, Job.Status.CANCELLED]
)
def test_run_now_skips_a_job_that_is_not_pending_and_changes_nothing(admin, make_job, status):
    job = make_job(status)
    before = snapshot(job, *JOB_FIELDS)
    response = post_action(admin, "job", "run_now", [job])
    assert messages_of(response) == [("warning", "1 job skipped: only pending jobs can run now.")]
    assert snapshot(job, *JOB_FIELDS) == before


def test_retry_gives_a_failed_job_one_more_attempt_now(admin, make_job):
    job = make_job(Job.Status.FAILED)
    with frozen_clock(T0):
        response = post_action(admin, "job", "retry_failed", [job])
    assert messages_of(response) == [("success", "1 failed job will be retried.")]
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.run_at, stored.finished_at, stored.attempts) == (
        Job.Status.PENDING,
        T0,
        None,
        1,
    )
    assert stored.max_attempts == 2


@pytest.mark.parametrize(
    "status", [Job.Status.PENDING, Job.Status.RUNNING, Job.Status.SUCCEEDED, Job.Status.CANCELLED]
)
def test_retry_skips_a_job_that_did_not_fail_and_changes_nothing(admin, make_job, status):
    job = make_job(status)
    before = snapshot(job, *JOB_FIELDS)
    response = post_action(admin, "job", "retry_failed", [job])
    assert messages_of(response) == [("warning", "1 job skipped: only failed jobs can be retried.")]
    assert snapshot(job, *JOB_FIELDS) == before


def test_retry_of_a_failed_job_whose_unique_key_is_taken_reports_an_error_not_a_500(
    admin, make_job
):
    failed = make_job(Job.Status.FAILED, unique_key="invoice-7")
    pending = make_job(unique_key="invoice-7")
    assert pending.pk != failed.pk
    before = snapshot(failed, *JOB_FIELDS)
    response = post_action(admin, "job", "retry_failed", [failed])
    assert response.status_code == 302
    assert messages_of(response) == [
        (
            "error",
            "1 job not retried: another job with its unique key is pending or running.",
        )
    ]
    assert snapshot(failed, *JOB_FIELDS) == before
    assert Job.objects.get(pk=pending.pk).status == Job.Status.PENDING


def test_retry_reports_retried_and_key_taken_jobs_separately(admin, make_job):
    free = make_job(Job.Status.FAILED, unique_key="a")
    taken = make_job(Job.Status.FAILED, unique_key="b")
    make_job(unique_key="b")
    response = post_action(admin, "job", "retry_failed", [free, taken])
    assert sorted(messages_of(response)) == [
        ("error", "1 job not retried: another job with its unique key is pending or running."),
        ("success", "1 failed job will be retried."),
    ]
    assert Job.objects.get(pk=free.pk).status == Job.Status.PENDING
    assert Job.objects.get(pk=taken.pk).status == Job.Status.FAILED


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_retry_of_a_failed_job_a_prune_moves_into_history_meanwhile_retries_it(admin, make_job):
    """Before: the UPDATE that waited for the prune's move failed with SQLSTATE 40001
    ("tuple ... moved to another partition"), a 500."""
    if not partitions.is_partitioned():
        pytest.skip("the job table is one table: no row moves between partitions")
    job = make_job(Job.Status.FAILED)
    # A prune's move of the job into history (retention.History), not committed yet.
    with psycopg.connect(database_url().replace("postgres://", "postgresql://")) as prune:
        prune.execute("UPDATE scheduler_app_job SET in_history = true WHERE id = %s", [job.pk])
        committer = threading.Thread(target=commit_once_waited_for, args=(prune,))
        committer.start()
        response = post_action(admin, "job", "retry_failed", [job])
        committer.join()

    assert messages_of(response) == [("success", "1 failed job will be retried.")]
    assert Job.objects.get(pk=job.pk).status == Job.Status.PENDING


def commit_once_waited_for(holder: psycopg.Connection) -> None:
    """Commit ``holder``'s transaction once another waits for a lock it holds."""
    with psycopg.connect(database_url().replace("postgres://", "postgresql://")) as watcher:
        wait_until(
            lambda: watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                [holder.info.backend_pid],
            ).fetchone()[0],
            message="a statement waiting for the prune's row",
        )
    holder.commit()


def test_job_list_shows_lateness_and_filters_late_and_overdue_jobs(admin, make_job):
    with frozen_clock(T0):
        overdue = make_job(at=T0 - dt.timedelta(minutes=5))
        future = make_job(at=T0 + dt.timedelta(minutes=5))
        late = make_job(Job.Status.SUCCEEDED)
        Job.objects.filter(pk=late.pk).update(
            run_at=T0 - dt.timedelta(minutes=3), started_at=T0 - dt.timedelta(seconds=30)
        )
        page = admin.get(changelist("job"))
        overdue_page = admin.get(changelist("job"), {"late": "overdue"})
        late_page = admin.get(changelist("job"), {"late": "late_start"})
    assert page.status_code == 200
    assert "2 min 30 s" in page.content.decode()  # the late job's lateness column
    assert [j.pk for j in overdue_page.context["cl"].result_list] == [overdue.pk]
    assert [j.pk for j in late_page.context["cl"].result_list] == [late.pk]
    assert future.pk in [j.pk for j in page.context["cl"].result_list]


def test_job_detail_shows_payload_and_attempt_history_read_only(admin, make_job):
    job = make_job(Job.Status.FAILED, payload={"invoice": 42})
    JobAttempt.objects.create(
        job=job,
        attempt=1,
        task_name=job.task_name,
        worker_id="w1",
        due_at=job.run_at,
        started_at=job.run_at + dt.timedelta(seconds=2),
        finished_at=job.run_at + dt.timedelta(seconds=3),
        outcome=JobAttempt.Outcome.FAILED,
        error="Traceback (most recent call last):\nValueError: no invoice 42",
    )
    response = admin.get(change("job", job.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert "ValueError: no invoice 42" in html
    assert "&quot;invoice&quot;: 42" in html or '"invoice": 42' in html
    # Nothing to edit by hand: the form has no input for status or attempts.
    assert 'name="status"' not in html
    assert 'name="attempts"' not in html
    # And a POST that tries anyway changes nothing.
    before = snapshot(job, *JOB_FIELDS)
    admin.post(change("job", job.pk), {"status": "pending", "attempts": "0"})
    assert snapshot(job, *JOB_FIELDS) == before


def test_job_admin_has_no_add_page(admin):
    assert admin.get("/admin/scheduler_app/job/add/").status_code == 403


@pytest.mark.parametrize("status", [Job.Status.PENDING, Job.Status.RUNNING, Job.Status.SUCCEEDED])
def test_jobs_cannot_be_deleted_in_the_admin(admin, make_job, status):
    # Deleting would get round cancel's rules and records; retention removes old jobs.
    job = make_job(status)
    assert "delete_selected" not in offered_actions(admin, "job")
    post_action(admin, "job", "delete_selected", [job], post="yes")
    assert admin.post(delete("job", job.pk), {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_search_finds_a_job_by_unique_key(admin, make_job):
    wanted = make_job(unique_key="invoice-42")
    make_job(unique_key="invoice-43x")
    schedule("tests.noop", delay=60)
    response = admin.get(changelist("job"), {"q": "invoice-42"})
    assert [j.pk for j in response.context["cl"].result_list] == [wanted.pk]
