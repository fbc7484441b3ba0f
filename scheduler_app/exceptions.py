"""The one exception tree of scheduler_app.

Each class's docstring is its default message; ``code`` is the stable
machine-readable code the REST API returns.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from typing import Any

from scheduler_app import clock


def describe(exc: BaseException) -> str:
    """Return "Type: message" for ``exc``, even when its ``__str__`` raises (user code)."""
    try:
        message = str(exc)
    except Exception as broken:
        message = "<the message could not be read: %s>" % type(broken).__name__
    return "%s: %s" % (type(exc).__name__, message)


class SchedulerError(Exception):
    """A scheduler_app error."""

    code = "scheduler_error"

    def __init__(self, message: str | None = None, **params: Any) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.params = params
        super().__init__(self.message)


class PruneRefused(SchedulerError):
    """More rows qualify for pruning than PRUNE_MAX_ROWS allows; nothing was deleted."""

    code = "prune_refused"


class ValidationError(SchedulerError, ValueError):
    """Invalid arguments."""

    code = "invalid"


class BadUnsubscribeToken(ValidationError):
    """This unsubscribe link is not valid: it was changed, or it is not one of ours."""

    code = "bad_token"


class UnknownUnsubscribeToken(ValidationError):
    """This unsubscribe link has expired: the message it came with is no longer on record."""

    code = "unknown_token"


class UnmatchedFeedback(ValidationError):
    """This feedback event names no address and matches no recipient on record."""

    code = "unmatched_feedback"


class UnsuppressibleAddress(UnmatchedFeedback, UnknownUnsubscribeToken):
    """This address cannot be unsubscribed automatically: in lower case it is too long to list."""

    # Both: a feedback event about it is reported unmatched, its link as one we cannot honour.
    code = "unsuppressible_address"


class UnknownTask(ValidationError):
    """No task is registered under this name."""

    code = "unknown_task"


class UnsupportedPayloadVersion(ValidationError):
    """The task does not accept this payload version."""

    code = "unsupported_payload_version"


class UnknownQueue(ValidationError):
    """This queue is not listed in SCHEDULER_APP['QUEUES']."""

    code = "unknown_queue"


class InvalidPayload(ValidationError):
    """The payload cannot be stored as JSON."""

    code = "invalid_payload"


class InvalidSchedule(ValidationError):
    """The requested run time is invalid."""

    code = "invalid_schedule"


class SendLaneNotCancellable(SchedulerError):
    """A send lane cannot be cancelled on its own; cancel its batch instead."""

    code = "send_lane"


class StaleSend(SchedulerError):
    """The message is too far past its scheduled time to be sent without an operator."""

    code = "stale_send"


class JobTimeout(SchedulerError):
    """The job ran longer than its task's timeout."""

    code = "timeout"


class RetryLater(SchedulerError):
    """Raise from a handler to run the job again later without using an attempt.

    Give ``delay`` (seconds or a timedelta) or ``retry_after``, the value of an
    HTTP Retry-After header (delay-seconds or an HTTP date).
    """

    code = "retry_later"

    def __init__(
        self,
        delay: float | dt.timedelta | None = None,
        *,
        retry_after: str | None = None,
        reason: str = "",
    ) -> None:
        if (delay is None) == (retry_after is None):
            raise ValueError("RetryLater needs exactly one of delay or retry_after")
        self.delay = (
            parse_retry_after(retry_after) if retry_after is not None else _as_timedelta(delay)
        )
        self.reason = reason
        super().__init__(
            "retry later in %ss%s"
            % (round(self.delay.total_seconds(), 3), ": " + reason if reason else "")
        )


def _as_timedelta(delay: float | dt.timedelta | None) -> dt.timedelta:
    value = delay if isinstance(delay, dt.timedelta) else dt.timedelta(seconds=float(delay or 0))
    if value < dt.timedelta(0):
        raise ValueError("RetryLater delay must not be negative")
    return value


def parse_retry_after(value: str, *, now: dt.datetime | None = None) -> dt.timedelta:
    """Return the delay an HTTP Retry-After value asks for (never negative).

    Accepts delay-seconds (``"120"``) or an HTTP date
    (``"Wed, 21 Oct 2026 07:28:00 GMT"``); anything else raises ValueError.
    """
    text = value.strip()
    try:
        if text.isascii() and text.isdigit():
            return dt.timedelta(seconds=int(text))
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError("Retry-After is neither seconds nor an HTTP date: %r" % value) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(when - (now or clock.now()), dt.timedelta(0))
