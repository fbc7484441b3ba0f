"""The email provider and its lanes against a real SMTP server that misbehaves.

A server that stops answering, refuses for reasons that are ours or the
recipient's, or cannot be reached: each must end in the outcome it deserves,
without hanging a lane or charging recipients for what is not their fault.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from scheduler_app import clock
from scheduler_app.alerts.rules import Situation, stalled_send
from scheduler_app.checks.sends import check_message_id_domain
from scheduler_app.clock import FrozenClock, frozen_clock
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.batches import resume_batch
from scheduler_app.sends.providers import (
    PermanentSendError,
    RecipientRefused,
    RefusedAtRcpt,
    SenderRefused,
    SendError,
    SlowDown,
    TransientSendError,
    reset_providers,
)
from scheduler_app.sends.providers import email as email_provider
from scheduler_app.sends.providers.email import DjangoEmailProvider, message_id_for
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import recipient, run_lane_now
from tests.sends.test_email_provider import free_port, smtp_settings

T0 = dt.datetime(2027, 3, 1, 12, 0, tzinfo=dt.UTC)


def scheduler_app(**changes: Any) -> dict[str, Any]:
    """Return the test SCHEDULER_APP setting with ``changes`` applied."""
    return {**django_settings.SCHEDULER_APP, **changes}


def without_email_timeout(port: int) -> dict[str, Any]:
    """Return SMTP settings with Django's default EMAIL_TIMEOUT (None), as most projects have."""
    settings = smtp_settings(port)
    settings.pop("EMAIL_TIMEOUT", None)
    for mailer in settings.get("MAILERS", {}).values():
        mailer["OPTIONS"].pop("timeout")
    return settings


def message(to: str) -> Message:
    return Message(to=to, subject="News", text="Hello.")


@pytest.fixture
def server_factory() -> Iterator[Callable[[object], int]]:
    """Return a function that starts a real SMTP server with a handler; return its port."""
    controllers: list[Controller] = []

    def start(handler: object) -> int:
        port = free_port()
        controller = Controller(handler, hostname="127.0.0.1", port=port)
        controller.start()
        controllers.append(controller)
        return port

    yield start
    for controller in controllers:
        controller.stop()


class StallsFor:
    """Never answers the end of DATA for one recipient (a tarpit, a hung content filter)
    until released; accepts the others at once."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.release = threading.Event()
        self.data_started = threading.Event()
        self.accepted: list[str] = []

    async def handle_DATA(self, server, session, envelope):
        if envelope.rcpt_tos == [self.address]:
            self.data_started.set()
            while not self.release.is_set():
                await asyncio.sleep(0.05)
        self.accepted.extend(envelope.rcpt_tos)
        return "250 OK"


def test_a_server_that_stops_answering_times_out_as_a_transient_error(server_factory):
    """No EMAIL_TIMEOUT: the provider bounds each SMTP operation by SEND_CLAIM_SECONDS / 3."""
    handler = StallsFor("ann@example.com")
    port = server_factory(handler)
    result: list[object] = []

    def call() -> None:
        try:
            with closing(DjangoEmailProvider()) as provider:
                result.append(provider.send(message("ann@example.com"), "1:ann"))
        except Exception as exc:
            result.append(exc)

    with override_settings(
        **without_email_timeout(port),
        DEFAULT_FROM_EMAIL="news@example.com",
        SCHEDULER_APP=scheduler_app(SEND_CLAIM_SECONDS=1.5),
    ):
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        try:
            assert handler.data_started.wait(5)
            thread.join(5)
            assert not thread.is_alive(), "provider.send still blocked after 5 s"
        finally:
            handler.release.set()
            thread.join(5)

    [error] = result
    # It may have been delivered: retried with the same key, an attempt charged.
    assert isinstance(error, TransientSendError), error
    assert str(error) == "SMTPServerDisconnected: Connection unexpectedly closed: timed out"


@pytest.mark.parametrize(("email_timeout", "expected"), [(None, 20.0), (7, 7)])
def test_the_smtp_timeout_is_email_timeout_or_a_third_of_the_claim(email_timeout, expected):
    with override_settings(
        **smtp_settings(free_port(), timeout=email_timeout),
        SCHEDULER_APP=scheduler_app(SEND_CLAIM_SECONDS=60.0),
    ):
        assert DjangoEmailProvider().connection.timeout == expected


@pytest.mark.django_db(transaction=True)
def test_one_stalled_smtp_call_does_not_stop_another_batchs_lane_in_the_worker(
    customer, make_batch, server_factory
):
    """Each lane thread has its own connection: no lane waits for another's SMTP call."""
    handler = StallsFor("stall@example.com")
    port = server_factory(handler)
    customer("stall@example.com", "Sam", plan="a")
    customer("bob@example.com", "Bob", plan="b")
    stalled = make_batch(provider="email", rate_limit_key="a", audience_params={"plan": "a"})
    other = make_batch(provider="email", rate_limit_key="b", audience_params={"plan": "b"})
    threads: list[threading.Thread] = []

    def lane(batch) -> None:
        def run() -> None:
            try:
                run_lane_now(batch)
            finally:
                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    with override_settings(**without_email_timeout(port), DEFAULT_FROM_EMAIL="news@example.com"):
        reset_providers()
        try:
            lane(stalled)
            assert handler.data_started.wait(5)
            lane(other)
            deadline = time.monotonic() + 5
            while "bob@example.com" not in handler.accepted and time.monotonic() < deadline:
                time.sleep(0.05)
            accepted = list(handler.accepted)
        finally:
            handler.release.set()
            for thread in threads:
                thread.join(10)
            reset_providers()

    assert accepted == ["bob@example.com"], "another batch's lane sent nothing in 5 s"


