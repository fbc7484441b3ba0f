"""Two seed sends of one batch started together: each seed is sent by exactly one of them.

Each contender is a thread with its own database connection, released by a
threading.Barrier; the fake provider answers slowly so that both are inside
the seed send at once, and records every call it receives.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from scheduler_app import clock
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.batches import seed_send
from scheduler_app.sends.content import fingerprint
from tests.testapp.models import ProviderBehaviour, ProviderCall

SEEDS = ["qa@example.com", "boss@example.com"]
TRIALS = 3
TIMEOUT = 20.0


def seed_send_together(batch: SendBatch) -> list[list[tuple[str, str]]]:
    """Run two seed sends of ``batch`` at once; return what each reported (address, status)."""
    start = threading.Barrier(2)
    reports: list[list[tuple[str, str]] | BaseException] = [[], []]

    def contender(index: int) -> None:
        try:
            connection.ensure_connection()  # connecting is not part of the race
            start.wait(timeout=TIMEOUT)
            reports[index] = [(m.address, m.status) for m in seed_send(batch)]
        except BaseException as exc:  # reported by the main thread
            reports[index] = exc
            start.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=contender, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)
    for report in reports:
        if isinstance(report, BaseException):
            raise report
    return reports  # type: ignore[return-value]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_seed_sends_at_once_call_the_provider_once_per_seed(make_batch):
    ProviderBehaviour.objects.create(answer="ok", delay=0.2)  # both are in flight at once
    for trial in range(TRIALS):
        batch = make_batch(
            status=SendBatch.Status.DRAFT,
            name="trial %s" % trial,
            seed_list=SEEDS,
            seed_context={"first_name": "Seedy"},
        )
        keys = ["%s:seed:%s:%s" % (batch.pk, fingerprint(batch)[:12], a) for a in SEEDS]

        reports = seed_send_together(batch)

        calls = ProviderCall.objects.filter(idempotency_key__in=keys)
        assert sorted(calls.values_list("idempotency_key", flat=True)) == sorted(keys), reports
        stored = Recipient.objects.filter(batch=batch, is_seed=True).order_by("id")
        assert [(m.address, m.status, m.attempts) for m in stored] == [
            (address, "sent", 1) for address in SEEDS
        ]
        assert not any(m.claimed_by or m.claimed_until for m in stored)
        for report in reports:
            # Each side reports every seed: sent (by it, or by the other before it
            # looked), or pending while the other side is still sending it.
            assert [address for address, _ in report] == SEEDS
            assert {status for _, status in report} <= {"sent", "pending"}
        for first, second in zip(*reports, strict=True):
            assert "sent" in {first[1], second[1]}, reports
        batch.refresh_from_db()
        assert batch.seed_fingerprint == fingerprint(batch), reports


@pytest.mark.django_db
def test_a_seed_held_by_another_seed_send_is_sent_only_once_its_claim_expires(make_batch):
    batch = make_batch(
        status=SendBatch.Status.DRAFT, seed_list=SEEDS[:1], seed_context={"first_name": "Seedy"}
    )
    [marker] = seed_send(batch)
    held_until = clock.now() + dt.timedelta(minutes=5)
    Recipient.objects.filter(pk=marker.pk).update(
        status="failed", claimed_by="seed:other", claimed_until=held_until
    )

    assert [(m.status, m.claimed_by) for m in seed_send(batch)] == [("failed", "seed:other")]
    assert ProviderCall.objects.count() == 1

    Recipient.objects.filter(pk=marker.pk).update(claimed_until=clock.now())  # it expired
    assert [(m.status, m.attempts, m.claimed_by) for m in seed_send(batch)] == [("sent", 2, "")]
    assert ProviderCall.objects.count() == 2
