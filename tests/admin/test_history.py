"""Admin actions write each changed object's history, as Django's change form does.

An operator who cancels, retries, pauses or disables from a list finds the action,
who took it and when on the object's "History" page and in "Recent actions"; an
object the action left alone (refused, or already in that state) gets no entry.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from scheduler_app.models import Job, Schedule, SendBatch
from tests.admin.conftest import UNPREPARED, post_action

pytestmark = pytest.mark.django_db

Status = SendBatch.Status


def history(obj):
    """Return (user, flag, message) of each admin history entry of ``obj``, oldest first."""
    return [
        (entry.user.username, entry.action_flag, entry.get_change_message())
        for entry in LogEntry.objects.filter(object_id=str(obj.pk))
        .filter(content_type__model=obj._meta.model_name)
        .order_by("pk")
    ]


def test_cancel_run_now_and_retry_write_the_history_of_the_jobs_they_changed(admin, make_job):
    pending, running, failed = make_job(), make_job(Job.Status.RUNNING), make_job("failed")
    later, undoable = make_job(), make_job(undo_window=600)

    post_action(admin, "job", "cancel_jobs", [pending, running])
    post_action(admin, "job", "run_now", [later, failed, undoable])
    post_action(admin, "job", "retry_failed", [failed, pending])

    assert history(pending) == [("root", CHANGE, "Cancelled.")]
    assert history(running) == []  # too late: it is running
    assert history(later) == [("root", CHANGE, "Run now.")]
    assert history(undoable) == [("root", CHANGE, "Run at the end of its undo window.")]
    assert history(failed) == [("root", CHANGE, "Retried: one more attempt.")]
    page = admin.get(reverse("admin:scheduler_app_job_history", args=[pending.pk]))
    assert "Cancelled." in page.content.decode()


def test_batch_actions_write_the_history_of_the_batches_they_changed(admin, make_batch):
    draft, sending, done = make_batch(), make_batch(status=Status.SENDING), make_batch()
    SendBatch.objects.filter(pk=done.pk).update(status=Status.COMPLETED)

    post_action(
        admin, "sendbatch", "schedule_action", [draft], confirm="yes", relax=list(UNPREPARED)
    )
    post_action(
        admin, "sendbatch", "pause_action", [sending, done], confirm="yes", reason="Wrong link"
    )
    post_action(admin, "sendbatch", "resume_action", [sending, done])
    post_action(admin, "sendbatch", "cancel_action", [sending, done], confirm="yes")

    assert history(draft) == [("root", CHANGE, "Scheduled.")]
    assert history(sending) == [
        ("root", CHANGE, "Paused: Wrong link"),
        ("root", CHANGE, "Resumed."),
        ("root", CHANGE, "Cancelled; 0 already sent."),
    ]
    assert history(done) == []


def test_enable_and_disable_write_the_history_of_the_schedules_they_changed(admin):
    on = Schedule.objects.create(name="on", task_name="tests.noop", cron="0 3 * * *")
    off = Schedule.objects.create(
        name="off", task_name="tests.noop", cron="0 3 * * *", enabled=False
    )

    post_action(admin, "schedule", "disable", [on, off])
    post_action(admin, "schedule", "enable", [off])

    assert history(on) == [("root", CHANGE, "Disabled.")]
    assert history(off) == [("root", CHANGE, "Enabled.")]