class Refuses:
    """Answers RCPT or the end of DATA with a set reply per recipient; accepts the others."""

    def __init__(self, *, rcpt: dict[str, str] | None = None, data: dict[str, str] | None = None):
        self.rcpt = rcpt or {}
        self.data = data or {}
        self.accepted: list[str] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.rcpt:
            return self.rcpt[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        [address] = envelope.rcpt_tos
        if address in self.data:
            return self.data[address]
        self.accepted.append(address)
        return "250 OK"


def run_batch(batch: SendBatch, port: int, *, resumes: int = 0) -> list[tuple[str, str]]:
    """Run lanes of ``batch`` (resuming it up to ``resumes`` times); return each run's
    (status, reason)."""
    runs = []
    with override_settings(**smtp_settings(port), DEFAULT_FROM_EMAIL="news@example.com"):
        reset_providers()
        try:
            for _ in range(resumes + 1):
                run_lane_now(batch)
                batch.refresh_from_db()
                runs.append((batch.status, batch.status_reason))
                if batch.status != SendBatch.Status.PAUSED:
                    break
                resume_batch(batch.pk)
        finally:
            reset_providers()
    return runs


def statuses(batch: SendBatch) -> dict[str, str]:
    return dict(
        Recipient.objects.filter(batch=batch, is_seed=False).values_list("address", "status")
    )


@pytest.mark.parametrize(
    ("stage", "reply", "expected", "refused"),
    [
        # X.1 addressing, X.2 mailbox: the recipient's status, at RCPT or at DATA.
        ("rcpt", "550 5.1.1 No such user", RecipientRefused, "the recipient ann@example.com"),
        ("data", "552 5.2.2 Mailbox full", RecipientRefused, "the recipient ann@example.com"),
        ("data", "550 5.1.1 No such user", RecipientRefused, "the recipient ann@example.com"),
        (
            "rcpt",
            "452 4.2.2 Mailbox full",
            TransientSendError,
            "the recipient ann@example.com for now",
        ),
        (
            "data",
            "452 4.2.2 Mailbox full",
            TransientSendError,
            "the recipient ann@example.com for now",
        ),
        # X.3 system, X.5 protocol, X.7 security or policy: ours, at RCPT too.
        (
            "rcpt",
            "554 5.7.1 Relay access denied",
            RefusedAtRcpt,
            "us (not the recipient ann@example.com)",
        ),
        (
            "rcpt",
            "550 5.3.0 Mail system full",
            RefusedAtRcpt,
            "us (not the recipient ann@example.com)",
        ),
        ("rcpt", "501 5.5.2 Syntax error", RefusedAtRcpt, "us (not the recipient ann@example.com)"),
        # X.1.7, X.1.8: our sender's address (Postfix answers its sender checks at RCPT).
        (
            "rcpt",
            "553 5.1.8 <news@example.com>: Sender address rejected: Domain not found",
            RefusedAtRcpt,
            "us (not the recipient ann@example.com)",
        ),
        (
            "data",
            "553 5.1.7 Bad sender's mailbox address syntax",
            SenderRefused,
            "the message",
        ),
        ("data", "554 5.7.1 Message rejected as spam", SenderRefused, "the message"),
        # 4xx X.3.x stays transient; no enhanced code (or another subject): by stage.
        (
            "rcpt",
            "451 4.3.2 System not accepting network messages",
            TransientSendError,
            "the recipient ann@example.com for now",
        ),
        ("rcpt", "550 No such user", PermanentSendError, "the recipient ann@example.com"),
        ("rcpt", "550 5.4.4 Unable to route", PermanentSendError, "the recipient ann@example.com"),
        ("data", "554 Transaction failed", SenderRefused, "the message"),
        ("data", "554 5.6.0 Content rejected", SenderRefused, "the message"),
    ],
)
def test_smtp_refusals_are_classified_by_their_enhanced_status_code(
    server_factory, stage, reply, expected, refused
):
    address = "ann@example.com"
    handler = Refuses(**{stage: {address: reply}})
    port = server_factory(handler)

    with (
        override_settings(**smtp_settings(port), DEFAULT_FROM_EMAIL="news@example.com"),
        closing(DjangoEmailProvider()) as provider,
        pytest.raises(SendError) as raised,
    ):
        provider.send(message(address), "1:ann")

    assert type(raised.value) is expected
    assert str(raised.value) == "The SMTP server refused %s: %s" % (refused, reply)


@pytest.mark.django_db
def test_a_server_wide_relay_refusal_pauses_the_batch_instead_of_failing_everyone(
    customer, make_batch, server_factory
):
    """554 5.7.1 Relay access denied on every RCPT is our configuration, not the addresses."""
    relay_denied = "554 5.7.1 Relay access denied"
    addresses = ["ann@example.com", "bob@example.com", "cy@example.com"]
    port = server_factory(Refuses(rcpt=dict.fromkeys(addresses, relay_denied)))
    for address in addresses:
        customer(address)
    batch = make_batch(provider="email", rate_limit_key="email")

    runs = run_batch(batch, port)

    assert runs == [
        (
            "paused",
            "The SMTP server refused us (not the recipient ann@example.com): %s" % relay_denied,
        )
    ]
    assert statuses(batch) == dict.fromkeys(addresses, "pending")
    assert Recipient.objects.filter(batch=batch, attempts__gt=0).count() == 0


@pytest.mark.django_db
def test_one_full_mailbox_refused_at_data_fails_that_recipient_and_the_batch_goes_on(
    customer, make_batch, server_factory
):
    """552 5.2.2 after DATA (a quota check after DATA, as LMTP delivery does) is the
    mailbox's status, not our message's: it must not pause the batch again on every resume."""
    handler = Refuses(data={"full@example.com": "552 5.2.2 Mailbox full, quota exceeded"})
    port = server_factory(handler)
    customer("full@example.com", "Fay")
    customer("bob@example.com", "Bob")
    batch = make_batch(provider="email", rate_limit_key="email")

    runs = run_batch(batch, port, resumes=2)

    assert runs == [("completed", "")]
    assert handler.accepted == ["bob@example.com"]
    assert statuses(batch) == {"full@example.com": "failed", "bob@example.com": "sent"}
    assert recipient_error(batch, "full@example.com") == (
        "RecipientRefused: The SMTP server refused the recipient full@example.com: "
        "552 5.2.2 Mailbox full, quota exceeded"
    )


class ThrottlesOnce:
    """Answers the first RCPT of each address in ``addresses`` with ``reply``; accepts the rest."""

    def __init__(self, reply: str, addresses: set[str]) -> None:
        self.reply = reply
        self.addresses = set(addresses)
        self.accepted: list[str] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.addresses:
            self.addresses.discard(address)
            return self.reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.accepted.extend(envelope.rcpt_tos)
        return "250 OK"


@pytest.mark.django_db
def test_a_421_at_rcpt_slows_the_lane_and_costs_the_recipient_no_attempt(
    customer, make_batch, server_factory
):
    """A 421 at RCPT is the server pacing us: the recipient goes back without using an
    attempt, the lane sits the pause out and sends it again in the same run. Before, it was
    a transient failure of the recipient (an attempt, a backoff of up to 30 s)."""
    handler = ThrottlesOnce("421 4.7.0 Too many messages, closing connection", {"ann@example.com"})
    port = server_factory(handler)
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    batch = make_batch(provider="email", rate_limit_key="email", breaker_window=1)

    runs = run_batch(batch, port)

    assert runs == [("completed", "")]
    assert sorted(handler.accepted) == ["ann@example.com", "bob@example.com"]
    ann = recipient(batch, "ann@example.com")
    assert (ann.status, ann.attempts) == ("sent", 1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("reply", "run"),
    [
        # The recipient's own address or mailbox: no sign the server fails.
        ("550 5.1.1 No such user", ("completed", "")),
        # Routing (X.4.x) may be the server's: it counts.
        (
            "550 5.4.4 Unable to route",
            ("paused", "Automatic breaker: 1 of the last 1 attempts failed (threshold 50%)."),
        ),
    ],
)
def test_only_a_refusal_of_the_address_itself_stays_out_of_the_breaker(
    customer, make_batch, server_factory, reply, run
):
    port = server_factory(Refuses(rcpt={"gone@example.com": reply}))
    customer("gone@example.com")
    customer("bob@example.com")
    batch = make_batch(provider="email", rate_limit_key="email", breaker_window=1)

    assert run_batch(batch, port) == [run]

    assert recipient(batch, "gone@example.com").status == "failed"


def recipient_error(batch: SendBatch, address: str) -> str:
    return Recipient.objects.get(batch=batch, address=address, is_seed=False).last_error


class Keeps:
    """Accepts every message; keeps them and the sessions (connections) they came on."""

    def __init__(self) -> None:
        self.accepted: list[email.message.Message] = []
        self.sessions: list[object] = []
        self.latest: tuple[asyncio.AbstractEventLoop, asyncio.Transport] | None = None

        #: The NOOP commands the server was sent.
        self.noops = 0

    async def handle_DATA(self, server, session, envelope):
        self.accepted.append(email.message_from_bytes(envelope.content))
        if session not in self.sessions:
            self.sessions.append(session)
        self.latest = (asyncio.get_running_loop(), server.transport)
        return "250 OK"

    async def handle_NOOP(self, server, session, envelope, arg):
        self.noops += 1
        return "250 OK"

    def drop(self) -> None:
        """Close the latest connection from the server's side (an idle timeout); return once
        the socket is closed."""
        loop, transport = self.latest

        async def close() -> None:
            transport.close()
            while not transport.is_closing() or transport.get_extra_info("socket").fileno() != -1:
                await asyncio.sleep(0.001)

        asyncio.run_coroutine_threadsafe(close(), loop).result(5)


@pytest.mark.parametrize(
    ("from_email", "domain"),
    [("news@bücher.example", None), ("news@example.com", "bücher.example")],
)
def test_an_idn_domain_gives_an_ascii_message_id_equal_to_the_stored_one(
    server_factory, from_email, domain
):
    """DEFAULT_FROM_EMAIL or MESSAGE_ID_DOMAIN on an IDN domain passes check E030, and
    Django sends the sender as punycode; the Message-ID must be a valid msg-id too (ASCII,
    no encoded-words), the one the provider returns and the marker stores."""
    handler = Keeps()
    port = server_factory(handler)
    with override_settings(
        **smtp_settings(port),
        DEFAULT_FROM_EMAIL=from_email,
        SCHEDULER_APP=scheduler_app(MESSAGE_ID_DOMAIN=domain),
    ):
        assert check_message_id_domain() == []
        with closing(DjangoEmailProvider()) as provider:
            message_id = provider.send(message("ann@example.com"), "7:ann")

    [received] = handler.accepted
    assert message_id == message_id_for("7:ann", domain="xn--bcher-kva.example")
    assert received["Message-ID"] == message_id


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server that accepts connections and never greets; return its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def busy_server() -> Iterator[int]:
    """A server that greets every connection with 421 (overloaded, shutting down)."""
    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            with client:
                client.sendall(b"421 4.3.2 Service not available, closing channel\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def send_through(port: int, host: str = "127.0.0.1") -> str:
    with (
        override_settings(
            **smtp_settings(port, host=host, timeout=None),
            DEFAULT_FROM_EMAIL="news@example.com",
            SCHEDULER_APP=scheduler_app(SEND_CLAIM_SECONDS=1.5),
        ),
        closing(DjangoEmailProvider()) as provider,
    ):
        return provider.send(message("ann@example.com"), "1:ann")


@pytest.mark.parametrize(
    ("server", "host", "error"),
    [
        ("nothing", "127.0.0.1", "ConnectionRefusedError: [Errno 111] Connection refused"),
        (
            "silent_server",
            "127.0.0.1",
            "SMTPServerDisconnected: Connection unexpectedly closed: timed out",
        ),
        ("busy_server", "127.0.0.1", "421 4.3.2 Service not available, closing channel"),
        ("nothing", "mail.invalid", "gaierror: [Errno -2] Name or service not known"),
    ],
)
def test_a_server_that_cannot_be_reached_is_slow_down_nothing_was_sent(
    request, server, host, error
):
    """Refused, timed out before the greeting, 421 greeting, unknown host: no recipient's
    fault, and nothing can have been sent; the lane waits without charging an attempt."""
    port = free_port() if server == "nothing" else request.getfixturevalue(server)

    with pytest.raises(SlowDown) as raised:
        send_through(port, host)

    assert raised.value.delay == dt.timedelta(seconds=30)
    assert str(raised.value) == "The SMTP server cannot be reached: %s" % error


def test_a_lane_reuses_its_connection_and_opens_another_when_the_server_dropped_it(
    server_factory,
):
    handler = Keeps()
    port = server_factory(handler)
    with (
        override_settings(**smtp_settings(port), DEFAULT_FROM_EMAIL="news@example.com"),
        closing(DjangoEmailProvider()) as provider,
    ):
        provider.send(message("ann@example.com"), "1:ann")
        provider.send(message("bob@example.com"), "1:bob")
        handler.drop()
        provider.send(message("cy@example.com"), "1:cy")

    assert [m["To"] for m in handler.accepted] == [
        "ann@example.com",
        "bob@example.com",
        "cy@example.com",
    ]
    assert len(handler.sessions) == 2


def test_a_kept_session_costs_no_round_trip_before_each_message(server_factory):
    """A session in use is known to be alive without asking the server: a NOOP before each
    message cost a round trip and a command at the server per message (#31)."""
    handler = Keeps()
    port = server_factory(handler)
    with (
        override_settings(**smtp_settings(port), DEFAULT_FROM_EMAIL="news@example.com"),
        closing(DjangoEmailProvider()) as provider,
    ):
        for name in ("ann", "bob", "cy", "dee"):
            provider.send(message("%s@example.com" % name), "1:%s" % name)

    assert len(handler.accepted) == 4
    assert len(handler.sessions) == 1
    assert handler.noops == 0


def test_a_session_idle_for_long_is_asked_whether_it_is_still_there(server_factory, monkeypatch):
    """A connection a NAT forgot closes without a word: after ASK_AFTER_IDLE seconds without
    a message, a NOOP comes first."""
    monkeypatch.setattr(email_provider, "ASK_AFTER_IDLE", 0.0)
    handler = Keeps()
    port = server_factory(handler)
    with (
        override_settings(**smtp_settings(port), DEFAULT_FROM_EMAIL="news@example.com"),
        closing(DjangoEmailProvider()) as provider,
    ):
        for name in ("ann", "bob", "cy"):
            provider.send(message("%s@example.com" % name), "1:%s" % name)

    assert len(handler.accepted) == 3
    assert handler.noops == 2


def run_through_an_outage(batch: SendBatch, minutes: int) -> list[dt.timedelta]:
    """Run lanes of ``batch`` against a port nothing listens on, each when the previous one
    asked to run again, for ``minutes`` of time moved on (the clock is frozen); return the
    waits they asked for."""
    waits: list[dt.timedelta] = []
    with override_settings(**smtp_settings(free_port()), DEFAULT_FROM_EMAIL="news@example.com"):
        reset_providers()
        try:
            while sum(waits, dt.timedelta()) < dt.timedelta(minutes=minutes):
                waits.append(run_lane_now(batch).retry.delay)
                FrozenClock().advance(waits[-1])
        finally:
            reset_providers()
    return waits


@pytest.mark.django_db
def test_an_smtp_server_down_for_long_charges_nobody_and_the_lane_waits(customer, make_batch):
    """The relay is down for 20 minutes: no recipient uses up its attempts (5 attempts with
    full-jitter backoff fit in at most 7.5 minutes); the lane waits 30 s at a time."""
    addresses = ["ann@example.com", "bob@example.com", "cy@example.com"]
    for address in addresses:
        customer(address)
    with frozen_clock(T0):
        batch = make_batch(provider="email", rate_limit_key="email")
        waits = run_through_an_outage(batch, minutes=20)

    batch.refresh_from_db()
    assert set(waits) == {dt.timedelta(seconds=30)}
    assert batch.status == "sending"
    assert (
        list(
            Recipient.objects.filter(batch=batch, is_seed=False).values_list(
                "status", "attempts", "last_error"
            )
        )
        == [
            (
                "pending",
                0,
                "The SMTP server cannot be reached: ConnectionRefusedError: [Errno 111] "
                "Connection refused",
            )
        ]
        * 3
    )


@pytest.mark.django_db
def test_a_long_smtp_outage_raises_the_stalled_send_alert(customer, make_batch):
    customer("ann@example.com")
    with frozen_clock(T0):
        batch = make_batch(provider="email", rate_limit_key="email")
        run_through_an_outage(batch, minutes=20)
        findings = stalled_send(Situation(now=clock.now(), schedules=[], targets={}))

    assert [f.subject for f in findings] == ["batch:%s" % batch.pk]


POLICY_BLOCK = "550 5.7.1 Recipient address rejected by policy"


def blocked_by_policy_then_resumed(customer, make_batch, server_factory, server_class):
    """Send to three customers through ``server_class``, which refuses blocked@example.com
    at RCPT by policy, resuming up to twice; check it paused once, then completed with
    only the blocked address failed; return the batch."""
    customer("blocked@example.com")
    customer("ann@example.com")
    customer("bob@example.com")
    port = server_factory(server_class(rcpt={"blocked@example.com": POLICY_BLOCK}))
    batch = make_batch(provider="email", rate_limit_key="email")

    runs = run_batch(batch, port, resumes=2)

    assert [status for status, _ in runs] == ["paused", "completed"]
    assert statuses(batch) == {
        "blocked@example.com": "failed",
        "ann@example.com": "sent",
        "bob@example.com": "sent",
    }
    return batch


@pytest.mark.django_db
def test_one_recipient_blocked_by_policy_at_rcpt_pauses_once_then_fails_alone(
    customer, make_batch, server_factory
):
    """550 5.7.1 on one RCPT names us (it may be a relay denial for everyone): the batch
    pauses. Resumed, the others go first; once the server has taken them, the block is that
    address's own: it fails, and the batch does not pause again at every resume."""
    batch = blocked_by_policy_then_resumed(customer, make_batch, server_factory, Refuses)
    assert recipient(batch, "blocked@example.com").last_error == (
        "The SMTP server refused us (not the recipient blocked@example.com): %s" % POLICY_BLOCK
    )


class RefusesFirst(Refuses):
    """Refuses as Refuses does, and holds each accepted DATA a moment: a refusal at RCPT
    comes back before the calls in flight beside it are accepted."""

    async def handle_DATA(self, server, session, envelope):
        await asyncio.sleep(0.3)
        return await super().handle_DATA(server, session, envelope)


@pytest.mark.django_db
def test_a_recipient_blocked_by_policy_beside_calls_in_flight_pauses_once_then_fails_alone(
    customer, make_batch, server_factory, settings
):
    """A window of calls: the 550 5.7.1 comes back before the server accepts the calls in
    flight beside it, so the batch pauses (it may be a relay denial for everyone), and those
    calls are sent meanwhile. Resumed, the blocked address is the only one left: nothing in
    this run shows the server takes others, but it was refused so before and the server
    took others of the batch since the batch started, so it fails alone. Before, the batch
    paused again at every resume."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_WINDOW": 4}
    batch = blocked_by_policy_then_resumed(customer, make_batch, server_factory, RefusesFirst)
    assert recipient(batch, "blocked@example.com").attempts == 1
