"""The email provider against a real SMTP server: whose fault each refusal is.

A refusal of the recipient (5xx on RCPT, an address Django cannot build a
message for) fails that recipient for good; a refusal of the sender, the
message or our credentials is SenderRefused (the batch pauses, no
recipient is charged); 4xx is transient; a server that cannot be reached
is SlowDown (nothing was sent: the lane waits, no recipient is charged).
"""

from __future__ import annotations

import email
import socket
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import django
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from django.test import override_settings

from scheduler_app.sends.providers import (
    PermanentSendError,
    RecipientRefused,
    SenderRefused,
    SlowDown,
    TransientSendError,
)
from scheduler_app.sends.providers.email import (
    THROTTLED_DELAY,
    DjangoEmailProvider,
    message_id_for,
)
from scheduler_app.sends.rendering import Message

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


class Handler:
    """Answers like a strict mail server; keeps what it accepted."""

    def __init__(self) -> None:
        self.accepted: list[email.message.Message] = []
        self.rcpt_seen: list[str] = []

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if address.startswith("blocked@"):
            return "553 5.7.1 Sender address rejected: not owned by you"
        if address.startswith("rated@"):
            return "421 4.7.0 Rate limit exceeded, closing connection"
        envelope.mail_from = address
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        self.rcpt_seen.append(address)
        if address.startswith("gone@"):
            return "550 5.1.1 No such user"
        if address.startswith("busy@"):
            return "451 4.3.0 Mailbox busy, try again later"
        if address.startswith("rated@"):
            return "421 4.7.0 Too many messages from your IP, closing connection"
        if address.startswith("hourly@"):
            return "451 4.7.1 Recipient rate limit exceeded, try again later"
        if address.startswith("closing@"):
            return "421 Service not available, closing transmission channel"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        parsed = email.message_from_bytes(envelope.content)
        if parsed["Subject"] == "Spam":
            return "554 5.7.1 Message rejected as spam"
        if parsed["Subject"] == "Later":
            return "452 4.3.1 Insufficient system storage"
        if parsed["Subject"] == "Throttled":
            return "451 4.7.0 Too many messages, slow down"
        self.accepted.append(parsed)
        return "250 Message accepted"


