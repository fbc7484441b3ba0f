"""The frozen audience: suppression at send time, and the expected-maximum circuit breaker."""

from __future__ import annotations

import pytest

from scheduler_app import clock
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.audience import AudienceQuery, audience
from scheduler_app.sends.start import freeze_audience
from tests.helpers import running_worker, wait_until
from tests.sends.helpers import recipient, run_lane_now
from tests.testapp.models import Customer, ProviderCall


@pytest.mark.django_db
def test_a_customer_unsubscribed_after_the_freeze_is_skipped_not_sent(customer, make_batch):
    customer("ann@example.com", "Ann")
    leaver = customer("leaver@example.com", "Lee")
    customer("bob@example.com", "Bob")
    batch = make_batch()
    assert freeze_audience(batch, now=clock.now()) == 3
    assert recipient(batch, "leaver@example.com").status == "pending"

    Customer.objects.filter(pk=leaver.pk).update(unsubscribed=True)
    run = run_lane_now(batch)

    assert run.counts == {"sent": 2, "skipped": 1}
    leaver_marker = recipient(batch, "leaver@example.com")
    assert (leaver_marker.status, leaver_marker.last_error, leaver_marker.sent_at) == (
        "skipped",
        "unsubscribed",
        None,
    )
    assert sorted(ProviderCall.objects.values_list("address", flat=True)) == [
        "ann@example.com",
        "bob@example.com",
    ]
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.sent, batch.failed, batch.skipped) == (
        "completed",
        3,
        2,
        0,
        1,
    )


@pytest.mark.django_db
def test_the_suppression_check_runs_for_each_chunk_at_send_time(
    customer, make_batch, settings, monkeypatch
):
    """A customer who leaves while earlier chunks are sent is still caught."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 1}
    customer("ann@example.com", "Ann")
    leaver = customer("leaver@example.com", "Lee")
    batch = make_batch()

    from tests.testapp import sending

    original = sending.FakeProvider.send

    def send_then_unsubscribe(self, message, idempotency_key):
        result = original(self, message, idempotency_key)
        Customer.objects.filter(pk=leaver.pk).update(unsubscribed=True)
        return result

    monkeypatch.setattr(sending.FakeProvider, "send", send_then_unsubscribe)
    run_lane_now(batch)

    assert list(ProviderCall.objects.values_list("address", flat=True)) == ["ann@example.com"]
    assert recipient(batch, "leaver@example.com").status == "skipped"


@pytest.mark.django_db
def test_an_audience_over_the_expected_maximum_fails_the_batch_and_sends_nothing(
    customer, make_batch
):
    for n in range(3):
        customer("c%s@example.com" % n, "C%s" % n)
    batch = make_batch(expected_max_audience=2)

    run = run_lane_now(batch)

    assert run.counts == {}
    batch.refresh_from_db()
    assert batch.status == "failed"
    assert batch.status_reason == (
        "Audience of 3 recipients exceeds the expected maximum of 2; nothing was sent."
    )
    assert (batch.total, batch.sent, batch.started_at) == (3, 0, None)
    assert ProviderCall.objects.count() == 0
    assert set(Recipient.objects.filter(batch=batch).values_list("status", flat=True)) == {
        "pending"
    }
    # Another lane (or a rerun) finds the batch failed and sends nothing either.
    assert run_lane_now(batch).counts == {}
    assert ProviderCall.objects.count() == 0


@pytest.mark.django_db
def test_an_audience_at_the_expected_maximum_is_sent(customer, make_batch):
    for n in range(2):
        customer("c%s@example.com" % n, "C%s" % n)
    batch = make_batch(expected_max_audience=2)

    run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 2)


@pytest.mark.django_db
def test_the_freeze_deduplicates_by_recipient_key_and_keeps_rows_without_address(
    customer, make_batch
):
    customer("ann@example.com", "Ann")
    customer("", "No address")
    batch = make_batch(audience_params={"plan": "free"})
    customer("pro@example.com", "Pro", plan="pro")  # outside the audience's parameters

    assert freeze_audience(batch, now=clock.now()) == 2
    # A second freeze of the same batch adds nothing (ON CONFLICT DO NOTHING).
    assert freeze_audience(batch, now=clock.now()) == 0
    assert sorted(Recipient.objects.filter(batch=batch).values_list("address", flat=True)) == [
        "",
        "ann@example.com",
    ]
    ann = recipient(batch, "ann@example.com")
    assert ann.context == {"first_name": "Ann", "plan": "free"}
    assert ann.idempotency_key == "%s:%s" % (batch.pk, ann.recipient_key)


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_fails_an_oversized_batch_with_zero_provider_calls(customer, make_batch):
    for n in range(3):
        customer("c%s@example.com" % n, "C%s" % n)
    batch = make_batch(expected_max_audience=2, status=SendBatch.Status.DRAFT)
    from scheduler_app.sends.batches import schedule_batch

    schedule_batch(batch, relax=("audience_within_limit", "dry_run_clean", "seed_sent"))

    with running_worker():
        wait_until(
            lambda: SendBatch.objects.filter(pk=batch.pk, status="failed").exists(),
            message="the batch to fail",
        )

    batch.refresh_from_db()
    assert batch.status_reason == (
        "Audience of 3 recipients exceeds the expected maximum of 2; nothing was sent."
    )
    assert ProviderCall.objects.count() == 0


@audience("tests.customers-by-email")
def customers_by_email(params):
    """All customers, keyed by their address."""
    return AudienceQuery(queryset=Customer.objects.all(), key="email", address="email")


@pytest.mark.django_db(transaction=True)
def test_an_audience_key_equal_to_a_seed_key_fails_the_freeze_rather_than_leave_it_out(
    customer, make_batch
):
    """The freeze is the batch's only writer but for its seed markers: a recipient whose
    key is already a seed's would otherwise be left out of the send without a word."""
    customer("ann@example.com", "Ann")
    customer("seed:0123456789ab:bob@example.com", "Bob")
    batch = make_batch(audience="tests.customers-by-email")
    Recipient.objects.create(
        batch=batch,
        recipient_key="seed:0123456789ab:bob@example.com",
        address="bob@example.com",
        is_seed=True,
    )

    assert run_lane_now(batch).counts == {}

    batch.refresh_from_db()
    assert batch.status == SendBatch.Status.FAILED
    # The database's own words: "duplicate key value violates unique constraint ..." on
    # PostgreSQL, "UNIQUE constraint failed: ..." on SQLite.
    assert batch.status_reason.startswith("The audience could not be frozen: ")
    assert "unique constraint" in batch.status_reason.lower()
    assert not Recipient.objects.filter(batch=batch, is_seed=False).exists()
    assert ProviderCall.objects.count() == 0
