"""What an ESP's answer through django-anymail meant: whose fault, and what happens next.

django-anymail turns an ESP's HTTP answers into its own exceptions, whose base
classes say nothing of whose fault they are (``AnymailRequestsAPIError`` is an
``OSError``, ``AnymailInvalidAddress`` a ``ValueError``). The email provider
asks this module first: 429 slows the lane down (nobody is charged), 401/403
are ours (the batch pauses), a refused or invalid recipient is that recipient's
for good (RecipientRefused: the breaker does not count it), other 4xx answers
fail that recipient for good, 5xx and network errors may pass.
Without django-anymail installed, nothing here applies.
"""

from __future__ import annotations

import datetime as dt

from scheduler_app.exceptions import parse_retry_after
from scheduler_app.sends.providers import (
    PermanentSendError,
    RecipientRefused,
    SenderRefused,
    SendError,
    SlowDown,
    TransientSendError,
)

try:
    from anymail import exceptions as anymail
except ImportError:  # django-anymail is optional
    anymail = None

#: How long a lane pauses after a 429 that says nothing of when to come back.
THROTTLED_DELAY = dt.timedelta(seconds=1)
#: The most of an ESP's error text kept on a recipient or a pause's reason (anymail adds
#: the whole response).
ERROR_TEXT = 300


def esp_error(exc: BaseException, address: str) -> SendError | None:
    """Return the SendError that ``exc`` (raised by a django-anymail backend) means, or None
    if it is not anymail's."""
    if anymail is None or not isinstance(exc, anymail.AnymailError):
        return None
    text = _text(exc)
    if isinstance(exc, anymail.AnymailRecipientsRefused | anymail.AnymailInvalidAddress):
        return RecipientRefused("The ESP refused the recipient %s: %s" % (address, text))
    if not isinstance(exc, anymail.AnymailAPIError):
        return None  # configuration, serialisation: not an answer of the ESP
    status = getattr(exc, "status_code", None)
    if status == 429:
        return SlowDown(_retry_after(exc), "The ESP asks us to slow down: HTTP 429: %s" % text)
    if status in (401, 403):
        return SenderRefused(
            "The ESP refused our credentials or account: HTTP %s: %s" % (status, text)
        )
    if status is not None and 400 <= status < 500:
        return PermanentSendError(
            "The ESP refused the message to %s: HTTP %s: %s" % (address, status, text)
        )
    return TransientSendError(
        "The ESP failed%s: %s" % (" (HTTP %s)" % status if status else "", text)
    )


def unsupported_metadata(exc: BaseException) -> bool:
    """Return True if ``exc`` is the backend's refusal to carry metadata (e.g. Postal's)."""
    return (
        anymail is not None
        and isinstance(exc, anymail.AnymailUnsupportedFeature)
        and "metadata" in str(exc).lower()
    )


def _retry_after(exc: BaseException) -> dt.timedelta:
    response = getattr(exc, "response", None)
    header = response.headers.get("Retry-After") if response is not None else None
    if header:
        try:
            return parse_retry_after(header)
        except ValueError:
            pass
    return THROTTLED_DELAY


def _text(exc: BaseException) -> str:
    """Return anymail's text of ``exc`` on one line, cut at ERROR_TEXT: its first line says
    only the status ("Postmark API response 403 (Forbidden):"); the ESP's answer, which
    says why, follows on the next lines."""
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:ERROR_TEXT]
