"""django-anymail's tracking signal feeds the suppression list (connected if anymail is installed).

Bounced is a hard bounce, deferred a soft bounce, complained a complaint and unsubscribed an
unsubscribe; other events (delivered, opened, ...) are ignored. The metadata the email provider
sets (``scheduler_key``) ties an event to its recipient; the ESP's message id is the fallback.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.core.exceptions import ValidationError

from scheduler_app.exceptions import UnmatchedFeedback
from scheduler_app.feedback.suppressions import (
    Feedback,
    Kind,
    is_storable_text,
    record_event,
    source_event_id,
    storable_address,
    storable_text,
)
from scheduler_app.models import Suppression

logger = logging.getLogger("scheduler_app.feedback")

#: Anymail's event types that mean something to the suppression list.
KINDS = {
    "bounced": Kind.HARD_BOUNCE,
    "deferred": Kind.SOFT_BOUNCE,
    "complained": Kind.COMPLAINT,
    "unsubscribed": Kind.UNSUBSCRIBE,
}


def on_tracking(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    """Record one anymail tracking event (receiver of ``anymail.signals.tracking``)."""
    kind = KINDS.get(event.event_type)
    if kind is None:
        return
    event_id = (
        event.event_id
        or hashlib.sha256(
            repr((event.event_type, event.message_id, event.recipient, event.timestamp)).encode()
        ).hexdigest()
    )
    if event.recipient:
        try:
            storable_address(event.recipient)
        except ValidationError:
            # Raising would fail anymail's webhook view, and the ESP would send the whole
            # batch of events again.
            logger.warning(
                "anymail event dropped esp=%s event=%s: its recipient %r is not an address "
                "the list can hold",
                esp_name,
                event_id,
                event.recipient,
            )
            return
    feedback = Feedback(
        event_id=source_event_id("anymail:%s" % esp_name, event_id),
        kind=kind,
        source=Suppression.Source.ANYMAIL,
        address=event.recipient or "",
        message_id=_storable_id(event.message_id),
        idempotency_key=_storable_id((event.metadata or {}).get("scheduler_key")),
        occurred_at=event.timestamp,
        detail=storable_text(
            " ".join(
                part
                for part in (event.reject_reason, event.description, event.mta_response)
                if part
            )
        ),
    )
    try:
        record_event(feedback)
    except UnmatchedFeedback:
        logger.warning("anymail event unmatched esp=%s event=%s", esp_name, event_id)


def _storable_id(value: Any) -> str:
    """Return the id as text, or '' if a database cannot store it: cleaned, it could tie
    the event to someone else."""
    text = "" if value is None else str(value)
    return text if is_storable_text(text) else ""


def connect() -> None:
    """Connect on_tracking to anymail's tracking signal, if anymail is installed."""
    try:
        from anymail.signals import tracking
    except ImportError:
        return
    tracking.connect(on_tracking, dispatch_uid="scheduler_app.feedback.anymail")
