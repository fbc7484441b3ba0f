"""A lane that dies mid-send: markers already written stay, the crash is charged to one recipient.

A crash is staged in this process by a provider that raises a BaseException
(as a SIGKILL would, nothing after the call runs); tests/sends_processes
kills real workers.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection

from scheduler_app import clock
from scheduler_app.database_clock import DatabaseNow
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.providers import SenderRefused
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import recipient, run_lane_job, run_lane_now

pytestmark = pytest.mark.django_db


class WorkerDied(BaseException):
    """Stands for a SIGKILL during a provider call: the provider accepted, nothing else ran."""


class ScriptedProvider:
    """Records calls; dies on the addresses in ``dies_on``; runs ``on_call`` first."""

    calls: list[str] = []
    dies_on: set[str] = set()
    refuses_sender_on: set[str] = set()
    on_call: Callable[[Message, str], None] | None = None

    def send(self, message: Message, idempotency_key: str) -> str:
        if ScriptedProvider.on_call is not None:
            ScriptedProvider.on_call(message, idempotency_key)
        ScriptedProvider.calls.append(message.to)
        if message.to in ScriptedProvider.dies_on:
            raise WorkerDied(message.to)
        if message.to in ScriptedProvider.refuses_sender_on:
            raise SenderRefused("The SMTP server refused our credentials: 535 5.7.8 Bad auth")
        return "scripted-%s" % idempotency_key


class IdempotentProvider(ScriptedProvider):
    """Promises one delivery per idempotency key, so its markers may wait for the chunk."""

    idempotent = True


@pytest.fixture
def scripted(settings):
    """Send through ScriptedProvider; reset its script."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "PROVIDERS": {
            **settings.SCHEDULER_APP["PROVIDERS"],
            "scripted": "tests.sends.test_crashes.ScriptedProvider",
            "idempotent": "tests.sends.test_crashes.IdempotentProvider",
        },
    }
    ScriptedProvider.calls, ScriptedProvider.dies_on, ScriptedProvider.on_call = [], set(), None
    ScriptedProvider.refuses_sender_on = set()
    yield ScriptedProvider
    ScriptedProvider.on_call = None


@pytest.fixture
def five(customer, make_batch, scripted):
    """A scheduled batch of ann, bob, cat, dan and eve (in that id order), one chunk."""
    for name in ("ann", "bob", "cat", "dan", "eve"):
        customer("%s@example.com" % name, name.title())
    return make_batch(provider="scripted")


def expire_claims(batch: SendBatch) -> None:
    """Stage the expiry of a dead lane's claims (as SEND_CLAIM_SECONDS passing would)."""
    Recipient.objects.filter(batch=batch).exclude(claimed_by="").update(
        claimed_until=clock.now() - dt.timedelta(seconds=1)
    )


def states(batch: SendBatch) -> dict[str, tuple[str, int]]:
    return {
        r.address.split("@")[0]: (r.status, r.attempts)
        for r in Recipient.objects.filter(batch=batch)
    }


def test_a_crash_mid_chunk_keeps_the_markers_of_recipients_already_sent(five, scripted):
    scripted.dies_on = {"cat@example.com"}

    with pytest.raises(WorkerDied):
        run_lane_now(five)

    # Sent before the crash: marked, so never sent again. In flight: charged one
    # attempt. Claimed but not reached: no attempt used.
    assert states(five) == {
        "ann": ("sent", 1),
        "bob": ("sent", 1),
        "cat": ("pending", 1),
        "dan": ("pending", 0),
        "eve": ("pending", 0),
    }
    five.refresh_from_db()
    assert (five.status, five.sent) == ("sending", 2)


def test_an_idempotent_provider_gets_its_markers_per_chunk(five, scripted):
    """Same key, one delivery: a crash re-sends the chunk, and the provider drops the copies."""
    SendBatch.objects.filter(pk=five.pk).update(provider="idempotent")
    scripted.dies_on = {"cat@example.com"}

    with pytest.raises(WorkerDied):
        run_lane_now(five)

    # Charged in groups of 1, 2 and 4 in the claim's order (the freeze's: by key as text,
    # so "10" before "9"): every recipient of the groups up to cat's has an attempt.
    order = [r.address.split("@")[0] for r in Recipient.objects.filter(batch=five).order_by("id")]
    charged = next(end for end in (1, 3, 7) if end > order.index("cat"))
    assert states(five) == {
        name: ("pending", 1 if i < charged else 0) for i, name in enumerate(order)
    }
    scripted.dies_on = set()
    expire_claims(five)
    run_lane_now(five)
    five.refresh_from_db()
    assert (five.status, five.sent) == ("completed", 5)


