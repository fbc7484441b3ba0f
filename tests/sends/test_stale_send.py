"""The stale-send guard: a send far past its time does not start; it waits for an operator."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import StaleSend
from scheduler_app.models import Alert, Job, LaneProgress, Recipient, SendBatch
from scheduler_app.registry import JobContext, get_task
from scheduler_app.sends.batches import resume_batch
from scheduler_app.sends.task_names import SEND_MESSAGE_TASK
from tests.sends.helpers import recipient, run_lane_now
from tests.testapp.models import ProviderBehaviour, ProviderCall

T0 = dt.datetime(2027, 5, 3, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
pytestmark = pytest.mark.django_db


def stale_alerts() -> dict[str, Alert]:
    return {a.subject: a for a in Alert.objects.open().filter(kind=Alert.Kind.STALE_SEND)}


def test_a_batch_more_than_stale_send_after_late_is_paused_with_an_alert_and_sends_once_resumed(
    customer, make_batch
):
    customer("ann@example.com", "Ann")
    with frozen_clock(T0):
        batch = make_batch(scheduled_at=T0 - HOUR - dt.timedelta(minutes=5))

        run_lane_now(batch)

        batch.refresh_from_db()
        assert batch.status == SendBatch.Status.PAUSED
        assert batch.status_reason == (
            "stale: the send would start 1:05:00 after its scheduled time "
            "(STALE_SEND_AFTER is 3600.0s); resume the batch to send anyway, or cancel it."
        )
        assert batch.frozen_at is None and ProviderCall.objects.count() == 0
        alert = stale_alerts()["batch:%s" % batch.pk]
        assert alert.numbers["late_seconds"] == 3900

        # A lane that runs again while it is paused sends nothing either.
        run_lane_now(batch)
        assert ProviderCall.objects.count() == 0

        resume_batch(batch.pk)
        assert stale_alerts() == {}
        run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent) == (SendBatch.Status.COMPLETED, 1)
    assert batch.stale_send_allowed is True
    assert list(ProviderCall.objects.values_list("address", flat=True)) == ["ann@example.com"]


def test_a_batch_late_by_less_than_stale_send_after_sends(customer, make_batch):
    customer("ann@example.com", "Ann")
    with frozen_clock(T0):
        batch = make_batch(scheduled_at=T0 - HOUR + dt.timedelta(seconds=1))
        run_lane_now(batch)
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == (SendBatch.Status.COMPLETED, 1)
    assert stale_alerts() == {}


def test_a_local_time_delivery_is_judged_per_recipient(customer, make_batch):
    customer("ldn@example.com", "Lou", tz="Europe/London")
    customer("nyc@example.com", "Ned", tz="America/New_York")
    start = dt.datetime(2027, 1, 15, 0, 0, tzinfo=dt.UTC)
    london_nine = dt.datetime(2027, 1, 15, 9, 0, tzinfo=dt.UTC)
    new_york_nine = dt.datetime(2027, 1, 15, 14, 0, tzinfo=dt.UTC)
    with frozen_clock(start) as clock:
        batch = make_batch(
            scheduled_at=start, timezone="Europe/London", local_delivery_time=dt.time(9, 0)
        )
        run_lane_now(batch)  # freezes the audience; nobody is due yet

        # The workers were down until 11:00 UTC: London's 09:00 is two hours gone.
        clock.set(london_nine + 2 * HOUR)
        run_lane_now(batch)
        batch.refresh_from_db()
        assert batch.status == SendBatch.Status.PAUSED
        assert batch.status_reason.startswith(
            "stale: a local-time delivery would start 2:00:00 after its scheduled time"
        )
        assert ProviderCall.objects.count() == 0
        assert set(stale_alerts()) == {"batch:%s" % batch.pk}

        resume_batch(batch.pk)
        run_lane_now(batch)
        assert recipient(batch, "ldn@example.com").status == "sent"

        # Resumed means "send anyway": later recipients are not judged again.
        clock.set(new_york_nine + 3 * HOUR)
        run_lane_now(batch)
    assert recipient(batch, "nyc@example.com").status == "sent"


def message_context(*, attempt: int, scheduled_for: dt.datetime, job_id: int = 41) -> JobContext:
    return JobContext(
        job_id=job_id,
        task_name=SEND_MESSAGE_TASK,
        payload={
            "to": "ann@example.com",
            "subject": "Receipt",
            "text": "Thanks",
            "provider": "fake",
        },
        payload_version=1,
        attempt=attempt,
        scheduled_for=scheduled_for,
        idempotency_key=str(job_id),
    )


def test_a_single_message_too_late_fails_as_stale_with_an_alert_and_a_retry_sends_it():
    send = get_task(SEND_MESSAGE_TASK)
    with frozen_clock(T0):
        with pytest.raises(StaleSend) as refused:
            send(message_context(attempt=1, scheduled_for=T0 - 2 * HOUR))
        assert str(refused.value).startswith(
            "stale: the message would start 2:00:00 after its scheduled time"
        )
        assert set(stale_alerts()) == {"messages"}
        assert ProviderCall.objects.count() == 0

        # An operator's retry of the refused job: due now.
        Job.objects.create(
            pk=41,
            task_name=SEND_MESSAGE_TASK,
            status=Job.Status.RUNNING,
            scheduled_for=T0 - 2 * HOUR,
            run_at=T0,
        )
        send(message_context(attempt=2, scheduled_for=T0 - 2 * HOUR))
        send(message_context(attempt=1, scheduled_for=T0 - HOUR + dt.timedelta(seconds=1)))
    assert ProviderCall.objects.count() == 2


def test_an_automatic_retry_an_outage_held_back_is_stale_too():
    """The first attempt failed in time; its retry was due two hours ago (the workers were
    down): it is refused like a first attempt that late. Only the first attempt was guarded."""
    Job.objects.create(
        pk=41,
        task_name=SEND_MESSAGE_TASK,
        status=Job.Status.RUNNING,
        scheduled_for=T0 - 3 * HOUR,
        run_at=T0 - 2 * HOUR,
    )
    with frozen_clock(T0), pytest.raises(StaleSend) as refused:
        get_task(SEND_MESSAGE_TASK)(message_context(attempt=2, scheduled_for=T0 - 3 * HOUR))
    assert str(refused.value).startswith(
        "stale: the message would start 2:00:00 after its scheduled time"
    )
    assert ProviderCall.objects.count() == 0


def test_an_outage_that_leaves_many_messages_stale_opens_one_alert_not_one_per_message(
    django_capture_on_commit_callbacks, mailoutbox
):
    """Each refused message opened an alert of its own, mailed at once and again every hour:
    after an outage, one mail per queued message."""
    send = get_task(SEND_MESSAGE_TASK)
    with frozen_clock(T0):
        for job_id in range(41, 46):
            with django_capture_on_commit_callbacks(execute=True), pytest.raises(StaleSend):
                send(message_context(attempt=1, scheduled_for=T0 - 2 * HOUR, job_id=job_id))
            Job.objects.create(
                pk=job_id,
                task_name=SEND_MESSAGE_TASK,
                status=Job.Status.FAILED,
                scheduled_for=T0 - 2 * HOUR,
                run_at=T0 - 2 * HOUR,
                finished_at=T0,
                last_error="StaleSend: stale: the message would start 2:00:00 late",
            )
        # Each refusal counts what was refused before it (the evaluator's count is kept).
        [alert] = stale_alerts().values()
        assert (alert.numbers["messages"], alert.numbers["latest_job"]) == (5, 45)
        with django_capture_on_commit_callbacks(execute=True):
            evaluate()

    [alert] = stale_alerts().values()
    assert alert.subject == "messages"
    assert alert.numbers["messages"] == 5
    assert alert.summary.startswith(
        "5 single messages were not sent: too late. The latest, job 45: "
    )
    assert [m.subject for m in mailoutbox if "stale_send" in m.subject] == [
        "[Django] [opened] stale_send: messages"
    ]


def test_a_send_an_outage_stopped_for_longer_than_stale_send_after_waits_for_an_operator(
    customer, make_batch
):
    """Stopped mid-send (here: the provider asked to wait, then no worker ran for three
    hours): the rest is held like a send that never started, and goes once resumed."""
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    ProviderBehaviour.objects.create(address="bob@example.com", answer="slow_down", times=1)
    with frozen_clock(T0 - 3 * HOUR):
        batch = make_batch(scheduled_at=T0 - 3 * HOUR)
        run_lane_now(batch)  # ann sent; bob put off for 30 s
    assert recipient(batch, "bob@example.com").status == "pending"

    with frozen_clock(T0):
        run_lane_now(batch)

        batch.refresh_from_db()
        assert batch.status == SendBatch.Status.PAUSED
        assert batch.status_reason == (
            "stale: the rest of the send would start 3:00:00 after it stopped "
            "(STALE_SEND_AFTER is 3600.0s); resume the batch to send anyway, or cancel it."
        )
        assert "batch:%s" % batch.pk in stale_alerts()
        assert list(ProviderCall.objects.values_list("address", flat=True)) == [
            "ann@example.com",
            "bob@example.com",
        ]  # bob's call answered "slow down": not sent

        resume_batch(batch.pk)
        run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent) == (SendBatch.Status.COMPLETED, 2)


def test_a_long_send_that_keeps_marking_recipients_is_not_stale(customer, make_batch):
    """Recipients due long ago are normal in a send that takes hours at the provider's pace."""
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    with frozen_clock(T0 - 3 * HOUR):
        batch = make_batch(scheduled_at=T0 - 3 * HOUR)
        run_lane_now(batch)
    # Bob is due since the start, and the send marked someone a minute ago.
    SendBatch.objects.filter(pk=batch.pk).update(status="sending", finished_at=None)
    Recipient.objects.filter(batch=batch, address="bob@example.com").update(status="pending")
    LaneProgress.objects.filter(batch=batch).update(progressed_at=T0 - dt.timedelta(minutes=1))
    with frozen_clock(T0):
        run_lane_now(batch)
    assert recipient(batch, "bob@example.com").status == "sent"
