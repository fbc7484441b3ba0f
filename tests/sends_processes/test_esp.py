"""A send through django-anymail's real Postmark backend, run by a real runworker, against a
fake ESP that throttles, fails, refuses recipients and refuses our key (#33)."""

from __future__ import annotations

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from scheduler_app.conf import app_settings
from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import wait_until
from tests.sends.fake_esp import FakeEsp
from tests.sends_processes.conftest import RELAX, batch_status
from tests.testapp.models import Customer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def esp_batch(plan: str, addresses: list[str]) -> SendBatch:
    Customer.objects.bulk_create(
        [Customer(email=address, first_name="Reader", plan=plan) for address in addresses]
    )
    batch = SendBatch.objects.create(
        name="esp test",
        subject_template="News",
        text_template="Hi {{ first_name }}.",
        audience="tests.customers",
        audience_params={"plan": plan},
        expected_max_audience=len(addresses),
        scheduled_at=timezone.now(),
        timezone="UTC",
        provider="email",
        rate_limit_key="email",
    )
    return schedule_batch(batch, relax=RELAX)


def hurry_retries(batch: SendBatch) -> None:
    """Stage the backoff of the recipients the ESP failed with a 500 (RECIPIENT_RETRY waits up
    to 30 s after the first failure): make them due now, and the lanes waiting for them."""
    waiting = Recipient.objects.filter(
        batch=batch, status=Recipient.Status.PENDING, last_error__contains="(HTTP 500)"
    )
    if waiting.exists():
        waiting.update(next_attempt_at=Now())
        Job.objects.filter(
            task_name=SEND_BATCH_TASK,
            unique_key__startswith="batch:%s:lane:" % batch.pk,
            status=Job.Status.PENDING,
        ).update(run_at=Now())


def ended(batch: SendBatch) -> bool:
    """Return True once ``batch`` stopped sending (its retries hurried meanwhile)."""
    hurry_retries(batch)
    # One read: two reads could see "scheduled" and then "sending" and stop early.
    return batch_status(batch) not in (SendBatch.Status.SENDING, SendBatch.Status.SCHEDULED)


def test_throttled_recipients_are_never_charged_refused_ones_fail_once_a_bad_key_pauses(
    send_worker,
):
    """429: put back, never charged; 500: retried, then sent, or failed after
    RECIPIENT_MAX_ATTEMPTS, never pausing the batch; a refused recipient: failed once; 401:
    the batch pauses with the ESP's reason, nobody charged."""
    max_attempts = app_settings.RECIPIENT_MAX_ATTEMPTS
    with FakeEsp() as esp:
        send_worker(window=4, env={"SCHEDULER_TEST_POSTMARK_URL": esp.url})
        good = ["ok%s@example.com" % n for n in range(4)]
        throttled = ["throttled%s@example.com" % n for n in range(3)]
        batch = esp_batch(
            "news",
            [
                *good,
                *throttled,
                "refused@example.com",
                "broken@example.com",  # 500 once, then accepted
                "down@example.com",  # 500 every time
            ],
        )
        wait_until(lambda: ended(batch), timeout=60, message="the batch to end")
        markers = {r.address: (r.status, r.attempts) for r in Recipient.objects.filter(batch=batch)}
        assert batch_status(batch) == SendBatch.Status.COMPLETED
        # Throttled (429) and then accepted: one attempt each, the 429 cost nothing.
        assert markers == {
            **{address: ("sent", 1) for address in [*good, *throttled]},
            "refused@example.com": ("failed", 1),
            "broken@example.com": ("sent", 2),
            "down@example.com": ("failed", max_attempts),
        }
        assert esp.seen["refused@example.com"] == 1  # failed once, never retried
        assert all(esp.seen[address] == 2 for address in throttled)
        assert (esp.seen["broken@example.com"], esp.seen["down@example.com"]) == (2, max_attempts)
        assert Recipient.objects.get(batch=batch, address="down@example.com").last_error == (
            "TransientSendError: The ESP failed (HTTP 500): Postmark API response 500 "
            '(Internal Server Error): { "ErrorCode": 500, "Message": "Internal error" }'
        )

        keyless = esp_batch("keys", ["badkey%s@example.com" % n for n in range(3)])
        wait_until(
            lambda: batch_status(keyless) == SendBatch.Status.PAUSED,
            timeout=60,
            message="the batch with a bad key to pause",
        )
    keyless.refresh_from_db()
    assert keyless.status_reason.startswith(
        "The ESP refused our credentials or account: HTTP 401: "
    )
    assert set(Recipient.objects.filter(batch=keyless).values_list("status", "attempts")) == {
        ("pending", 0)
    }
