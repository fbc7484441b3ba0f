"""A lane that meets errors (not crashes): markers kept, the breaker, 429s, lane errors."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import OperationalError

from scheduler_app import clock
from scheduler_app.exceptions import RetryLater
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.breaker import Breaker
from scheduler_app.sends.delivery import Outcome
from scheduler_app.sends.dispatch import run_lane
from tests.sends.helpers import make_due, recipient, run_lane_job, run_lane_now
from tests.testapp.models import ProviderBehaviour, ProviderCall

pytestmark = pytest.mark.django_db


@pytest.fixture
def four(customer):
    for name in ("ann", "bob", "cat", "dan"):
        customer("%s@example.com" % name, name.title())


def test_a_marker_held_in_memory_is_written_before_the_lane_raises(four, make_batch):
    """Ann's marker waits to go with Bob's attempt; the lane raises before that: it is written."""
    batch = make_batch()

    def stop_with_an_error() -> bool:
        if ProviderCall.objects.exists():
            raise RuntimeError("the lane broke")
        return False

    with pytest.raises(RuntimeError):
        run_lane(batch.pk, claim="test:raises", should_stop=stop_with_an_error)

    assert (recipient(batch, "ann@example.com").status, ProviderCall.objects.count()) == ("sent", 1)
    batch.refresh_from_db()
    assert batch.sent == 1


def test_the_breaker_stops_the_rest_of_the_chunk(customer, make_batch):
    """The first failure trips a one-attempt window: the other recipients are not failed."""
    for name in ("ann", "bob", "cat", "dan"):
        customer("%s@example.com" % name, "")  # no first name: every render fails closed
    batch = make_batch(text_template="Hi {{ first_name }}.", breaker_window=2)

    run_lane_now(batch)

    batch.refresh_from_db()
    assert batch.status == "paused"
    assert batch.status_reason.startswith("Automatic breaker: 1 of the last 1 attempts failed")
    assert sorted(Recipient.objects.filter(batch=batch).values_list("status", flat=True)) == [
        "failed",
        "pending",
        "pending",
        "pending",
    ]


def test_a_batch_breaker_threshold_of_0_is_its_own_not_the_default():
    """None means BREAKER_THRESHOLD (0.5); 0 trips on any failure (the form refuses it)."""
    breaker = Breaker(SendBatch(breaker_window=4, breaker_threshold=0))  # 2 lanes: 2 each

    assert breaker.add(Outcome(recipient_id=1, status="sent")) == ""
    assert breaker.add(Outcome(recipient_id=2, status="failed")) == (
        "Automatic breaker: 1 of the last 2 attempts failed (threshold 0%)."
    )


def test_slow_down_makes_the_lane_wait_instead_of_claiming_the_next_chunk(
    four, make_batch, settings
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 2}
    ProviderBehaviour.objects.create(answer="slow_down", times=1)  # 429, Retry-After 30
    batch = make_batch()

    run = run_lane_now(batch)

    assert run.retry is not None and run.retry.delay == dt.timedelta(seconds=30)
    assert ProviderCall.objects.count() == 1
    untouched = Recipient.objects.filter(
        batch=batch, address__in=["cat@example.com", "dan@example.com"]
    )
    assert set(untouched.values_list("claimed_by", "attempts")) == {("", 0)}


def statement_times_out(addresses, batch):
    raise OperationalError("canceling statement due to statement timeout")


def test_a_database_error_on_a_working_connection_counts_as_a_lane_error(
    four, make_batch, settings
):
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "SUPPRESSION_CHECK": "tests.sends.test_lane_faults.statement_times_out",
    }
    batch = make_batch()
    for _ in range(3):
        with pytest.raises(OperationalError):
            run_lane_job(batch)
        Recipient.objects.filter(batch=batch).update(claimed_by="", claimed_until=None)

    batch.refresh_from_db()
    assert batch.status == "paused"
    assert batch.status_reason.endswith(
        "last error: OperationalError: canceling statement due to statement timeout"
    )


def test_a_template_that_stops_compiling_mid_send_is_a_lane_error_not_a_failed_batch(
    four, make_batch
):
    """A worker of an older deploy may lack a tag library the others have."""
    batch = make_batch(
        status=SendBatch.Status.SENDING,
        started_at=clock.now(),
        text_template="{% load tags_of_a_newer_deploy %}Hi {{ first_name }}",
    )

    with pytest.raises(Exception, match="tags_of_a_newer_deploy"):
        run_lane_job(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.lane_errors) == ("sending", 1)


def test_the_breaker_window_lasts_across_lane_runs(customer, make_batch):
    """A slow batch restarts its lanes between attempts (each waits for its retries): the
    window of 4 attempts (2 per lane) fills across runs and trips, instead of starting empty
    every time and never filling."""
    customer("ann@example.com", "Ann")
    ProviderBehaviour.objects.create(address="", answer="transient", times=10)
    batch = make_batch(breaker_window=4, breaker_threshold=0.5)

    first = run_lane_now(batch)  # one attempt, then the lane waits for ann's retry
    assert first.retry is not None
    batch.refresh_from_db()
    assert batch.status == "sending"
    make_due(batch)
    run_lane_now(batch)

    batch.refresh_from_db()
    assert batch.status == "paused"
    assert batch.status_reason.startswith("Automatic breaker: 2 of the last 2 attempts failed")
    assert recipient(batch, "ann@example.com").attempts == 2


def test_a_recipient_without_an_address_is_skipped_not_failed(customer, make_batch):
    """Rows frozen without an address are nobody's failure: skipped, and the breaker (one
    attempt, any failure trips it) does not see a failure."""
    customer("", "Nobody")
    customer("ann@example.com", "Ann")
    batch = make_batch(breaker_window=1)

    run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent, batch.failed, batch.skipped) == ("completed", 1, 0, 1)
    assert Recipient.objects.get(batch=batch, address="").last_error == (
        "The recipient has no address."
    )


def test_a_chunk_handed_back_keeps_each_recipients_last_error(four, make_batch):
    """The worker stops right after claiming: the chunk goes back as it was, errors kept."""
    batch = make_batch()
    ProviderBehaviour.objects.create(address="bob@example.com", answer="transient", times=1)
    run_lane_now(batch)
    bob = recipient(batch, "bob@example.com")
    assert (bob.status, bob.last_error) == (
        "pending",
        "TransientSendError: fake provider: try again",
    )
    make_due(batch)
    looks = iter([False])  # the lane's first look says go on (it claims), the next ones stop

    with pytest.raises(RetryLater):
        run_lane(batch.pk, claim="test:stops", should_stop=lambda: next(looks, True))

    bob = recipient(batch, "bob@example.com")
    assert (bob.status, bob.attempts, bob.claimed_by) == ("pending", 1, "")
    assert bob.last_error == "TransientSendError: fake provider: try again"


class UnreadableError(Exception):
    """A project's exception whose message cannot be read (its ``__str__`` raises)."""

    def __str__(self) -> str:
        raise RuntimeError("the message itself is broken")


