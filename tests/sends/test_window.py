"""A lane's window: several provider calls in flight, paced by the provider's answers, and
no lock on the batch row on a recipient's path."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.providers import SlowDown
from scheduler_app.sends.window import Window
from tests.helpers import wait_until
from tests.sends.helpers import make_due, run_lane_now


class ConcurrentProvider:
    """Accepts a message after holding the call a moment; counts the calls in flight.

    With ``limit``, it answers 429 (SlowDown) to a call that finds more than ``limit``
    calls in flight, as an ESP with a concurrency limit does.
    """

    limit: int | None = None

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.accepted: list[str] = []
        self.throttled = 0

    def send(self, message, idempotency_key):
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            over = self.limit is not None and self.in_flight > self.limit
        try:
            self.answer_time()
            if over:
                with self.lock:
                    self.throttled += 1
                raise SlowDown(0.05, "429 Too Many Requests")
            with self.lock:
                self.accepted.append(idempotency_key)
            return "id-%s" % idempotency_key
        finally:
            with self.lock:
                self.in_flight -= 1

    def answer_time(self) -> None:
        threading.Event().wait(0.02)  # the provider's answer time, not a synchronisation


class GatedProvider(ConcurrentProvider):
    """Holds every call until ``gate`` is set."""

    gate = threading.Event()

    def answer_time(self) -> None:
        self.gate.wait(timeout=30)


class LimitedProvider(ConcurrentProvider):
    """An ESP that allows two calls at once and throttles the rest."""

    limit = 2


@pytest.fixture
def provider_named(settings):
    """Return a function that registers ``cls`` as the provider "test" and returns it."""

    def register(cls, **options):
        settings.SCHEDULER_APP = {
            **settings.SCHEDULER_APP,
            "PROVIDERS": {
                **settings.SCHEDULER_APP.get("PROVIDERS", {}),
                "test": "%s.%s" % (cls.__module__, cls.__qualname__),
            },
            **options,
        }
        from scheduler_app.sends.providers import get_provider

        return get_provider("test")

    return register


def customers(customer, count: int) -> None:
    for n in range(count):
        customer("c%s@example.com" % n, "C%s" % n)


@pytest.mark.django_db
def test_a_lane_keeps_up_to_the_window_of_calls_in_flight(customer, make_batch, provider_named):
    provider = provider_named(ConcurrentProvider, SEND_WINDOW=4)
    customers(customer, 12)
    batch = make_batch(provider="test")

    run_lane_now(batch)

    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 12)
    assert provider.most == 4
    keys = Recipient.objects.filter(batch=batch).values_list("recipient_key", flat=True)
    assert sorted(provider.accepted) == sorted("%s:%s" % (batch.pk, key) for key in keys)
    # Each recipient was charged its one attempt before its call, and marked after it.
    assert set(Recipient.objects.filter(batch=batch).values_list("status", "attempts")) == {
        ("sent", 1)
    }


@pytest.mark.django_db
def test_throttling_answers_shrink_the_window_and_cost_no_recipient_anything(
    customer, make_batch, provider_named
):
    """An ESP that allows two calls at once answers 429 to the others: the lane slows down
    to the provider's pace, no throttled recipient is charged an attempt or fails, and the
    breaker (4 attempts, 20 %) never trips on throttling."""
    provider = provider_named(LimitedProvider, SEND_WINDOW=8)
    customers(customer, 40)
    batch = make_batch(provider="test", breaker_window=4, breaker_threshold=0.2)

    for _ in range(100):
        run_lane_now(batch)
        batch.refresh_from_db()
        if batch.status != SendBatch.Status.SENDING:
            break
        make_due(batch)  # the throttled recipients' short wait has passed

    assert (batch.status, batch.sent, batch.failed, batch.status_reason) == (
        "completed",
        40,
        0,
        "",
    )
    assert set(Recipient.objects.filter(batch=batch).values_list("status", "attempts")) == {
        ("sent", 1)
    }
    # A window that stayed at 8 is throttled about twice per recipient sent (86 here). One
    # that halves is throttled about once per three to five recipients once it has shrunk
    # (14-23 seen, the spread from the calls' timing): fewer answers than recipients.
    assert provider.throttled < 40, provider.throttled


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres_only
def test_lanes_mark_recipients_while_another_transaction_holds_the_batch_row(
    customer, make_batch, provider_named
):
    """No statement on a recipient's path locks the batch row: with it locked elsewhere
    (an operator's status change, another lane's commit), a lane still sends and marks."""
    provider = provider_named(GatedProvider, SEND_WINDOW=4)
    provider.gate.clear()
    customers(customer, 10)
    batch = make_batch(provider="test")
    holder = connections.create_connection("default")
    lane = threading.Thread(target=lambda: (run_lane_now(batch), connection.close()))
    lane.start()
    try:
        # The lane has started the batch and is in its first chunk, its calls held.
        wait_until(lambda: provider.in_flight == 4, timeout=20, message="4 calls in flight")
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(
                "SELECT id FROM scheduler_app_sendbatch WHERE id = %s FOR NO KEY UPDATE",
                [batch.pk],
            )
            provider.gate.set()
            wait_until(
                lambda: Recipient.objects.filter(batch=batch, status="sent").count() == 10,
                timeout=20,
                message="the lane to mark every recipient while the batch row is locked",
            )
            cursor.execute("ROLLBACK")
    finally:
        provider.gate.set()
        holder.close()
        lane.join(timeout=30)
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 10)


def test_a_provider_that_answers_at_once_is_called_on_the_lanes_thread():
    """Handing an instant call to a sender thread costs more than the call: after 50 fast
    calls in a row the window makes them on the lane's thread, until one is slow."""
    callers = []

    def call(seconds: float = 0.0):
        callers.append(threading.get_ident())
        if seconds:
            threading.Event().wait(seconds)  # a slow answer, not a synchronisation
        return "ok"

    with Window(ConcurrentProvider(), 8) as window:
        for n in range(60):
            window.submit(n, call)
            while window.in_flight:
                window.done(wait=1)
        assert callers[0] != threading.get_ident()
        assert set(callers[-5:]) == {threading.get_ident()}
        window.submit("slow", lambda: call(0.01))
        assert [tag for tag, _result, _exc in window.done(wait=1)] == ["slow"]
        window.submit("next", call)
        window.done(wait=1)
        assert callers[-1] != threading.get_ident()  # back on a sender thread


def test_the_window_halves_once_a_round_of_throttling_and_grows_one_call_a_window_accepted():
    """The sizing rule the lane relies on, without timing: a throttling answer halves the
    window once per round of calls (the provider's delay), and a window's worth of accepted
    calls grows it by one, up to the limit."""
    window = Window(ConcurrentProvider(), 8)
    assert window.throttled(60) is True
    assert window.size == 4
    assert window.throttled(60) is False  # the same round's other answers
    assert window.size == 4
    assert window.throttled(0) is True  # an answer whose round has passed
    assert window.size == 2
    for _ in range(2):
        window.accepted()
    assert window.size == 3
    for _ in range(3 + 4 + 5 + 6 + 7 + 8):
        window.accepted()
    assert window.size == 8  # never past SEND_WINDOW
