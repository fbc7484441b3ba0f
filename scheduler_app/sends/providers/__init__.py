"""Providers: one small interface to whatever delivers a message.

``send(message, idempotency_key) -> provider message id``. Raise
TransientSendError to retry that recipient later, PermanentSendError to
fail it (it will never work), RecipientRefused (a PermanentSendError) when
the provider refused the address itself (unknown, invalid, suppressed: the
breaker does not count it), SenderRefused when the fault is ours (sender,
message, credentials: the batch pauses, no recipient is charged), SlowDown
to defer it without using an attempt (HTTP 429).
Providers are named in SCHEDULER_APP['PROVIDERS'] (name -> dotted path).
A provider may keep a connection per thread between sends: a lane's sender
threads (sends.window) each call its optional ``open()`` when they start and
its optional ``close()`` when the lane is done (see in_use()), so an HTTP
provider can keep a pooled session per thread and an SMTP one a session.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any, Protocol

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from scheduler_app.conf import app_settings
from scheduler_app.exceptions import SchedulerError, ValidationError, parse_retry_after
from scheduler_app.sends.rendering import Message


class SendError(SchedulerError):
    """The provider did not accept the message."""

    code = "send_error"


class TransientSendError(SendError):
    """A failure that may pass: retry this recipient later."""

    code = "transient_send_error"


class PermanentSendError(SendError):
    """A failure that will not pass (bad address, rejected content)."""

    code = "permanent_send_error"


class RecipientRefused(PermanentSendError):
    """The provider refused the recipient's address itself (unknown, invalid, suppressed)."""

    code = "recipient_refused"


class SenderRefused(SendError):
    """The provider refused our sender, message or credentials; not the recipient's fault."""

    code = "sender_refused"


class RefusedAtRcpt(SenderRefused):
    """The server refused a recipient for a reason that names us (5xx X.3/X.5/X.7 at RCPT):
    a relay denial refuses everyone (the batch pauses), a policy block only that address.
    A lane that saw the server accept others fails only that recipient."""

    code = "refused_at_rcpt"


class SlowDown(SendError):
    """The provider asks us to wait (e.g. HTTP 429); not the recipient's fault."""

    code = "slow_down"

    def __init__(self, retry_after: str | float | dt.timedelta = 1.0, message: str = "") -> None:
        if isinstance(retry_after, str):
            self.delay = parse_retry_after(retry_after)
        elif isinstance(retry_after, dt.timedelta):
            self.delay = retry_after
        else:
            self.delay = dt.timedelta(seconds=retry_after)
        super().__init__(
            message or "Provider asked to slow down for %ss." % self.delay.total_seconds()
        )


class Provider(Protocol):
    """Delivers one message; the idempotency key is the same on every retry of it."""

    def send(self, message: Message, idempotency_key: str) -> str: ...


@contextlib.contextmanager
def in_use(provider: Provider) -> Iterator[Provider]:
    """Use ``provider`` in this thread for a while, then close what it opened for it."""
    open_ = getattr(provider, "open", None)
    if open_ is not None:
        open_()
    try:
        yield provider
    finally:
        close_connection(provider)


def close_connection(provider: Provider) -> None:
    """Close what ``provider`` opened for the calling thread (its optional ``close()``)."""
    close = getattr(provider, "close", None)
    if close is not None:
        close()


_instances: dict[str, Provider] = {}


def get_provider(name: str) -> Provider:
    """Return the provider named ``name`` in SCHEDULER_APP['PROVIDERS'] (cached)."""
    if name not in _instances:
        try:
            path = app_settings.PROVIDERS[name]
        except KeyError:
            raise ValidationError(
                "Unknown provider %r; SCHEDULER_APP['PROVIDERS'] lists: %s."
                % (name, ", ".join(sorted(app_settings.PROVIDERS)))
            ) from None
        _instances[name] = import_string(path)()
    return _instances[name]


def reset_providers() -> None:
    """Forget provider instances (settings changed)."""
    _instances.clear()


def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "SCHEDULER_APP":
        reset_providers()


# The providers listen themselves, so that conf (below them) need not know them.
setting_changed.connect(_reset_on_change)