class UnreadableProvider:
    """Raises an UnreadableError for ann; accepts the others."""

    def send(self, message, idempotency_key):
        if message.to.startswith("ann@"):
            raise UnreadableError()
        return "accepted-%s" % idempotency_key


class UnbuildableProvider:
    """A provider that cannot even be built: its constructor raises an UnreadableError."""

    def __init__(self) -> None:
        raise UnreadableError()

    def send(self, message, idempotency_key):  # pragma: no cover - never built
        return "never"


def use_provider(settings, cls, **options) -> None:
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "PROVIDERS": {
            **settings.SCHEDULER_APP["PROVIDERS"],
            "test": "%s.%s" % (cls.__module__, cls.__qualname__),
        },
        **options,
    }


UNREADABLE = "UnreadableError: <the message could not be read: RuntimeError>"


@pytest.mark.parametrize(
    ("max_attempts", "ann", "status"),
    [(5, ("pending", 1), "sending"), (1, ("failed", 1), "completed")],
)
def test_a_provider_error_whose_message_cannot_be_read_is_the_recipients_and_the_lane_goes_on(
    customer, make_batch, settings, max_attempts, ann, status
):
    """The recipient is retried (or fails at RECIPIENT_MAX_ATTEMPTS) with a described error;
    the next recipient is sent; nothing raises out of the lane (#32 point 14)."""
    use_provider(settings, UnreadableProvider, RECIPIENT_MAX_ATTEMPTS=max_attempts)
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    batch = make_batch(provider="test")

    run_lane_now(batch)

    marker = recipient(batch, "ann@example.com")
    assert ((marker.status, marker.attempts), marker.last_error) == (ann, UNREADABLE)
    assert recipient(batch, "bob@example.com").status == "sent"
    batch.refresh_from_db()
    assert (batch.status, batch.lane_errors) == (status, 0)


def test_a_lane_error_whose_message_cannot_be_read_is_counted_and_pauses_with_a_reason(
    four, make_batch, settings
):
    """A provider that raises such an error where the lane cannot go on (here building it) is a
    lane error: counted, logged and, the third time in a row, the batch's pause reason."""
    use_provider(settings, UnbuildableProvider)
    batch = make_batch(provider="test")

    for _ in range(3):
        with pytest.raises(UnreadableError):
            run_lane_job(batch)

    batch.refresh_from_db()
    assert batch.status == "paused"
    assert batch.status_reason == (
        "The send stopped after 3 lane errors in a row with nothing sent; last error: %s"
        % UNREADABLE
    )
