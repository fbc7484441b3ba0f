"""The email provider and its lanes against a real SMTP server that misbehaves.

A server that stops answering, refuses for reasons that are ours or the
recipient's, or cannot be reached: each must end in the outcome it deserves,
without hanging a lane or charging recipients for what is not their fault.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from scheduler_app.sends.providers import TransientSendError, reset_providers
from scheduler_app.sends.providers.email import DjangoEmailProvider
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import run_lane_now
from tests.sends.test_email_provider import free_port, smtp_settings


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
        provider = DjangoEmailProvider()
        try:
            result.append(
                provider.send(Message(to="ann@example.com", subject="S", text="T"), "1:ann")
            )
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