def authenticate(server, session, envelope, mechanism, auth_data) -> AuthResult:
    ok = auth_data.login == b"sender" and auth_data.password == b"right"
    # handled=False: aiosmtpd answers a refusal with its own 535.
    return AuthResult(success=ok, handled=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def smtp_server() -> Iterator[tuple[Handler, int]]:
    """A real SMTP server on 127.0.0.1 (AUTH offered without TLS, as a relay in a LAN does)."""
    handler = Handler()
    port = free_port()
    controller = Controller(
        handler,
        hostname="127.0.0.1",
        port=port,
        authenticator=authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield handler, port
    finally:
        controller.stop()


def smtp_settings(port: int, **extra: Any) -> dict[str, Any]:
    """Return settings that send through Django's SMTP backend to 127.0.0.1:port."""
    options = {"host": "127.0.0.1", "port": port, "timeout": 5, **extra}
    if django.VERSION >= (6, 1):
        return {"MAILERS": {"default": {"BACKEND": SMTP_BACKEND, "OPTIONS": options}}}
    return {
        "EMAIL_BACKEND": SMTP_BACKEND,
        "EMAIL_HOST": options["host"],
        "EMAIL_PORT": options["port"],
        "EMAIL_TIMEOUT": options["timeout"],
        "EMAIL_HOST_USER": options.get("username", ""),
        "EMAIL_HOST_PASSWORD": options.get("password", ""),
    }


def send(port: int, to: str, subject: str = "News", **extra: Any) -> str:
    with (
        override_settings(
            DEFAULT_FROM_EMAIL=extra.pop("from_email", "news@example.com"),
            **smtp_settings(port, **extra),
        ),
        closing(DjangoEmailProvider()) as provider,
    ):
        return provider.send(Message(to=to, subject=subject, text="Hello."), "7:%s" % to)


def test_an_accepted_message_reaches_the_server_with_its_message_id(smtp_server):
    handler, port = smtp_server

    message_id = send(port, "ann@example.com")

    # The domain of DEFAULT_FROM_EMAIL (news@example.com), never the host's.
    assert message_id == message_id_for("7:ann@example.com", domain="example.com")
    [received] = handler.accepted
    assert (received["To"], received["Message-ID"], received["Idempotency-Key"]) == (
        "ann@example.com",
        message_id,
        "7:ann@example.com",
    )


def test_550_on_rcpt_is_permanent_for_that_recipient(smtp_server):
    handler, port = smtp_server

    with pytest.raises(PermanentSendError) as raised:
        send(port, "gone@example.com")

    assert type(raised.value) is RecipientRefused
    assert str(raised.value) == (
        "The SMTP server refused the recipient gone@example.com: 550 5.1.1 No such user"
    )
    assert handler.accepted == []


def test_4xx_on_rcpt_is_transient(smtp_server):
    _, port = smtp_server

    with pytest.raises(TransientSendError) as raised:
        send(port, "busy@example.com")

    assert str(raised.value) == (
        "The SMTP server refused the recipient busy@example.com for now: "
        "451 4.3.0 Mailbox busy, try again later"
    )


@pytest.mark.parametrize(
    "address",
    # user@localhost too: the dry-run's rule (sends.addresses), which Django's validator
    # would let through.
    ["two@at@example.com", "ann@", "ann@exa mple.com", "ann", "user@localhost", "a..b@x.com"],
)
def test_an_address_that_cannot_be_valid_is_permanent_and_never_reaches_the_server(
    smtp_server, address
):
    handler, port = smtp_server

    with pytest.raises(RecipientRefused) as raised:
        send(port, address)

    assert str(raised.value) == "The address %r is not a valid email address." % address
    assert handler.rcpt_seen == []


def test_535_on_auth_is_sender_refused_not_the_recipients_fault(smtp_server):
    handler, port = smtp_server
    message = Message(to="ann@example.com", subject="News", text="Hello.")

    with (
        override_settings(**smtp_settings(port, username="sender", password="wrong")),
        closing(DjangoEmailProvider()) as provider,
    ):
        with pytest.raises(SenderRefused) as raised:
            provider.send(message, "7:ann")
        assert str(raised.value) == (
            "The SMTP server refused our credentials: 535 5.7.8 Authentication credentials invalid"
        )
        assert handler.rcpt_seen == []
        # Fixed credentials go through (and close the half-open connection of the refusal).
        provider.connection.password = "right"
        provider.send(message, "7:ann")

    assert len(handler.accepted) == 1


def test_5xx_on_mail_from_is_sender_refused(smtp_server):
    _, port = smtp_server

    with pytest.raises(SenderRefused) as raised:
        send(port, "ann@example.com", from_email="blocked@example.com")

    assert str(raised.value) == (
        "The SMTP server refused the sender blocked@example.com: "
        "553 5.7.1 Sender address rejected: not owned by you"
    )


def test_554_on_data_is_sender_refused(smtp_server):
    _, port = smtp_server

    with pytest.raises(SenderRefused) as raised:
        send(port, "ann@example.com", subject="Spam")

    assert str(raised.value) == (
        "The SMTP server refused the message: 554 5.7.1 Message rejected as spam"
    )


def test_4xx_on_data_is_transient(smtp_server):
    _, port = smtp_server

    with pytest.raises(TransientSendError) as raised:
        send(port, "ann@example.com", subject="Later")

    assert str(raised.value) == (
        "The SMTP server refused the message for now: 452 4.3.1 Insufficient system storage"
    )


@pytest.mark.parametrize(
    ("extra", "reply"),
    [
        ({"subject": "Throttled"}, "451 4.7.0 Too many messages, slow down"),
        ({"from_email": "rated@example.com"}, "421 4.7.0 Rate limit exceeded, closing connection"),
    ],
)
def test_a_throttling_answer_at_mail_or_data_is_slow_down_not_the_recipients_fault(
    smtp_server, extra, reply
):
    """421, or 4xx X.7.x (policy) at MAIL FROM or DATA: the server paces us, the lane slows."""
    _, port = smtp_server

    with pytest.raises(SlowDown) as raised:
        send(port, "ann@example.com", **extra)

    assert str(raised.value) == "The SMTP server asks us to slow down: %s" % reply
    assert raised.value.delay == THROTTLED_DELAY


@pytest.mark.parametrize(
    ("address", "reply"),
    [
        ("rated@example.com", "421 4.7.0 Too many messages from your IP, closing connection"),
        ("hourly@example.com", "451 4.7.1 Recipient rate limit exceeded, try again later"),
        ("closing@example.com", "421 Service not available, closing transmission channel"),
    ],
)
def test_a_throttling_answer_at_rcpt_is_slow_down_not_the_recipients_fault(
    smtp_server, address, reply
):
    """421 (the server closes the session), or 4xx X.7.x (a policy such as a rate), at RCPT:
    the server paces us, as at MAIL FROM or DATA. It was a transient failure charged to the
    recipient: five throttles failed it for good."""
    handler, port = smtp_server

    with pytest.raises(SlowDown) as raised:
        send(port, address)

    assert str(raised.value) == "The SMTP server asks us to slow down: %s" % reply
    assert raised.value.delay == THROTTLED_DELAY
    assert handler.accepted == []


def test_no_server_listening_is_slow_down_not_the_recipients_fault():
    with pytest.raises(SlowDown) as raised:
        send(free_port(), "ann@example.com")

    assert str(raised.value) == (
        "The SMTP server cannot be reached: ConnectionRefusedError: [Errno 111] Connection refused"
    )


def test_sender_refused_is_a_send_error_but_neither_transient_nor_permanent():
    assert not issubclass(SenderRefused, TransientSendError | PermanentSendError)
    assert SenderRefused().message == (
        "The provider refused our sender, message or credentials; not the recipient's fault."
    )
