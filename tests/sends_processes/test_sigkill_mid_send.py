"""SIGKILL workers again and again during a send: every recipient gets exactly one sent marker."""

from __future__ import annotations

import signal
import time
from collections import defaultdict

import pytest
from django.db.models import Max

from scheduler_app.models import JobAttempt, SendBatch
from tests.helpers import wait_until
from tests.sends_processes.conftest import (
    CHUNK,
    assert_completed_once,
    batch_status,
    calls_by_key,
    expected_keys,
    make_batch,
)
from tests.testapp.models import ProviderCall

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

RECIPIENTS = 20_000
KILLS = 12
#: A killed worker's chunk is sent again after this; well above a chunk's duration under
#: load, since a live worker whose claim expires mid-chunk is re-sent too (test_sharing.py).
CLAIM_SECONDS = 5
#: Progress (sent markers) between two kills, so the kills spread over the send.
BETWEEN_KILLS = RECIPIENTS // 25


def sent(batch: SendBatch) -> int:
    return SendBatch.objects.filter(pk=batch.pk).values_list("sent", flat=True).get()


def callers_since(call_id: int, pids: list[int]) -> set[int]:
    """Return which of ``pids`` called the provider after call ``call_id``."""
    return set(
        ProviderCall.objects.filter(id__gt=call_id, pid__in=pids).values_list("pid", flat=True)
    )


def test_sigkill_mid_send_resends_only_in_flight_chunks_with_the_same_key(send_worker):
    """Workers SIGKILLed mid-chunk, 12 times, lose nothing and re-send only their in-flight chunk.

    Two workers are alive at all times (a replacement starts after each kill).
    Each victim is killed while it is calling the provider. At the end every
    recipient has exactly one sent marker, the provider saw every key
    ``<batch>:<recipient>``, and a key was called more than once only by a
    killed worker, within the last chunk it was sending when it died, with
    the same key and the same message.
    """
    started = time.monotonic()
    workers = [send_worker(claim_seconds=CLAIM_SECONDS), send_worker(claim_seconds=CLAIM_SECONDS)]
    batch = make_batch(RECIPIENTS)
    killed: list[int] = []
    kill_times: list[float] = []
    while len(killed) < KILLS and sent(batch) < RECIPIENTS * 0.85:
        seen = ProviderCall.objects.aggregate(last=Max("id"))["last"] or 0
        alive = [w.pid for w in workers if w.alive()]
        # The oldest worker that is calling the provider right now: the kill lands mid-chunk.
        calling = wait_until(
            lambda seen=seen, alive=alive: callers_since(seen, alive),
            timeout=30,
            message="a worker to call the provider",
        )
        victim = next(w for w in workers if w.pid in calling)
        victim.signal(signal.SIGKILL)
        assert victim.wait_exit() == -signal.SIGKILL
        killed.append(victim.pid)
        kill_times.append(time.monotonic())
        workers.remove(victim)
        workers.append(send_worker(claim_seconds=CLAIM_SECONDS, wait=False))
        progress = sent(batch) + BETWEEN_KILLS
        wait_until(
            lambda p=progress: sent(batch) >= min(p, RECIPIENTS),
            timeout=30,
            interval=0.05,
            message="the send to go on after kill %s" % len(killed),
        )
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=60,
        interval=0.1,
        message="the batch to complete",
    )
    elapsed = time.monotonic() - started

    assert len(killed) == KILLS, "the send finished before all kills landed"
    assert_completed_once(batch, RECIPIENTS)

    # The provider saw every key, in the documented form, and nothing else.
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    assert ProviderCall.objects.count() == sum(calls.values())

    # Re-sends: a key's calls before its last (the one recorded) all come from killed
    # workers, each within the last chunk that worker was sending when it died.
    duplicated = {key for key, n in calls.items() if n > 1}
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for row in ProviderCall.objects.filter(idempotency_key__in=duplicated).values_list(
        "idempotency_key", "id", "pid", "address", "subject", "body"
    ):
        by_key[row[0]].append(row[1:])
    last_chunks = {
        pid: set(
            ProviderCall.objects.filter(pid=pid)
            .order_by("-id")
            .values_list("id", flat=True)[:CHUNK]
        )
        for pid in killed
    }
    for key, key_calls in by_key.items():
        assert len({c[2:] for c in key_calls}) == 1, "a re-send changed the message: %s" % key
        *lost, _recorded = sorted(key_calls)
        for call_id, pid, *_ in lost:
            assert pid in killed, "a live worker's call of %s was sent again: %s" % (key, key_calls)
            assert call_id in last_chunks[pid], "%s re-sent outside an in-flight chunk" % key
    extra = sum(calls.values()) - RECIPIENTS
    assert 0 < extra <= KILLS * CHUNK, (extra, KILLS * CHUNK)

    # The kills hit lanes mid-send: their leases expired and other workers took them over.
    assert JobAttempt.objects.filter(outcome=JobAttempt.Outcome.LEASE_EXPIRED).exists()
    print(
        "\nsigkill: recipients=%s kills=%s every=%.1fs re-sent calls=%s keys=%s elapsed=%.1fs"
        % (
            RECIPIENTS,
            len(killed),
            (kill_times[-1] - kill_times[0]) / (len(kill_times) - 1),
            extra,
            len(duplicated),
            elapsed,
        )
    )
