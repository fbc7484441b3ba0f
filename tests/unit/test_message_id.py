"""Message-IDs do not depend on the host: the idempotency key and MESSAGE_ID_DOMAIN decide.

A re-send of a recipient after a crash, from another worker host, must
carry the same Message-ID so that mailbox providers fold the copies.
"""

from __future__ import annotations

import hashlib
import socket

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.core.mail.utils import DNS_NAME
from django.test import override_settings

from scheduler_app.checks.sends import check_message_id_domain
from scheduler_app.sends.providers.email import DjangoEmailProvider, message_id_for
from scheduler_app.sends.rendering import Message

DIGEST = hashlib.sha256(b"7:ann").hexdigest()[:40]


def scheduler_app_settings(**changes):
    """Return the test SCHEDULER_APP setting with ``changes`` applied."""
    return {**django_settings.SCHEDULER_APP, **changes}


def on_host(monkeypatch, name: str) -> None:
    """Make this process look like it runs on host ``name``."""
    monkeypatch.setattr(socket, "getfqdn", lambda *args: name)
    monkeypatch.setattr(DNS_NAME, "_fqdn", name, raising=False)


def sent_message_id(key: str) -> str:
    DjangoEmailProvider().send(Message(to="ann@example.com", subject="News", text="Hi."), key)
    return mail.outbox[-1].message()["Message-ID"]


@override_settings(DEFAULT_FROM_EMAIL="Spring News <news@mail.example.com>")
def test_the_message_id_is_the_same_from_every_host(monkeypatch):
    on_host(monkeypatch, "worker-a.internal")
    from_a = (message_id_for("7:ann"), sent_message_id("7:ann"))
    on_host(monkeypatch, "worker-b.internal")
    from_b = (message_id_for("7:ann"), sent_message_id("7:ann"))

    assert from_a == from_b == ("<%s@mail.example.com>" % DIGEST,) * 2


def test_message_id_domain_overrides_the_sender_domain(monkeypatch, settings):
    on_host(monkeypatch, "worker-a.internal")
    settings.DEFAULT_FROM_EMAIL = "news@example.com"
    settings.SCHEDULER_APP = scheduler_app_settings(MESSAGE_ID_DOMAIN="ids.example.org")

    assert message_id_for("7:ann") == "<%s@ids.example.org>" % DIGEST
    assert message_id_for("7:ann", domain="other.example") == "<%s@other.example>" % DIGEST


@pytest.mark.parametrize(
    "domain", ["", "exa mple.com", "-bad.example.com", "mail..example.com", "a" * 64 + ".com", 42]
)
def test_an_implausible_message_id_domain_is_e030(domain):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(MESSAGE_ID_DOMAIN=domain)):
        errors = check_message_id_domain()

    assert [(error.id, error.msg) for error in errors] == [
        (
            "scheduler_app.E030",
            "SCHEDULER_APP['MESSAGE_ID_DOMAIN'] must be a domain name such as "
            "'mail.example.com', not %r." % (domain,),
        )
    ]


def test_a_default_from_email_without_a_domain_is_e030_with_a_hint():
    with override_settings(DEFAULT_FROM_EMAIL="noreply"):
        errors = check_message_id_domain()

    assert [(error.id, error.msg, error.hint) for error in errors] == [
        (
            "scheduler_app.E030",
            "Message-IDs take their domain from DEFAULT_FROM_EMAIL ('noreply'), which has none.",
            "Set SCHEDULER_APP['MESSAGE_ID_DOMAIN'] (e.g. 'mail.example.com').",
        )
    ]


@pytest.mark.parametrize("domain", ["localhost", "mail.example.com", "bücher.example", None])
def test_plausible_domains_pass(domain):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(MESSAGE_ID_DOMAIN=domain)):
        assert check_message_id_domain() == []
