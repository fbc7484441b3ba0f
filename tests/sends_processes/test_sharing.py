"""Two workers share one send: no recipient is sent to twice, even by a worker that stalls."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app.models import Recipient, SendBatch
from tests.helpers import wait_until
from tests.sends_processes.conftest import (
    assert_completed_once,
    batch_status,
    call_count,
    calls_by_key,
    check,
    expected_keys,
    freeze,
    make_batch,
)
from tests.testapp.models import ProviderBehaviour, ProviderCall

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_workers_on_one_batch_never_send_to_the_same_recipient(send_worker):
    """Both workers send (one lane each) and every key reaches the provider exactly once."""
    count = 3000
    workers = [send_worker(), send_worker()]
    batch = make_batch(count)
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=120,  # about 50 s on a 2-core machine under load 6
        interval=0.1,
        message="the batch to complete",
    )

    assert_completed_once(batch, count)
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    assert max(calls.values()) == 1, [key for key, n in calls.items() if n > 1][:10]
    senders = set(ProviderCall.objects.values_list("pid", flat=True))
    assert senders == {w.pid for w in workers}, "the workers did not share the send"


def test_worker_stalled_past_its_claim_does_not_send_what_another_worker_sent(send_worker):
    """A worker frozen mid-chunk past its claim, then thawed, sends no recipient marked sent.

    Worker A is stopped (SIGSTOP) inside its first chunk; its claim is made to
    expire (the rows' claimed_until moved into the past); worker B claims and
    sends that chunk. When A continues it may finish the one call it was in
    the middle of (same key: what the key is for), but it must not call the
    provider for any other recipient already marked sent.
    """
    ProviderBehaviour.objects.create(delay=0.02)  # a chunk takes about 2 s
    a = send_worker(claim_seconds=2)
    batch = make_batch(300)
    wait_until(lambda: call_count(batch) >= 10, timeout=30, message="A to start its chunk")
    freeze(a)
    chunk = list(
        Recipient.objects.filter(batch=batch).exclude(claimed_by="").values_list("pk", flat=True)
    )
    assert 10 <= len(chunk) <= 100
    Recipient.objects.filter(pk__in=chunk).update(
        claimed_until=timezone.now() - dt.timedelta(seconds=1)
    )
    send_worker(claim_seconds=2)
    try:
        wait_until(
            lambda: Recipient.objects.filter(pk__in=chunk, status="sent").count() == len(chunk),
            timeout=30,
            message="B to send A's expired chunk",
        )
    finally:
        a.resume()
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=60,
        interval=0.1,
        message="the batch to complete",
    )

    assert_completed_once(batch, 300)
    sent_at = {
        "%s:%s" % (batch.pk, key): at
        for key, at in Recipient.objects.filter(batch=batch).values_list("recipient_key", "sent_at")
    }
    late = [
        (key, pid)
        for key, pid, at in ProviderCall.objects.values_list("idempotency_key", "pid", "at")
        if at > sent_at[key]
    ]
    assert {pid for _, pid in late} <= {a.pid}
    check(
        len(late) <= 1, "%s calls after the recipient was marked sent: %s" % (len(late), late[:5])
    )
    assert set(calls_by_key(batch)) == expected_keys(batch)
