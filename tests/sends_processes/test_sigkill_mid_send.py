"""SIGKILL workers again and again during a send: the batch completes by itself, and each
kill re-sends at most the calls its lanes had in flight (their windows), with the same key."""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import Max

from scheduler_app.models import ControlEvent, Job, JobAttempt, SendBatch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import wait_until
from tests.sends_processes.conftest import (
    assert_completed_once,
    batch_status,
    calls_by_key,
    expected_keys,
    make_batch,
)
from tests.testapp.models import ProviderBehaviour, ProviderCall

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

RECIPIENTS = 4_000
KILLS = 15
LANES = 3
#: Lanes one worker may run side by side (its concurrency).
LANES_PER_WORKER = 2
#: Seconds after which a dead lane's lease and its claims expire.
EXPIRY = 3
#: Progress (sent markers) between two kills, so the kills spread over the send.
BETWEEN_KILLS = RECIPIENTS // 20


def sent(batch: SendBatch) -> int:
    return SendBatch.objects.get(pk=batch.pk).sent


def callers_since(call_id: int, pids: list[int]) -> set[int]:
    """Return which of ``pids`` called the provider after call ``call_id``."""
    return set(
        ProviderCall.objects.filter(id__gt=call_id, pid__in=pids).values_list("pid", flat=True)
    )


def kill_while_calling(
    batch: SendBatch,
    workers: list,
    start: Callable[..., Any],
    *,
    kills: int,
    total: int,
    until: float,
    between: int,
) -> list[int]:
    """SIGKILL a worker that is calling the provider, start a replacement, wait for
    ``between`` more sent markers (of ``total``); ``kills`` times or until ``until`` are
    sent. Return the killed pids (``workers`` holds the live ones)."""
    killed: list[int] = []
    while len(killed) < kills and sent(batch) < until:
        seen = ProviderCall.objects.aggregate(last=Max("id"))["last"] or 0
        alive = [w.pid for w in workers if w.alive()]
        # A worker calling the provider right now: the kill lands mid-send.
        calling = wait_until(
            lambda seen=seen, alive=alive: callers_since(seen, alive),
            timeout=30,
            message="a worker to call the provider",
        )
        victim = next(w for w in workers if w.pid in calling)
        victim.signal(signal.SIGKILL)
        assert victim.wait_exit() == -signal.SIGKILL
        killed.append(victim.pid)
        workers.remove(victim)
        workers.append(start(wait=False))
        progress = sent(batch) + between
        wait_until(
            lambda p=progress: sent(batch) >= min(p, total),
            timeout=30,
            interval=0.05,
            message="the send to go on after kill %s" % len(killed),
        )
    return killed


def test_sigkill_again_and_again_completes_the_batch_and_resends_only_calls_in_flight(
    send_worker, settings
):
    """15 SIGKILLs of the worker that is calling the provider, during a 3-lane send.

    Three workers of concurrency 2 are alive at all times (a replacement starts
    after each kill), so one worker may run two lanes of the batch side by side,
    each with one call in flight (SEND_WINDOW 1). Every lane may crash only once
    (max_attempts 1), so the first kills kill every lane for good and the
    sweeper must give the batch new ones. Without any operator action the batch
    completes; every recipient has one sent marker; the provider saw every key
    ``<batch>:<recipient>``; a key was called twice only when it was one of a
    killed worker's last calls (a recipient in flight in one of its lanes), with
    the same message: at most one extra call per kill and lane.
    """
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_LANES": LANES}
    started = time.monotonic()

    def worker(wait: bool = True):
        return send_worker(
            claim_seconds=EXPIRY, lease=EXPIRY, concurrency=LANES_PER_WORKER, wait=wait
        )

    workers = [worker() for _ in range(3)]
    batch = make_batch(RECIPIENTS)
    # Each lane dies for good at its first crash: the batch is left without lanes.
    Job.objects.filter(task_name=SEND_BATCH_TASK).update(max_attempts=1)
    killed = kill_while_calling(
        batch,
        workers,
        worker,
        kills=KILLS,
        total=RECIPIENTS,
        until=RECIPIENTS * 0.9,
        between=BETWEEN_KILLS,
    )
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=40,
        interval=0.1,
        message="the batch to complete",
    )
    elapsed = time.monotonic() - started

    assert len(killed) == KILLS, "the send finished before all kills landed"
    assert_completed_once(batch, RECIPIENTS)
    # Lanes died for good, and the sweeper gave the batch new ones, without an operator.
    assert JobAttempt.objects.filter(
        task_name=SEND_BATCH_TASK, outcome=JobAttempt.Outcome.LEASE_EXPIRED
    ).exists()
    assert Job.objects.filter(task_name=SEND_BATCH_TASK, status=Job.Status.FAILED).count() >= LANES
    revived = ControlEvent.objects.filter(scope="batch", target=str(batch.pk), action="revive")
    assert revived.exists()
    assert not ControlEvent.objects.filter(
        scope="batch", target=str(batch.pk), action__in=["pause", "resume"]
    ).exists()

    # The provider saw every key, in the documented form, and nothing else.
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    assert ProviderCall.objects.count() == sum(calls.values())

    # Re-sends: every call of a key before its last (the recorded one) was one of the
    # last calls of a killed worker (one in flight per lane it ran), with the same message.
    last_calls = {
        pid: set(
            ProviderCall.objects.filter(pid=pid)
            .order_by("-id")[:LANES_PER_WORKER]
            .values_list("id", flat=True)
        )
        for pid in killed
    }
    duplicated = {key for key, n in calls.items() if n > 1}
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for row in ProviderCall.objects.filter(idempotency_key__in=duplicated).values_list(
        "idempotency_key", "id", "pid", "address", "subject", "body"
    ):
        by_key[row[0]].append(row[1:])
    for key, key_calls in by_key.items():
        assert len({c[2:] for c in key_calls}) == 1, "a re-send changed the message: %s" % key
        *lost, _recorded = sorted(key_calls)
        for call_id, pid, *_ in lost:
            assert pid in killed, "a live worker's call of %s was sent again: %s" % (key, key_calls)
            assert call_id in last_calls[pid], "%s re-sent, not in flight: %s" % (key, key_calls)
    extra = sum(calls.values()) - RECIPIENTS
    assert extra <= len(killed) * LANES_PER_WORKER, (extra, len(killed))
    print(
        "\nsigkill: recipients=%s lanes=%s kills=%s extra_calls=%s revived=%s elapsed=%.1fs"
        % (RECIPIENTS, LANES, len(killed), extra, revived.count(), elapsed)
    )