def test_an_idempotent_provider_has_its_attempts_charged_in_growing_groups(five, scripted):
    """One statement charges a group of recipients (1, then 2, then 4...): a crash charges
    the group in flight, whose copies the provider drops (same keys)."""
    SendBatch.objects.filter(pk=five.pk).update(provider="idempotent")
    scripted.dies_on = {"dan@example.com"}

    with pytest.raises(WorkerDied):
        run_lane_now(five)

    # Groups: [ann], [bob, cat], [dan, eve]; the lane died in dan's call.
    assert states(five) == {
        "ann": ("pending", 1),
        "bob": ("pending", 1),
        "cat": ("pending", 1),
        "dan": ("pending", 1),
        "eve": ("pending", 1),
    }
    scripted.dies_on = set()
    expire_claims(five)
    run_lane_now(five)
    five.refresh_from_db()
    assert (five.status, five.sent) == ("completed", 5)
    assert set(Recipient.objects.filter(batch=five).values_list("attempts", flat=True)) == {2}


def test_an_idempotent_provider_refunds_the_attempts_of_a_group_it_did_not_send(five, scripted):
    """Recipients charged with a group but not called (a pause) get their attempt back."""
    SendBatch.objects.filter(pk=five.pk).update(provider="idempotent")

    def pause_at_bob(message: Message, key: str) -> None:
        if message.to == "bob@example.com":
            SendBatch.objects.filter(pk=five.pk).update(status=SendBatch.Status.PAUSED)

    scripted.on_call = pause_at_bob
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler_app.sends.halts.HALT_RECHECK", 0.0)
        run_lane_now(five)

    # Groups: [ann], [bob, cat]; the pause is seen before cat's call.
    assert states(five) == {
        "ann": ("sent", 1),
        "bob": ("sent", 1),
        "cat": ("pending", 0),
        "dan": ("pending", 0),
        "eve": ("pending", 0),
    }


def test_after_a_crash_only_the_recipient_in_flight_is_sent_again(five, scripted):
    scripted.dies_on = {"cat@example.com"}
    with pytest.raises(WorkerDied):
        run_lane_now(five)
    scripted.dies_on = set()
    expire_claims(five)

    run_lane_now(five)

    assert scripted.calls == [
        "ann@example.com",
        "bob@example.com",
        "cat@example.com",
        "dan@example.com",
        "eve@example.com",
        "cat@example.com",
    ]
    five.refresh_from_db()
    assert (five.status, five.sent, five.failed) == ("completed", 5, 0)
    assert recipient(five, "cat@example.com").attempts == 2


