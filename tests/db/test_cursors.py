"""Sync cursors: saved only when the job succeeds, with its outcome; the count feeds the
suspicious-success rule. A real Worker (in a thread) runs the jobs."""

from __future__ import annotations

import threading

import pytest
from django.db.models import F

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.models import Alert, Job, SyncCursor
from scheduler_app.registry import task
from scheduler_app.scheduling import schedule
from tests.helpers import running_worker, wait_for_status, wait_until

SYNC = "tests.ops.sync"
HELD = "tests.ops.held_sync"
release = threading.Event()
started = threading.Event()


@task(name=SYNC, max_attempts=1, count_key="synced", zero_runs_alert=2)
def sync(ctx):
    cursor = ctx.cursor("feed")
    n = ctx.payload["n"]
    cursor.advance((cursor.value or 0) + n, processed=n)
    if ctx.payload.get("fail"):
        raise RuntimeError("the feed broke half-way")
    return {"ok": True}


@task(name=HELD, max_attempts=1)
def held_sync(ctx):
    ctx.cursor("held").advance("moved", processed=1)
    started.set()
    release.wait(timeout=20)


@task(name="tests.ops.unstorable_sync", max_attempts=1)
def unstorable_sync(ctx):
    ctx.cursor("unstorable").advance("2026-06-01\x00", processed=1)
    return {"ok": True}


@pytest.mark.django_db(transaction=True)
def test_the_cursor_moves_only_with_a_success_and_zero_counts_raise_suspicious_success():
    with running_worker():
        first = wait_for_status(schedule(SYNC, {"n": 5}), Job.Status.SUCCEEDED)
        failed = wait_for_status(schedule(SYNC, {"n": 3, "fail": True}), Job.Status.FAILED)
        cursor = SyncCursor.objects.get(name="feed")
        assert (cursor.value, cursor.processed, cursor.job_id) == (5, 5, first.pk)
        assert first.result == {"ok": True, "synced": 5}
        assert "the feed broke half-way" in failed.last_error

        for _ in range(2):
            wait_for_status(schedule(SYNC, {"n": 0}), Job.Status.SUCCEEDED)
        evaluate()

    cursor.refresh_from_db()
    assert (cursor.value, cursor.processed) == (5, 0)
    alert = Alert.objects.open().get(kind=Alert.Kind.SUSPICIOUS_SUCCESS)
    assert alert.subject == "task:%s" % SYNC
    assert alert.numbers == {"zero_runs": 2, "count_key": "synced"}


@pytest.mark.django_db(transaction=True)
def test_an_outcome_refused_by_the_lease_fence_does_not_move_the_cursor(caplog):
    release.clear()
    started.clear()
    with running_worker(), caplog.at_level("WARNING", logger="scheduler_app.worker"):
        job = schedule(HELD, {})
        assert started.wait(timeout=20)
        # As if the lease had expired and another worker had claimed the job again.
        Job.objects.filter(pk=job.pk).update(lease_token=F("lease_token") + 1)
        release.set()
        wait_until(
            lambda: "stale completion discarded job=%s" % job.pk in caplog.text,
            message="the worker to discard the outcome",
        )
    assert not SyncCursor.objects.filter(name="held").exists()
    assert Job.objects.get(pk=job.pk).status == Job.Status.RUNNING


@pytest.mark.django_db(transaction=True)
def test_an_unstorable_cursor_value_fails_the_job_with_its_reason_at_once():
    """PostgreSQL refused it with the success, which was dropped: the job ran until its
    lease expired, again and again; SQLite stored it."""
    with running_worker():
        job = wait_for_status(schedule("tests.ops.unstorable_sync"), Job.Status.FAILED, timeout=8)
    assert job.last_error.startswith(
        "InvalidPayload: The value of cursor 'unstorable' contains a NUL character (\\x00), "
        "which the database cannot store."
    )
    assert not SyncCursor.objects.filter(name="unstorable").exists()
