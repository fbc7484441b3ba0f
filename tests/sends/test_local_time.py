"""Local-time delivery: each recipient gets the message at 09:00 in their own time zone."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from scheduler_app import clock
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import running_worker, wait_until
from tests.sends.helpers import recipient, run_lane_now
from tests.testapp.models import ProviderCall

NINE = dt.time(9, 0)
# Midnight UTC on 15 January 2027: 13:00 on the 15th in Auckland (UTC+13, summer time),
# 14:00 on the 14th in Honolulu (UTC-10).
START = dt.datetime(2027, 1, 15, 0, 0, tzinfo=dt.UTC)
HONOLULU_9AM = dt.datetime(2027, 1, 15, 19, 0, tzinfo=dt.UTC)  # 09:00 HST on the 15th
AUCKLAND_9AM = dt.datetime(2027, 1, 15, 20, 0, tzinfo=dt.UTC)  # 09:00 NZDT on the 16th
LONDON_9AM = dt.datetime(2027, 1, 15, 9, 0, tzinfo=dt.UTC)  # the batch's zone, UTC+0


@pytest.fixture
def world(customer):
    customer("akl@example.com", "Aroha", tz="Pacific/Auckland")
    customer("hnl@example.com", "Kai", tz="Pacific/Honolulu")
    customer("nozone@example.com", "Noa")
    customer("badzone@example.com", "Bea", tz="Mars/Olympus")


def sent_addresses() -> list[str]:
    return sorted(ProviderCall.objects.values_list("address", flat=True))


@pytest.mark.django_db
def test_local_delivery_times_are_the_exact_utc_instants_and_only_due_ones_are_sent(
    world, make_batch
):
    with frozen_clock(START) as clock_:
        batch = make_batch(scheduled_at=START, timezone="Europe/London", local_delivery_time=NINE)

        frozen = run_lane_now(batch)

        assert dict(
            Recipient.objects.filter(batch=batch).values_list("address", "next_attempt_at")
        ) == {
            "akl@example.com": AUCKLAND_9AM,
            "hnl@example.com": HONOLULU_9AM,
            # No zone, or an unknown one: the batch's zone.
            "nozone@example.com": LONDON_9AM,
            "badzone@example.com": LONDON_9AM,
        }
        assert frozen.retry is not None and frozen.retry.delay == dt.timedelta(hours=9)
        assert ProviderCall.objects.count() == 0

        clock_.set(LONDON_9AM)
        assert run_lane_now(batch).retry.delay == dt.timedelta(hours=10)
        assert sent_addresses() == ["badzone@example.com", "nozone@example.com"]

        clock_.set(HONOLULU_9AM - dt.timedelta(microseconds=1))
        run_lane_now(batch)
        assert len(sent_addresses()) == 2

        clock_.set(HONOLULU_9AM)
        at_honolulu = run_lane_now(batch)
        assert sent_addresses() == [
            "badzone@example.com",
            "hnl@example.com",
            "nozone@example.com",
        ]
        assert recipient(batch, "hnl@example.com").sent_at == HONOLULU_9AM
        assert recipient(batch, "akl@example.com").status == "pending"
        assert at_honolulu.retry.delay == dt.timedelta(hours=1)

        clock_.set(AUCKLAND_9AM)
        run_lane_now(batch)

    assert recipient(batch, "akl@example.com").sent_at == AUCKLAND_9AM
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 4)


@pytest.mark.django_db
def test_a_send_after_nine_in_honolulu_goes_out_there_the_next_morning(customer, make_batch):
    customer("hnl@example.com", "Kai", tz="Pacific/Honolulu")
    customer("akl@example.com", "Aroha", tz="Pacific/Auckland")
    # 20:00 UTC on 15 January: 10:00 in Honolulu (past nine), 09:00 on the 16th in Auckland.
    start = dt.datetime(2027, 1, 15, 20, 0, tzinfo=dt.UTC)
    with frozen_clock(start):
        batch = make_batch(scheduled_at=start, timezone="UTC", local_delivery_time=NINE)
        run = run_lane_now(batch)

    assert recipient(batch, "hnl@example.com").next_attempt_at == dt.datetime(
        2027, 1, 16, 19, 0, tzinfo=dt.UTC
    )
    # Exactly nine in Auckland at the start: due at once.
    assert recipient(batch, "akl@example.com").status == "sent"
    assert run.retry.delay == dt.timedelta(hours=23)


def next_nine(zone: str, after: dt.datetime) -> dt.datetime:
    """Return the first 09:00 in ``zone`` at or after ``after``, in UTC (no DST at 09:00)."""
    local = after.astimezone(zoneinfo.ZoneInfo(zone))
    nine = local.replace(hour=9, minute=0, second=0, microsecond=0)
    if nine < local:
        nine = (nine + dt.timedelta(days=1)).replace(tzinfo=nine.tzinfo)
    return nine.astimezone(dt.UTC)


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_sends_each_zone_when_its_time_comes(customer, make_batch):
    customer("akl@example.com", "Aroha", tz="Pacific/Auckland")
    customer("hnl@example.com", "Kai", tz="Pacific/Honolulu")
    start = clock.now().replace(microsecond=0) - dt.timedelta(seconds=1)
    batch = make_batch(
        status=SendBatch.Status.DRAFT,
        scheduled_at=start,
        timezone="UTC",
        local_delivery_time=NINE,
    )
    from scheduler_app.sends.batches import schedule_batch

    schedule_batch(batch, relax=("audience_within_limit", "dry_run_clean", "seed_sent"))

    with running_worker():
        wait_until(
            lambda: (
                SendBatch.objects.filter(pk=batch.pk, status="sending").exists()
                and not Job.objects.filter(task_name=SEND_BATCH_TASK, status="running").exists()
            ),
            message="the lanes to freeze the audience and wait",
        )
        assert recipient(batch, "akl@example.com").next_attempt_at == next_nine(
            "Pacific/Auckland", start
        )
        assert recipient(batch, "hnl@example.com").next_attempt_at == next_nine(
            "Pacific/Honolulu", start
        )
        assert ProviderCall.objects.count() == 0

        # Honolulu's nine o'clock comes: its marker and the waiting lanes are due.
        now = clock.now()
        Recipient.objects.filter(batch=batch, address="hnl@example.com").update(next_attempt_at=now)
        Job.objects.filter(task_name=SEND_BATCH_TASK, status="pending").update(run_at=now)
        wait_until(lambda: sent_addresses() == ["hnl@example.com"], message="Honolulu's send")
        wait_until(
            lambda: not Job.objects.filter(task_name=SEND_BATCH_TASK, status="running").exists(),
            message="the lanes to wait for Auckland",
        )

    assert sent_addresses() == ["hnl@example.com"]
    assert recipient(batch, "akl@example.com").status == "pending"
    batch.refresh_from_db()
    assert (batch.status, batch.sent, batch.remaining) == ("sending", 1, 1)