WINDOW = 8
WINDOW_RECIPIENTS = 600
WINDOW_KILLS = 3


def test_sigkill_with_a_window_resends_at_most_the_window_per_kill(send_worker, settings):
    """Lanes with 8 calls in flight, a provider that answers in 20 ms and is not idempotent,
    and 3 SIGKILLs of a worker that is calling it: the batch completes, every recipient has
    one sent marker, and each kill re-sent at most the window, each copy the same message.

    Two workers of concurrency 1 (one lane each) are alive at all times. A copy was
    lost by a kill when a later call of its key exists; the lost calls of a killed
    worker are among its last WINDOW calls (the ones not yet marked when it died).
    """
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_LANES": 2}
    ProviderBehaviour.objects.create(address="", answer="ok", delay=0.02)

    def worker(wait: bool = True):
        return send_worker(claim_seconds=EXPIRY, lease=EXPIRY, window=WINDOW, wait=wait)

    workers = [worker() for _ in range(2)]
    batch = make_batch(WINDOW_RECIPIENTS)
    killed = kill_while_calling(
        batch,
        workers,
        worker,
        kills=WINDOW_KILLS,
        total=WINDOW_RECIPIENTS,
        until=WINDOW_RECIPIENTS * 0.8,
        between=WINDOW_RECIPIENTS // 12,
    )
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=60,
        interval=0.1,
        message="the batch to complete",
    )

    assert len(killed) == WINDOW_KILLS, "the send finished before all kills landed"
    assert_completed_once(batch, WINDOW_RECIPIENTS)
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    rows = ProviderCall.objects.filter(idempotency_key__in=list(calls)).values_list(
        "idempotency_key", "id", "pid", "address", "subject", "body"
    )
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for key, *call in rows:
        by_key[key].append(tuple(call))
    lost_by_pid: dict[int, list[int]] = defaultdict(list)
    for key, key_calls in by_key.items():
        assert len({c[2:] for c in key_calls}) == 1, "a re-send changed the message: %s" % key
        *lost, _recorded = sorted(key_calls)
        for call_id, pid, *_ in lost:
            assert pid in killed, "a live worker's call of %s was sent again: %s" % (key, key_calls)
            lost_by_pid[pid].append(call_id)
    for pid, lost in lost_by_pid.items():
        last_calls = ProviderCall.objects.filter(pid=pid).order_by("-id")[:WINDOW]
        assert len(lost) <= WINDOW, (pid, lost)
        assert set(lost) <= set(last_calls.values_list("id", flat=True)), (pid, lost)
    extra = sum(calls.values()) - WINDOW_RECIPIENTS
    assert extra <= WINDOW_KILLS * WINDOW, (extra, WINDOW_KILLS * WINDOW)
    print("\nsigkill window=%s: kills=%s extra_calls=%s" % (WINDOW, len(killed), extra))
