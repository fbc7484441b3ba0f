"""One provider call and the outcome it leads to.

``deliver()`` calls the provider once with the recipient's idempotency key and returns an
Outcome: sent (with the provider's message id), failed (a permanent error, or the last
of RECIPIENT_MAX_ATTEMPTS), or pending again after RECIPIENT_RETRY's backoff: a failure
retries that recipient, never the batch; a refusal of the address itself (RecipientRefused)
fails it without feeding the breaker. A throttling answer (SlowDown) or a refusal of
our sender (SenderRefused) is raised for the lane to handle: neither is the recipient's
fault. The lane writes each Outcome as the recipient's marker (db.<vendor>.mark_recipients).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import describe
from scheduler_app.models import Recipient
from scheduler_app.retry import RetryPolicy
from scheduler_app.sends.providers import (
    PermanentSendError,
    Provider,
    RecipientRefused,
    SenderRefused,
    SlowDown,
    TransientSendError,
)
from scheduler_app.sends.rendering import Message

logger = logging.getLogger("scheduler_app.sends")

#: Recipient retries: full-jitter backoff between attempts of one recipient.
RECIPIENT_RETRY = RetryPolicy(base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1))

Status = Recipient.Status


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one claimed recipient."""

    recipient_id: int
    status: str
    sent_at: dt.datetime | None = None
    message_id: str = ""
    #: The recipient's last error; None keeps the one it has (a hand-back, not an attempt).
    error: str | None = ""
    next_attempt_at: dt.datetime | None = None
    refund: int = 0
    #: False for a refusal of the recipient's own address: no sign the provider is failing,
    #: so the automatic breaker does not count it (sends.breaker).
    feeds_breaker: bool = True

    def as_row(self) -> tuple:
        """Return the row db.<vendor>.mark_recipients() takes."""
        return (
            self.recipient_id,
            self.status,
            self.sent_at,
            self.message_id,
            self.error,
            self.next_attempt_at,
            self.refund,
        )


def deliver(
    provider: Provider, message: Message, key: str, recipient_id: int, attempts: int
) -> Outcome:
    """Call the provider once; raise SlowDown or SenderRefused, else return the outcome."""
    try:
        message_id = provider.send(message, key)
    except (SlowDown, SenderRefused):
        raise
    except PermanentSendError as exc:
        return Outcome(
            recipient_id,
            Status.FAILED,
            error=describe(exc),
            feeds_breaker=not isinstance(exc, RecipientRefused),
        )
    except Exception as exc:  # TransientSendError, or a provider bug: retry this recipient
        error = describe(exc)
        if not isinstance(exc, TransientSendError):
            logger.exception("provider raised an unexpected error key=%s", key)
        if attempts >= app_settings.RECIPIENT_MAX_ATTEMPTS:
            return Outcome(recipient_id, Status.FAILED, error=error)
        return Outcome(
            recipient_id,
            Status.PENDING,
            error=error,
            next_attempt_at=clock.now() + RECIPIENT_RETRY.backoff(attempts),
        )
    return Outcome(recipient_id, Status.SENT, sent_at=clock.now(), message_id=str(message_id))
