"""The stale-send guard: a send far past its time waits for an operator.

A batch that would move to sending more than STALE_SEND_AFTER after its
scheduled time (and undo window) does not start; for local-time deliveries
the same holds per recipient (each has its own time), and a batch that an
outage stopped mid-send for longer does not go on. The batch is paused
with a reason starting "stale:" and a ``stale_send`` alert opens. Resuming it
means "send anyway": the guard then leaves the batch alone. A single message
(``send_message``) whose attempt would start that late after it was due fails
with StaleSend ("stale: ...") and an alert; retrying the job sends it.
"""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from scheduler_app import clock
from scheduler_app.alerts.links import admin_link
from scheduler_app.alerts.store import open_alert, resolve_alert
from scheduler_app.conf import app_settings
from scheduler_app.db import database_now
from scheduler_app.exceptions import StaleSend
from scheduler_app.models import Alert, Job, Recipient, SendBatch
from scheduler_app.registry import JobContext
from scheduler_app.sends import states


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=app_settings.STALE_SEND_AFTER)


def batch_late_by(batch: SendBatch, now: dt.datetime) -> dt.timedelta | None:
    """Return how late the batch would start now (after its scheduled time and undo window), or
    None if that is within STALE_SEND_AFTER.

    Local-time deliveries are judged per recipient (``late_recipient``).
    """
    start = states.earliest_start(batch)
    if batch.stale_send_allowed or start is None or batch.local_delivery_time:
        return None
    late = now - start
    return late if late > stale_after() else None


def late_recipient(batch: SendBatch) -> dt.timedelta | None:
    """Return how late the most overdue first attempt of a local-time batch would start, or None.

    Only recipients due more than STALE_SEND_AFTER ago count (the claim's index finds them).
    """
    if batch.stale_send_allowed or not batch.local_delivery_time:
        return None
    now = database_now()
    due_at = (
        Recipient.objects.filter(
            batch=batch,
            status=Recipient.Status.PENDING,
            is_seed=False,
            attempts=0,
            next_attempt_at__lt=now - stale_after(),
        )
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    return None if due_at is None else now - due_at


def interrupted_for(batch: SendBatch) -> dt.timedelta | None:
    """Return how long a sending batch has made no progress while recipients were due, if
    more than STALE_SEND_AFTER (an outage stopped it mid-send), else None.

    Both must hold: a batch that keeps marking recipients is in time however long it
    takes, and one whose pending recipients are due only lately (retries) is not late.
    """
    if batch.stale_send_allowed or batch.started_at is None or batch.local_delivery_time:
        return None  # local-time deliveries: late_recipient() judges each recipient
    now = database_now()
    last = batch.last_progress() or batch.started_at
    if now - last <= stale_after():
        return None
    overdue = Recipient.objects.filter(
        batch=batch,
        status=Recipient.Status.PENDING,
        is_seed=False,
        next_attempt_at__lt=now - stale_after(),
    )
    return now - last if overdue.exists() else None


def message_late_by(job: JobContext) -> dt.timedelta | None:
    """Return how late this attempt of a single message would start now, or None if in time.

    Measured from when the attempt was due (the job's run_at, at least its scheduled
    time): an automatic retry that an outage held back is late like a first attempt,
    while an operator's "retry" of the refused job is due now and sends it.
    """
    run_at = Job.objects.filter(pk=job.job_id).values_list("run_at", flat=True).first()
    due = job.scheduled_for if run_at is None else max(run_at, job.scheduled_for)
    late = database_now() - due
    return late if late > stale_after() else None


#: The subject of the one stale_send alert every refused single message shares: an outage
#: longer than STALE_SEND_AFTER can refuse thousands of queued messages.
STALE_MESSAGES = "messages"
#: How long a refused message (not retried) counts in that alert.
STALE_MESSAGE_WINDOW = dt.timedelta(days=7)


def refused_messages(task_name: str, now: dt.datetime) -> QuerySet[Job]:
    """Return the single messages (jobs of ``task_name``) the guard refused in the last
    STALE_MESSAGE_WINDOW, that nobody retried since."""
    return Job.objects.filter(
        task_name=task_name,
        status=Job.Status.FAILED,
        finished_at__gte=now - STALE_MESSAGE_WINDOW,
        last_error__startswith="StaleSend: %s" % states.STALE_PREFIX,
    )


def stale_messages_summary(count: int, latest_job_id: int, error: str) -> str:
    """Say how many single messages were refused as stale, and why the latest was."""
    return "%s single message%s not sent: too late. The latest, job %s: %s" % (
        count,
        "s were" if count != 1 else " was",
        latest_job_id,
        error.splitlines()[0],
    )


def refuse_stale_message(job: JobContext, late: dt.timedelta) -> StaleSend:
    """Open (or refresh) the stale messages' alert; return the error the job fails with."""
    error = StaleSend(
        "%s the message would start %s after its scheduled time (STALE_SEND_AFTER is %ss); "
        "retry the job to send it anyway."
        % (
            states.STALE_PREFIX,
            dt.timedelta(seconds=int(late.total_seconds())),
            app_settings.STALE_SEND_AFTER,
        )
    )
    count = refused_messages(job.task_name, clock.now()).count() + 1  # this one is not failed yet
    open_alert(
        kind=Alert.Kind.STALE_SEND,
        subject=STALE_MESSAGES,
        summary=stale_messages_summary(count, job.job_id, str(error)),
        numbers={
            "messages": count,
            "latest_job": job.job_id,
            "late_seconds": round(late.total_seconds(), 3),
            "stale_send_after_seconds": app_settings.STALE_SEND_AFTER,
        },
        admin_url=admin_link("scheduler_app_job_change", job.job_id),
    )
    return error


def pause_stale(
    batch: SendBatch, late: dt.timedelta, *, what: str, since: str = "its scheduled time"
) -> bool:
    """Pause the batch as stale and open its alert; False if it was no longer active."""
    reason = (
        "%s %s would start %s after %s (STALE_SEND_AFTER is %ss); "
        % (
            states.STALE_PREFIX,
            what,
            dt.timedelta(seconds=int(late.total_seconds())),
            since,
            app_settings.STALE_SEND_AFTER,
        )
        + "resume the batch to send anyway, or cancel it."
    )
    if not states.pause(batch.pk, reason=reason):
        return False
    open_alert(
        kind=Alert.Kind.STALE_SEND,
        subject="batch:%s" % batch.pk,
        summary="Send %r (batch %s) was held: %s" % (batch.name, batch.pk, reason),
        numbers={
            "late_seconds": round(late.total_seconds(), 3),
            "stale_send_after_seconds": app_settings.STALE_SEND_AFTER,
        },
        admin_url=admin_link("scheduler_app_sendbatch_change", batch.pk),
    )
    return True


def resolve_stale_alert(batch_id: int) -> None:
    """Resolve the batch's stale_send alert (an operator resumed the batch)."""
    for alert in Alert.objects.open().filter(
        kind=Alert.Kind.STALE_SEND, subject="batch:%s" % batch_id
    ):
        resolve_alert(alert)
