"""Kill switches on a running send: pause the batch, pause everything, the automatic breaker."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db.models import Max
from django.utils import timezone

from scheduler_app import controls
from scheduler_app.models import ControlEvent, Job, Recipient, SendBatch
from scheduler_app.sends.batches import pause_batch, resume_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import wait_until
from tests.sends_processes.conftest import (
    CHUNK,
    LANES,
    assert_completed_once,
    assert_stays,
    batch_status,
    call_count,
    calls_by_key,
    check,
    expected_keys,
    lanes_unfinished,
    make_batch,
)
from tests.testapp.models import ProviderBehaviour, ProviderCall

pytestmark = pytest.mark.django_db(transaction=True)

RECIPIENTS = 4000
#: The most provider calls a kill switch may let through: the chunk each lane has in flight.
IN_FLIGHT = LANES * CHUNK


def last_call_at(batch: SendBatch) -> dt.datetime:
    return ProviderCall.objects.filter(idempotency_key__startswith="%s:" % batch.pk).aggregate(
        at=Max("at")
    )["at"]


def lanes_running() -> int:
    return Job.objects.running().filter(task_name=SEND_BATCH_TASK).count()


def assert_resumed_send_completes_once(batch: SendBatch) -> None:
    """The send finishes; each recipient got exactly one provider call and one sent marker."""
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.COMPLETED,
        timeout=60,
        interval=0.1,
        message="the resumed batch to complete",
    )
    assert_completed_once(batch, RECIPIENTS)
    calls = calls_by_key(batch)
    assert set(calls) == expected_keys(batch)
    assert max(calls.values()) == 1, [key for key, n in calls.items() if n > 1][:10]


def test_pause_batch_stops_within_one_chunk_per_lane_and_resume_sends_the_rest_once(send_worker):
    """Pausing at ~10% lets at most the in-flight chunks through; resume finishes, no duplicate."""
    send_worker(), send_worker()
    batch = make_batch(RECIPIENTS)
    wait_until(lambda: call_count(batch) >= RECIPIENTS // 10, timeout=30, message="10% of the send")

    assert pause_batch(batch.pk, reason="Wrong coupon code in the body.")
    paused_at, at_pause = timezone.now(), call_count(batch)
    wait_until(lambda: lanes_unfinished(batch) == 0, timeout=10, message="the lanes to stop")
    stopped = call_count(batch)
    assert_stays(
        lambda: call_count(batch) == stopped,
        seconds=1.5,
        message="a provider call arrived after the lanes stopped",
    )
    batch.refresh_from_db()
    assert (batch.status, batch.status_reason) == (
        SendBatch.Status.PAUSED,
        "Wrong coupon code in the body.",
    )
    assert stopped - at_pause <= IN_FLIGHT
    assert last_call_at(batch) - paused_at < dt.timedelta(seconds=2)
    # Every call so far is recorded: the pause lost nothing and left nothing half-done.
    assert batch.sent == stopped < RECIPIENTS
    assert not Recipient.objects.filter(batch=batch).exclude(claimed_by="").exists()
    assert ControlEvent.objects.filter(
        scope="batch", target=str(batch.pk), action="pause", reason="Wrong coupon code in the body."
    ).exists()
    print(
        "\npause_batch: calls at pause=%s after=%s (bound %s) last call %.3fs after the pause"
        % (
            at_pause,
            stopped,
            at_pause + IN_FLIGHT,
            (last_call_at(batch) - paused_at).total_seconds(),
        )
    )

    assert resume_batch(batch.pk)
    assert_resumed_send_completes_once(batch)


def test_global_kill_switch_stops_a_running_send_within_two_seconds_and_resume_continues(
    send_worker,
):
    """Pausing everything stops the lanes within 2 s and one chunk each; resume sends the rest."""
    send_worker(), send_worker()
    batch = make_batch(RECIPIENTS)
    wait_until(lambda: call_count(batch) >= RECIPIENTS // 10, timeout=30, message="10% of the send")

    assert controls.pause("global", reason="Incident 42: complaints about the last send.")
    paused_at, at_pause = timezone.now(), call_count(batch)
    wait_until(lambda: lanes_running() == 0, timeout=2, message="the lanes to hand back")
    stopped = call_count(batch)
    assert stopped - at_pause <= IN_FLIGHT
    assert last_call_at(batch) - paused_at < dt.timedelta(seconds=2)
    # Longer than a lane's recheck of the switch (halts.PAUSED_RECHECK, 2 s).
    assert_stays(
        lambda: call_count(batch) == stopped and lanes_running() == 0,
        seconds=3,
        message="the send went on while everything was paused",
    )
    batch.refresh_from_db()
    assert batch.status == SendBatch.Status.SENDING  # the batch itself is not paused
    assert batch.sent == stopped < RECIPIENTS
    print(
        "\nglobal pause: calls at pause=%s after=%s (bound %s) last call %.3fs after the pause"
        % (
            at_pause,
            stopped,
            at_pause + IN_FLIGHT,
            (last_call_at(batch) - paused_at).total_seconds(),
        )
    )

    assert controls.resume("global", reason="Incident 42 resolved.")
    assert_resumed_send_completes_once(batch)


@pytest.mark.parametrize(
    "window",
    [
        20,
        CHUNK,
        3 * CHUNK,
    ],
)
def test_provider_failing_every_call_trips_the_breaker_within_its_window(send_worker, window):
    """Every call refused: the breaker pauses the batch after N attempts (+ in-flight chunks)."""
    # A little slow, so both lanes run side by side from the start.
    ProviderBehaviour.objects.create(answer="permanent", delay=0.005)
    send_worker(), send_worker()
    batch = make_batch(2000, breaker_window=window)
    wait_until(
        lambda: batch_status(batch) == SendBatch.Status.PAUSED,
        timeout=30,
        message="the breaker to pause the batch",
    )
    wait_until(lambda: lanes_unfinished(batch) == 0, timeout=10, message="the lanes to stop")
    calls = call_count(batch)
    assert_stays(
        lambda: call_count(batch) == calls,
        seconds=1,
        message="a provider call arrived after the breaker tripped",
    )

    batch.refresh_from_db()
    reason = re.fullmatch(
        r"Automatic breaker: (\d+) of the last (\d+) attempts failed \(threshold 50%\)\.",
        batch.status_reason,
    )
    assert reason and reason[1] == reason[2], batch.status_reason
    check(calls <= window + IN_FLIGHT, "%s calls, bound %s" % (calls, window + IN_FLIGHT))
    # Each refused recipient is failed, once, with the provider's reason; the rest wait.
    assert batch.failed == calls and batch.sent == 0
    failed = Recipient.objects.filter(batch=batch, status=Recipient.Status.FAILED)
    assert set(failed.values_list("last_error", flat=True)) == {
        "PermanentSendError: fake provider: mailbox does not exist"
    }
    assert max(calls_by_key(batch).values()) == 1
    assert ControlEvent.objects.filter(
        scope="batch", target=str(batch.pk), action="pause", reason=batch.status_reason
    ).exists()
    print("\nbreaker window=%s: provider calls=%s (bound %s)" % (window, calls, window + IN_FLIGHT))


@pytest.mark.parametrize("window", [1, 8])
def test_pause_takes_effect_within_two_seconds_with_a_slow_provider(send_worker, window):
    """A provider taking 50 ms a call: pausing just after a chunk started stops calls within
    2 s, with one call in flight per lane or a window of 8."""
    ProviderBehaviour.objects.create(delay=0.05)
    send_worker(window=window)  # one lane at a time
    batch = make_batch(300)

    def chunk_just_started() -> bool:
        # Recipients are marked (and their claims released) one by one as they are sent.
        claimed = Recipient.objects.filter(batch=batch).exclude(claimed_by="").count()
        made = call_count(batch)
        return 3 <= made <= 10 * window and claimed >= CHUNK - made

    wait_until(chunk_just_started, timeout=30, message="a chunk to start")
    assert pause_batch(batch.pk, reason="Stop it.")
    paused_at = timezone.now()
    wait_until(lambda: lanes_unfinished(batch) == 0, timeout=20, message="the lanes to stop")
    late = (last_call_at(batch) - paused_at).total_seconds()
    print("\nslow provider: last call %.3fs after the pause" % late)
    check(late < 2, "the last call came %.3fs after the pause" % late)
