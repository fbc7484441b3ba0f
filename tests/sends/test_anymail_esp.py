"""The email provider through django-anymail's real Postmark backend and a fake ESP:
each answer mapped by what the provider meant (#33)."""

from __future__ import annotations

from contextlib import closing

import django
import pytest
from django.test import override_settings

from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.providers import (
    RecipientRefused,
    SenderRefused,
    SlowDown,
    TransientSendError,
    reset_providers,
)
from scheduler_app.sends.providers.email import DjangoEmailProvider
from scheduler_app.sends.rendering import Message
from tests.sends.fake_esp import FakeEsp
from tests.sends.helpers import run_lane_now

POSTMARK = "anymail.backends.postmark.EmailBackend"


def mail_settings(backend: str, **anymail: str) -> dict:
    """Return settings sending through ``backend`` (MAILERS on Django 6.1+)."""
    if django.VERSION >= (6, 1):
        return {"MAILERS": {"default": {"BACKEND": backend}}, "ANYMAIL": anymail}
    return {"EMAIL_BACKEND": backend, "ANYMAIL": anymail}


@pytest.fixture
def esp():
    with FakeEsp() as server:
        yield server


def postmark(esp: FakeEsp) -> dict:
    """Return settings sending through anymail's Postmark backend to the fake ESP."""
    return mail_settings(POSTMARK, POSTMARK_SERVER_TOKEN="test-token", POSTMARK_API_URL=esp.url)


def send(esp: FakeEsp, to: str) -> str:
    with override_settings(**postmark(esp)), closing(DjangoEmailProvider()) as provider:
        return provider.send(Message(to=to, subject="News", text="Hello."), "7:%s" % to)


def run_batch(esp: FakeEsp, batch: SendBatch) -> tuple[str, str]:
    """Run a lane of ``batch`` in this process through the fake ESP; return its
    (status, reason)."""
    with override_settings(**postmark(esp), DEFAULT_FROM_EMAIL="news@example.com"):
        reset_providers()
        try:
            run_lane_now(batch)
        finally:
            reset_providers()
    batch.refresh_from_db()
    return batch.status, batch.status_reason


def markers(batch: SendBatch) -> dict[str, tuple[str, int]]:
    return {
        address: (status, attempts)
        for address, status, attempts in Recipient.objects.filter(batch=batch).values_list(
            "address", "status", "attempts"
        )
    }


def test_an_accepted_message_returns_the_esps_message_id(esp):
    message_id = send(esp, "ok@example.com")
    assert len(message_id) == 36  # Postmark's MessageID, which its tracking events name
    assert esp.answers == [("ok@example.com", 200)]


@pytest.mark.parametrize(
    ("to", "expected", "text"),
    [
        (
            "throttled@example.com",
            SlowDown,
            "The ESP asks us to slow down: HTTP 429: ",
        ),
        (
            "badkey@example.com",
            SenderRefused,
            "The ESP refused our credentials or account: HTTP 401: ",
        ),
        (
            "forbidden@example.com",
            SenderRefused,
            "The ESP refused our credentials or account: HTTP 403: ",
        ),
        (
            "refused@example.com",
            RecipientRefused,
            "The ESP refused the recipient refused@example.com: ",
        ),
        ("broken@example.com", TransientSendError, "The ESP failed (HTTP 500): "),
    ],
)
def test_each_esp_answer_means_what_the_provider_meant(esp, to, expected, text):
    """429: slow down (nobody's fault); 401: our key (the batch pauses); a refused recipient:
    that recipient, for good; 5xx: may pass. Before, anymail's errors were an OSError
    (transient) or a ValueError (permanent) whatever the ESP meant."""
    with pytest.raises(expected) as raised:
        send(esp, to)
    assert type(raised.value) is expected
    assert str(raised.value).startswith(text)
    if expected is SlowDown:
        assert raised.value.delay.total_seconds() == 1  # the ESP's Retry-After


def test_an_address_anymail_cannot_encode_is_permanent_and_never_reaches_the_esp(esp):
    """``☃.com`` passes Django's validator (IDNA 2003) but not anymail's IDNA 2008 encoder:
    AnymailInvalidAddress (a ValueError) before any call, that recipient's for good."""
    with pytest.raises(RecipientRefused) as raised:
        send(esp, "ann@☃.com")

    assert type(raised.value) is RecipientRefused
    assert str(raised.value).startswith(
        "The ESP refused the recipient ann@☃.com: Cannot encode '☃.com' using "
        "IDNA_ENCODER='idna2008'"
    )
    assert esp.answers == []


@pytest.mark.django_db
def test_a_403_pauses_the_batch_with_the_esps_reason_and_charges_nobody(esp, customer, make_batch):
    """403 (a suspended account) is ours, like 401: the batch pauses, no recipient is
    charged, and the reason carries what the ESP said (it was cut at anymail's first line,
    "Postmark API response 403 (Forbidden):", without the ESP's message)."""
    customer("forbidden1@example.com")
    customer("forbidden2@example.com")
    batch = make_batch(provider="email", rate_limit_key="email")

    status, reason = run_batch(esp, batch)

    assert status == SendBatch.Status.PAUSED
    assert reason == (
        "The ESP refused our credentials or account: HTTP 403: Postmark API response 403 "
        '(Forbidden): { "ErrorCode": 403, "Message": "This account is suspended." }'
    )
    assert markers(batch) == {
        "forbidden1@example.com": ("pending", 0),
        "forbidden2@example.com": ("pending", 0),
    }


@pytest.mark.django_db
def test_an_invalid_address_fails_once_and_the_batch_completes(esp, customer, make_batch):
    customer("ann@☃.com")
    customer("ok@example.com")
    batch = make_batch(provider="email", rate_limit_key="email")

    assert run_batch(esp, batch) == (SendBatch.Status.COMPLETED, "")

    assert markers(batch) == {"ann@☃.com": ("failed", 1), "ok@example.com": ("sent", 1)}
    assert esp.answers == [("ok@example.com", 200)]


@pytest.mark.django_db
def test_a_recipient_the_esp_refuses_fails_once_without_feeding_the_breaker(
    esp, customer, make_batch
):
    """The ESP refusing one address (on its suppression list) says nothing of the ESP: with a
    breaker that trips at the first counted failure, the batch still completes. It tripped."""
    customer("refused@example.com")
    customer("ok@example.com")
    batch = make_batch(provider="email", rate_limit_key="email", breaker_window=1)

    assert run_batch(esp, batch) == (SendBatch.Status.COMPLETED, "")

    assert markers(batch) == {"refused@example.com": ("failed", 1), "ok@example.com": ("sent", 1)}


def test_a_backend_without_metadata_sends_without_it(esp):
    """anymail's Postal backend refuses metadata (before any call): the message goes
    without it, and so do the next ones; feedback ties back by the ESP's message id. Before,
    every message failed for good as "could not be built"."""
    with (
        override_settings(
            **mail_settings(
                "anymail.backends.postal.EmailBackend", POSTAL_API_KEY="key", POSTAL_API_URL=esp.url
            )
        ),
        closing(DjangoEmailProvider()) as provider,
    ):
        first = provider.send(Message(to="ann@example.com", subject="News", text="Hi."), "7:a")
        second = provider.send(Message(to="bob@example.com", subject="News", text="Hi."), "7:b")
    assert (first, second) == ("42", "42")
    assert [body["to"] for body in esp.postal_requests] == [
        ["ann@example.com"],
        ["bob@example.com"],
    ]
    assert provider.without_metadata is True
