"""Lanes' claims stay live through slow provider calls, kept by one thread per process."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable

import pytest
from django.db import connection

from scheduler_app.db import database_now
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.claim_keeper import ClaimKeeper
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import run_lane_now

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10.0


class HeldProvider:
    """Each call waits until the test lets it go (``release``); ``entered`` counts calls."""

    release = threading.Event()
    entered: list[str] = []

    def send(self, message: Message, idempotency_key: str) -> str:
        HeldProvider.entered.append(idempotency_key)
        assert HeldProvider.release.wait(WAIT), "the test never released the call"
        return "held-%s" % idempotency_key


@pytest.fixture
def held(settings):
    """Send through HeldProvider, with claims of 0.6 s (extended every 0.2 s)."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "PROVIDERS": {
            **settings.SCHEDULER_APP["PROVIDERS"],
            "held": "tests.sends.test_claim_keeper.HeldProvider",
        },
        "SEND_CLAIM_SECONDS": 0.6,
    }
    HeldProvider.release, HeldProvider.entered = threading.Event(), []
    yield HeldProvider
    HeldProvider.release.set()


def poll(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.01)


def keeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "scheduler-claims"]


def in_thread(batch: SendBatch) -> threading.Thread:
    def run() -> None:
        try:
            run_lane_now(batch)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_one_thread_keeps_every_lanes_claims_through_slow_calls(customer, make_batch, held):
    for name in ("ann", "bob"):
        customer("%s@example.com" % name, name.title())
    batches = [make_batch(provider="held") for _ in range(3)]
    lanes = [in_thread(batch) for batch in batches]
    poll(lambda: len(held.entered) == 3, "the three lanes' first calls")
    claimed = Recipient.objects.exclude(claimed_by="")
    first_expiry = max(claimed.values_list("claimed_until", flat=True))

    # Past the claims the lanes took: only their extension keeps them live.
    poll(lambda: database_now() > first_expiry, "the first claims to run out")

    assert claimed.count() == 6  # each lane: the call in flight and the rest of its chunk
    assert claimed.filter(claimed_until__gt=database_now()).count() == 6
    assert len(keeper_threads()) == 1

    held.release.set()
    for lane in lanes:
        lane.join(WAIT)
    assert set(Recipient.objects.values_list("status", "claimed_by")) == {("sent", "")}
    poll(lambda: not keeper_threads(), "the keeper thread to end with the last lane")


def test_a_hung_call_gives_up_its_recipients_claim_and_keeps_the_rest(
    customer, make_batch, held, caplog
):
    for name in ("ann", "bob"):
        customer("%s@example.com" % name, name.title())
    batch = make_batch(provider="held")
    lane = in_thread(batch)
    poll(lambda: len(held.entered) == 1, "the first call")
    ann = Recipient.objects.filter(batch=batch, address="ann@example.com")
    bob = Recipient.objects.filter(batch=batch, address="bob@example.com")

    # IN_FLIGHT_LIMIT claim periods (3 s) into the call, its claim is no longer extended.
    poll(lambda: ann.get().claimed_until < database_now(), "ann's claim to lapse")

    assert bob.get().claimed_until > database_now()
    assert "provider call hangs, its claim is given up recipient=%s" % ann.get().pk in caplog.text
    held.release.set()
    lane.join(WAIT)


@pytest.mark.postgres_only
def test_rows_another_transaction_holds_do_not_hold_up_the_other_lanes_claims(
    customer, make_batch, held, other_connection
):
    """An operator's long transaction holds a row of one lane's chunk: the keeper skips
    that row instead of waiting for it, and goes on extending every other claim."""
    for name in ("ann", "bob"):
        customer("%s@example.com" % name, name.title())
    stuck, other = make_batch(provider="held"), make_batch(provider="held")
    lanes = [in_thread(stuck), in_thread(other)]
    poll(lambda: len(held.entered) == 2, "both lanes' first calls")
    claimed = Recipient.objects.exclude(claimed_by="")
    first_expiry = max(claimed.values_list("claimed_until", flat=True))
    with other_connection() as operator:
        operator.execute(
            "SELECT id FROM scheduler_app_recipient WHERE batch_id = %s AND address = %s "
            "FOR UPDATE",
            [stuck.pk, "bob@example.com"],
        )

        # Two claim periods past the first claims: extended twice since, or lapsed.
        poll(
            lambda: database_now() > first_expiry + dt.timedelta(seconds=0.6),
            "two claim periods",
        )

        live = claimed.filter(claimed_until__gt=database_now())
        assert set(live.values_list("batch_id", "address")) == {
            (stuck.pk, "ann@example.com"),  # its call in flight
            (other.pk, "ann@example.com"),
            (other.pk, "bob@example.com"),
        }
        operator.rollback()
    held.release.set()
    for lane in lanes:
        lane.join(WAIT)
    assert set(Recipient.objects.values_list("status", flat=True)) == {"sent"}


def test_a_forked_child_starts_its_own_keeper_thread(settings):
    """A child forked while the parent's keeper thread runs (a prefork pool) has no such
    thread: its first lane must start one rather than count on the parent's."""
    parent_lane = ClaimKeeper(1, "parent", dt.timedelta(hours=1))
    with parent_lane, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12: fork() with threads
        pid = os.fork()
        if pid == 0:  # the child: no database, no pytest; report through the exit code
            child_lane = ClaimKeeper(1, "child", dt.timedelta(hours=1))
            with child_lane:
                alive = [t for t in keeper_threads() if t.is_alive()]
            os._exit(0 if len(alive) == 1 else 1)
        status = _wait_for_child(pid)

    assert status == 0


def _wait_for_child(pid: int) -> int | None:
    """Return the child's exit code, or None (after killing it) if it hangs."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None
