"""Per-recipient retries: transient errors back off, permanent ones fail, 429 defers for free.

Lanes run in this process under a frozen clock, so every next_attempt_at is
exact; "later" is reached by setting the clock to the recipient's next
attempt time.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import clock
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import running_worker, wait_until
from tests.sends.helpers import make_due, recipient, run_lane_now
from tests.testapp.models import ProviderBehaviour, ProviderCall

T0 = dt.datetime(2027, 3, 1, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
TRANSIENT = "TransientSendError: fake provider: try again"
PERMANENT = "PermanentSendError: fake provider: mailbox does not exist"
SLOW_DOWN = "Provider asked to slow down for 30.0s."


def calls(address: str) -> list[tuple[str, str]]:
    return list(
        ProviderCall.objects.filter(address=address).values_list("idempotency_key", "outcome")
    )


def counters(batch: SendBatch) -> tuple:
    batch.refresh_from_db()
    return (batch.status, batch.sent, batch.failed, batch.skipped)


@pytest.mark.django_db
def test_a_transient_error_retries_that_recipient_later_and_then_sends(customer, make_batch):
    with frozen_clock(T0) as clock_:
        customer("ann@example.com", "Ann")
        customer("flaky@example.com", "Flo")
        ProviderBehaviour.objects.create(address="flaky@example.com", answer="transient", times=1)
        batch = make_batch()

        first = run_lane_now(batch)

        flaky = recipient(batch, "flaky@example.com")
        assert (flaky.status, flaky.attempts, flaky.last_error) == ("pending", 1, TRANSIENT)
        # Full-jitter backoff after attempt 1: up to RECIPIENT_RETRY's 30 s base.
        assert T0 < flaky.next_attempt_at <= T0 + 30 * SECOND
        assert (flaky.claimed_by, flaky.claimed_until) == ("", None)
        assert first.retry is not None
        assert first.retry.delay == max(flaky.next_attempt_at - T0, SECOND)
        assert first.retry.reason == "waiting for recipients due later"
        assert counters(batch) == ("sending", 1, 0, 0)

        # Not due yet: another lane finds nothing to send.
        assert run_lane_now(batch).retry is not None
        assert len(calls("flaky@example.com")) == 1

        clock_.set(flaky.next_attempt_at)
        second = run_lane_now(batch)

    assert second.counts == {"sent": 1}
    flaky.refresh_from_db()
    assert (flaky.status, flaky.attempts, flaky.last_error) == ("sent", 2, "")
    key = "%s:%s" % (batch.pk, flaky.recipient_key)
    assert calls("flaky@example.com") == [(key, "transient"), (key, "ok")]
    assert calls("ann@example.com") == [
        ("%s:%s" % (batch.pk, recipient(batch, "ann@example.com").recipient_key), "ok")
    ]
    assert counters(batch) == ("completed", 2, 0, 0)


@pytest.mark.django_db
def test_a_recipient_fails_after_recipient_max_attempts(customer, make_batch, settings):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RECIPIENT_MAX_ATTEMPTS": 3}
    with frozen_clock(T0) as clock_:
        customer("down@example.com", "Dan")
        ProviderBehaviour.objects.create(address="down@example.com", answer="transient")
        batch = make_batch()

        for attempt in (1, 2):
            assert run_lane_now(batch).retry is not None
            down = recipient(batch, "down@example.com")
            assert (down.status, down.attempts) == ("pending", attempt)
            assert down.next_attempt_at > clock.now()
            clock_.set(down.next_attempt_at)
        last = run_lane_now(batch)

    assert last.counts == {"failed": 1}
    down.refresh_from_db()
    assert (down.status, down.attempts, down.last_error, down.sent_at) == (
        "failed",
        3,
        TRANSIENT,
        None,
    )
    key = "%s:%s" % (batch.pk, down.recipient_key)
    assert calls("down@example.com") == [(key, "transient")] * 3
    assert counters(batch) == ("completed", 0, 1, 0)


@pytest.mark.django_db
def test_a_permanent_error_fails_the_recipient_at_once(customer, make_batch):
    with frozen_clock(T0):
        customer("gone@example.com", "Gus")
        customer("ann@example.com", "Ann")
        ProviderBehaviour.objects.create(address="gone@example.com", answer="permanent")
        batch = make_batch()

        run = run_lane_now(batch)

    assert run.counts == {"failed": 1, "sent": 1}
    gone = recipient(batch, "gone@example.com")
    assert (gone.status, gone.attempts, gone.last_error) == ("failed", 1, PERMANENT)
    assert len(calls("gone@example.com")) == 1
    assert counters(batch) == ("completed", 1, 1, 0)


@pytest.mark.django_db
def test_slow_down_defers_the_rest_of_the_chunk_without_using_attempts(customer, make_batch):
    with frozen_clock(T0) as clock_:
        customer("ann@example.com", "Ann")
        customer("bob@example.com", "Bob")
        customer("cat@example.com", "Cat")
        customer("dan@example.com", "Dan")
        for address in ("bob@example.com", "cat@example.com"):
            ProviderBehaviour.objects.create(address=address, answer="transient", times=1)
        batch = make_batch()
        run_lane_now(batch)  # Ann and Dan sent; Bob and Cat used one attempt each
        retry_at = max(
            recipient(batch, a).next_attempt_at for a in ("bob@example.com", "cat@example.com")
        )
        make_due(batch, at=retry_at)  # both due together: Bob, then Cat, in one chunk

        # The provider answers 429 to Bob: Bob and Cat (the rest of the chunk) wait 30 s.
        ProviderBehaviour.objects.filter(address="bob@example.com").update(
            answer="slow_down", times=1
        )
        clock_.set(retry_at)
        deferred = run_lane_now(batch)

        for address in ("bob@example.com", "cat@example.com"):
            marker = recipient(batch, address)
            assert (marker.status, marker.attempts, marker.next_attempt_at, marker.last_error) == (
                "pending",
                1,
                retry_at + 30 * SECOND,
                SLOW_DOWN,
            ), address
        assert deferred.retry is not None
        assert deferred.retry.delay == 30 * SECOND
        assert [o for _, o in calls("bob@example.com")] == ["transient", "slow_down"]
        assert [o for _, o in calls("cat@example.com")] == ["transient"]
        assert counters(batch) == ("sending", 2, 0, 0)

        clock_.set(retry_at + 30 * SECOND)
        done = run_lane_now(batch)

    assert done.counts == {"sent": 2}
    for address in ("bob@example.com", "cat@example.com"):
        marker = recipient(batch, address)
        assert (marker.status, marker.attempts, marker.last_error) == ("sent", 2, "")
    assert counters(batch) == ("completed", 4, 0, 0)


@pytest.mark.django_db
def test_slow_down_on_a_first_attempt_leaves_attempts_at_zero(customer, make_batch):
    with frozen_clock(T0):
        customer("ann@example.com", "Ann")
        customer("bob@example.com", "Bob")
        ProviderBehaviour.objects.create(answer="slow_down", times=1)  # everyone, once
        batch = make_batch()

        run = run_lane_now(batch)

    assert run.retry is not None and run.retry.delay == 30 * SECOND
    assert (
        list(
            Recipient.objects.filter(batch=batch).values_list(
                "status", "attempts", "next_attempt_at"
            )
        )
        == [("pending", 0, T0 + 30 * SECOND)] * 2
    )
    assert list(ProviderCall.objects.values_list("address", "outcome")) == [
        ("ann@example.com", "slow_down")
    ]


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_retries_a_transient_failure_when_it_is_due(customer, make_batch):
    customer("ann@example.com", "Ann")
    customer("flaky@example.com", "Flo")
    ProviderBehaviour.objects.create(address="flaky@example.com", answer="transient", times=1)
    batch = make_batch(status=SendBatch.Status.DRAFT)
    from scheduler_app.sends.batches import schedule_batch

    schedule_batch(batch, relax=("audience_within_limit", "dry_run_clean", "seed_sent"))

    with running_worker():
        flaky = wait_until(
            lambda: Recipient.objects.filter(
                batch=batch, address="flaky@example.com", attempts=1, status="pending"
            ).first(),
            message="the first, transient attempt",
        )
        wait_until(
            lambda: not Job.objects.filter(task_name=SEND_BATCH_TASK, status="running").exists(),
            message="the lanes to wait for the retry",
        )
        assert counters(batch) == ("sending", 1, 0, 0)
        # The backoff has passed: the recipient and the lanes waiting for it are due.
        now = clock.now()
        Recipient.objects.filter(pk=flaky.pk).update(next_attempt_at=now - SECOND)
        Job.objects.filter(task_name=SEND_BATCH_TASK, status="pending").update(run_at=now)
        wait_until(lambda: counters(batch)[0] == "completed", message="the batch to complete")

    flaky.refresh_from_db()
    assert (flaky.status, flaky.attempts) == ("sent", 2)
    assert [o for _, o in calls("flaky@example.com")] == ["transient", "ok"]
    assert counters(batch) == ("completed", 2, 0, 0)