def test_kills_that_land_as_lanes_start_do_not_use_up_one_recipients_attempts(
    five, scripted, settings
):
    """A worker SIGKILLed soon after each start (a crash loop, a kill storm) dies in the
    first call of each lane: the recipient whose lane died goes behind the ones not tried
    yet, so the deaths spread over recipients. It came first again, and failed as a death
    after RECIPIENT_MAX_ATTEMPTS runs without ever being delivered."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RECIPIENT_MAX_ATTEMPTS": 3}
    calls_this_run: list[str] = []

    def killed_at_the_first_call(message: Message, key: str) -> None:
        calls_this_run.append(message.to)
        if len(calls_this_run) == 1:
            raise WorkerDied(message.to)

    scripted.on_call = killed_at_the_first_call
    for _ in range(3):
        calls_this_run.clear()
        with pytest.raises(WorkerDied):
            run_lane_now(five)
        expire_claims(five)
    scripted.on_call = None

    run_lane_now(five)

    assert states(five) == {
        "ann": ("sent", 2),
        "bob": ("sent", 2),
        "cat": ("sent", 2),
        "dan": ("sent", 1),
        "eve": ("sent", 1),
    }


@pytest.mark.parametrize(
    ("provider", "most_calls_of_the_others"),
    [
        ("scripted", 1),
        # Its markers wait for the chunk: the recipients sent before cat in the first run
        # are sent again, once. After that crash, that chunk is charged and marked one
        # recipient at a time, so they are not charged again at every crash and do not
        # fail with cat as deaths.
        ("idempotent", 2),
    ],
)
def test_a_recipient_that_crashes_its_lane_every_time_fails_after_its_attempts(
    five, scripted, settings, provider, most_calls_of_the_others
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RECIPIENT_MAX_ATTEMPTS": 3}
    SendBatch.objects.filter(pk=five.pk).update(provider=provider)
    scripted.dies_on = {"cat@example.com"}
    for _ in range(3):
        with pytest.raises(WorkerDied):
            run_lane_now(five)
        expire_claims(five)

    run_lane_now(five)

    assert scripted.calls.count("cat@example.com") == 3
    others = [address for address in scripted.calls if address != "cat@example.com"]
    assert (len(set(others)), max(map(others.count, others))) == (4, most_calls_of_the_others)
    cat = recipient(five, "cat@example.com")
    assert (cat.status, cat.attempts, cat.claimed_by) == ("failed", 3, "")
    assert cat.last_error == (
        "Worker died while sending: 3 attempts without an outcome "
        "(RECIPIENT_MAX_ATTEMPTS is 3); it may have been delivered."
    )
    five.refresh_from_db()
    assert (five.status, five.sent, five.failed) == ("completed", 4, 1)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_lane_error_mid_group_refunds_the_recipients_it_did_not_call(
    five, scripted, other_connection
):
    """The lane's connection is dropped (a failover) while an idempotent provider's group is
    half sent: the markers it holds are written once it reconnects, and the recipients
    charged with the group but never called get their attempt back."""
    SendBatch.objects.filter(pk=five.pk).update(provider="idempotent")
    killer = other_connection(autocommit=True)

    def drop_the_lanes_connection_at_the_second_call(message: Message, key: str) -> None:
        if len(scripted.calls) == 1:  # the first call of the second group (two recipients)
            killer.execute(
                "SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid]
            )

    scripted.on_call = drop_the_lanes_connection_at_the_second_call
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler_app.sends.halts.HALT_RECHECK", 0.0)  # a query per recipient
        with pytest.raises(DatabaseError):
            run_lane_now(five)

    assert len(scripted.calls) == 2
    rows = {r.address: (r.status, r.attempts) for r in Recipient.objects.filter(batch=five)}
    assert {address: rows.pop(address) for address in scripted.calls} == {
        address: ("sent", 1) for address in scripted.calls
    }
    assert set(rows.values()) == {("pending", 0)}  # never called: no attempt used
    scripted.on_call = None
    expire_claims(five)
    run_lane_now(five)
    five.refresh_from_db()
    assert (five.status, five.sent) == ("completed", 5)
    assert set(Recipient.objects.filter(batch=five).values_list("attempts", flat=True)) == {1}


def test_the_lane_never_calls_the_provider_for_a_recipient_it_no_longer_owns(five, scripted):
    """Another worker took over the rest of the chunk (our claim expired): we stop sending."""

    def others_take_over(message: Message, key: str) -> None:
        if message.to == "ann@example.com":
            Recipient.objects.filter(batch=five).exclude(address="ann@example.com").update(
                claimed_by="other-worker", claimed_until=clock.now() + dt.timedelta(hours=1)
            )

    scripted.on_call = others_take_over

    run = run_lane_now(five)

    assert scripted.calls == ["ann@example.com"]
    assert run.retry is not None  # the others' claims: due later
    others = Recipient.objects.filter(batch=five).exclude(address="ann@example.com")
    assert set(others.values_list("claimed_by", "attempts", "status")) == {
        ("other-worker", 0, "pending")
    }


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("scripted", [(5, 5), (4, 4), (3, 3), (2, 2), (1, 1)]),
        # Its markers wait for the chunk's end: the recipients sent stay claimed until then.
        ("idempotent", [(5, 5)] * 5),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_the_lane_keeps_its_claims_while_slow_provider_calls_run(
    five, scripted, settings, provider, expected
):
    """Each call takes more than half the claim; every claim of the lane not yet marked
    stays live throughout.

    The lane's ClaimKeeper thread extends the chunk and the call in flight, so no
    other lane could take a recipient over mid-call, or one sent and not yet marked.
    """
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CLAIM_SECONDS": 0.6}
    SendBatch.objects.filter(pk=five.pk).update(provider=provider)
    seen = []

    def slow_call(message: Message, key: str) -> None:
        time.sleep(0.35)  # a slow provider, not a synchronisation
        pending = Recipient.objects.filter(batch=five, status="pending")
        live = pending.filter(claimed_by__startswith="test:", claimed_until__gt=DatabaseNow())
        seen.append((pending.count(), live.count()))

    scripted.on_call = slow_call

    run_lane_now(five)

    assert seen == expected
    assert set(Recipient.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_a_refused_sender_pauses_the_batch_and_charges_no_recipient(five, scripted):
    scripted.refuses_sender_on = {"bob@example.com"}

    assert run_lane_now(five).counts == {"sent": 1}

    five.refresh_from_db()
    assert (five.status, five.status_reason, five.sent) == (
        "paused",
        "The SMTP server refused our credentials: 535 5.7.8 Bad auth",
        1,
    )
    assert states(five) == {
        "ann": ("sent", 1),
        "bob": ("pending", 0),
        "cat": ("pending", 0),
        "dan": ("pending", 0),
        "eve": ("pending", 0),
    }
    assert not Recipient.objects.filter(batch=five).exclude(claimed_by="").exists()


def test_a_lane_that_keeps_raising_pauses_the_batch_with_the_last_error(five, settings):
    """Not a crash: the lane raises, three times in a row, before marking anyone."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "SUPPRESSION_CHECK": "tests.sends.test_crashes.suppression_service_down",
    }
    for attempt in (1, 2, 3):
        with pytest.raises(RuntimeError):
            run_lane_job(five)
        Recipient.objects.filter(batch=five).update(claimed_by="", claimed_until=None)
        five.refresh_from_db()
        assert five.status == ("paused" if attempt == 3 else "sending")

    assert five.status_reason == (
        "The send stopped after 3 lane errors in a row with nothing sent; "
        "last error: RuntimeError: suppression service down"
    )


def suppression_service_down(addresses, batch):
    raise RuntimeError("suppression service down")


def test_a_batch_whose_audience_cannot_be_frozen_fails_with_the_reason(make_batch, scripted):
    batch = make_batch(provider="scripted", audience="gone")

    assert run_lane_now(batch).counts == {}

    batch.refresh_from_db()
    assert batch.status == "failed"
    assert batch.status_reason.startswith(
        "The audience could not be frozen: Unknown audience 'gone'; registered: "
    )
