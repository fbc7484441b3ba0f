"""The suppression list: who must not be mailed, why, and the feedback events that put them there.

Every batch and single message looks here at send time (``reasons_for``); unsubscribe
links, webhooks, anymail's tracking signal, the admin, the API and CSV imports write here
(``suppress`` / ``record_event``). An event is recorded once per source event id, so the
same webhook delivered twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError
from django.db.models import Count, Q
from django.utils.module_loading import import_string

from scheduler_app import clock, database
from scheduler_app.conf import app_settings
from scheduler_app.controls import as_user
from scheduler_app.exceptions import UnmatchedFeedback, UnsuppressibleAddress
from scheduler_app.models import (
    ControlEvent,
    FeedbackEvent,
    Recipient,
    SendBatch,
    Suppression,
    SuppressionRemoval,
)
from scheduler_app.payloads import has_lone_surrogate

logger = logging.getLogger("scheduler_app.feedback")

Kind = FeedbackEvent.Kind
Reason = Suppression.Reason

#: What each kind of event does to the list: (reason, scope of the batch's audience only?).
_SUPPRESSES = {
    Kind.UNSUBSCRIBE: Reason.UNSUBSCRIBED,
    Kind.HARD_BOUNCE: Reason.HARD_BOUNCE,
    Kind.COMPLAINT: Reason.COMPLAINT,
}


#: The longest address the list stores (Suppression.address).
MAX_ADDRESS_LENGTH = 320


def normalise(address: str) -> str:
    """Return the form the list stores and compares: stripped, lower-cased, the domain in
    its ASCII (IDNA) form, as Django's mail sends it and ESPs report it back."""
    local, at, domain = address.strip().lower().rpartition("@")
    if not at:
        return domain
    ascii_form = local + at + _ascii_domain(domain)
    # Punycode is longer: past the 320 characters the list stores, an address could never be
    # mailed anyway, so it is kept as given (and fits).
    return ascii_form if len(ascii_form) <= MAX_ADDRESS_LENGTH else local + at + domain


def storable_address(address: str) -> str:
    """Return ``address`` normalised; raise ValidationError if it is not an email address
    the list can hold: text a database stores (no NUL, no lone surrogate), and no longer
    than the list's column once lower-cased (``str.lower()`` can lengthen text)."""
    if not is_storable_text(address):
        raise ValidationError("%r holds a NUL character or a lone surrogate." % address)
    try:
        validate_email(address)
    except ValidationError as exc:
        raise ValidationError("%r is not an email address." % address) from exc
    try:
        return list_address(address)
    except UnsuppressibleAddress as exc:
        raise ValidationError(
            "%r is longer than %s characters once lower-cased." % (address, MAX_ADDRESS_LENGTH)
        ) from exc


def list_address(address: str) -> str:
    """Return ``address`` normalised; raise UnsuppressibleAddress if that is longer than the
    list's column (``str.lower()`` can lengthen text)."""
    normal = normalise(address)
    if len(normal) > MAX_ADDRESS_LENGTH:
        raise UnsuppressibleAddress()
    return normal


def is_storable_text(text: str) -> bool:
    """Whether a database's text column can hold ``text``: no NUL, no lone surrogate."""
    return "\x00" not in text and not has_lone_surrogate(text)


def storable_text(text: str) -> str:
    """Return ``text`` as a database's text column can hold it: NULs dropped, lone
    surrogates replaced by "?"."""
    return text.replace("\x00", "").encode(errors="replace").decode()


@functools.lru_cache(maxsize=1024)
def _ascii_domain(domain: str) -> str:
    try:
        return domain.encode("idna").decode("ascii")  # what django.core.mail does
    except UnicodeError:  # no valid IDNA name (an empty or too long label): kept as given
        return domain


def reasons_for(addresses: Iterable[str], scope: str = "") -> dict[str, str]:
    """Return {address: reason} for the addresses suppressed for all mail or in ``scope``.

    Keys are the addresses as given (any case); one query, by the unique (address, scope) index.
    """
    by_normal: dict[str, list[str]] = {}
    for address in addresses:
        by_normal.setdefault(normalise(address), []).append(address)
    if not by_normal:
        return {}
    scopes = {"", scope}
    found: dict[str, str] = {}
    rows = Suppression.objects.filter(address__in=list(by_normal), scope__in=scopes).values_list(
        "address", "scope", "reason"
    )
    for normal, row_scope, reason in rows:
        label = Reason(reason).label
        text = "suppressed: %s (%s)" % (label, row_scope or "all mail")
        for address in by_normal[normal]:
            found[address] = text
    return found


def skip_reasons(addresses: list[str], batch: SendBatch) -> dict[str, str]:
    """Return {address: why} for the addresses a send of ``batch`` skips now: those on the
    list (all mail or the batch's audience), and those the project's SUPPRESSION_CHECK refuses."""
    path = app_settings.SUPPRESSION_CHECK
    found = dict(import_string(path)(addresses, batch)) if path and addresses else {}
    return {**found, **reasons_for(addresses, batch.audience)}


def suppress(
    address: str,
    *,
    reason: str,
    source: str,
    scope: str = "",
    batch: SendBatch | int | None = None,
    by: Any = None,
    detail: str = "",
) -> tuple[Suppression, bool]:
    """Put ``address`` on the list in ``scope`` ('' for all mail); return (row, created).

    An address already suppressed in that scope keeps its first reason. Raise
    UnsuppressibleAddress if the list cannot hold the address.
    """
    address = list_address(address)
    batch_id = batch.pk if isinstance(batch, SendBatch) else batch
    try:
        with database.atomic():
            row, created = Suppression.objects.get_or_create(
                address=address,
                scope=scope,
                defaults={
                    "reason": reason,
                    "source": source,
                    "batch_id": batch_id,
                    "created_by": as_user(by),
                    "detail": detail,
                    "created_at": clock.now(),
                },
            )
    except IntegrityError:  # a concurrent suppress of the same address and scope won
        row, created = Suppression.objects.get(address=address, scope=scope), False
    if created:
        logger.info(
            "address suppressed scope=%s reason=%s source=%s batch=%s",
            scope or "all",
            reason,
            source,
            batch_id,
        )
    return row, created


def lift(suppression: Suppression, *, why: str, by: Any = None) -> bool:
    """Remove a suppression, recording who lifted it and why (required); return False if it
    was gone already (another operator lifted it), recording nothing."""
    if not why.strip():
        from scheduler_app.exceptions import ValidationError

        raise ValidationError("Say why the suppression is lifted.")
    with database.atomic():
        deleted, _ = Suppression.objects.filter(pk=suppression.pk).delete()
        if not deleted:
            return False
        SuppressionRemoval.objects.create(
            address=suppression.address,
            scope=suppression.scope,
            was_reason=suppression.reason,
            was_source=suppression.source,
            why=why.strip(),
            removed_by=as_user(by),
            removed_at=clock.now(),
        )
    return True


@dataclasses.dataclass(frozen=True, kw_only=True)
class Feedback:
    """One event as a source reports it; ``event_id`` must be the source's own, stable id."""

    event_id: str
    kind: str
    source: str
    address: str = ""
    recipient_id: int | None = None
    scope: str | None = None  # of an unsubscribe; None: the batch's audience or all mail
    message_id: str = ""
    idempotency_key: str = ""
    occurred_at: dt.datetime | None = None
    detail: str = ""


def source_event_id(source: str, event_id: str) -> str:
    """Return the stored id of a source's event: prefixed, and hashed if it would not fit or
    holds what a database cannot store (the same id always gives the same hash)."""
    return _fitting("%s:" % source, event_id)


def message_of(event: Feedback) -> str:
    """Return the message an event is about, as stored: the provider's message id without
    its angle brackets, else the send's idempotency key ('' if it names neither)."""
    found = event.message_id.strip().strip("<>").strip() or event.idempotency_key.strip()
    return _fitting("", found) if found else ""


def _fitting(prefix: str, text: str) -> str:
    """Return ``prefix + text`` if a 255-character column can hold it, else the prefix and
    the text's SHA-256 (the same text always gives the same hash)."""
    stored = prefix + text
    if len(stored) <= 255 and is_storable_text(stored):
        return stored
    return "%ssha256:%s" % (prefix, hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest())


def record_event(event: Feedback) -> FeedbackEvent | None:
    """Record one feedback event and apply it; return None if it was recorded before.

    Raise UnmatchedFeedback if the event names no address and ties back to no recipient
    (nothing to suppress), or UnsuppressibleAddress (one of them) if the list cannot hold
    its address: the caller reports it, never counts it as a duplicate.

    Tied back to the recipient (and its batch) by the idempotency key ``<batch>:<key>``
    or by the provider's message id. Unsubscribes suppress the address in the batch's
    audience, hard bounces and complaints for all mail, soft bounces after
    SOFT_BOUNCE_LIMIT of them within SOFT_BOUNCE_WINDOW. A complaint or bounce rate
    over its limit pauses the batch.
    """
    recipient = _recipient_of(event)
    address = event.address or (recipient.address if recipient else "")
    if not address:
        raise UnmatchedFeedback(
            "Event %r names no address, and its key or message id matches no recipient on "
            "record." % event.event_id
        )
    try:
        address = list_address(address)
    except UnsuppressibleAddress:
        logger.warning(
            "feedback event refused event=%s: its address is longer than %s characters once "
            "lower-cased",
            event.event_id,
            MAX_ADDRESS_LENGTH,
        )
        raise
    try:
        with database.atomic():
            row = FeedbackEvent.objects.create(
                event_id=event.event_id,
                kind=event.kind,
                source=event.source,
                address=address,
                batch_id=recipient.batch_id if recipient else None,
                recipient=recipient,
                message=message_of(event),
                detail=event.detail[:2000],
                # In UTC: PostgreSQL takes offsets only to +-15:59, which a source's
                # ISO 8601 (+-23:59) or an ESP's timestamp may pass. The same instant.
                occurred_at=event.occurred_at.astimezone(dt.UTC)
                if event.occurred_at
                else clock.now(),
                recorded_at=clock.now(),
            )
            _apply(row, event.scope)
    except IntegrityError:
        if not FeedbackEvent.objects.filter(event_id=event.event_id).exists():
            raise  # not a duplicate (e.g. its recipient was pruned meanwhile): say so
        logger.info("feedback event already recorded event=%s", event.event_id)
        return None
    if row.batch_id is not None and row.kind in (Kind.COMPLAINT, Kind.HARD_BOUNCE):
        check_rates(row.batch_id)
    return row


def _apply(event: FeedbackEvent, scope: str | None) -> None:
    if scope is None:
        scope = unsubscribe_scope(event.batch_id) if event.kind == Kind.UNSUBSCRIBE else ""
    if event.kind in _SUPPRESSES:
        suppress(
            event.address,
            reason=_SUPPRESSES[event.kind],
            source=event.source,
            scope=scope,
            batch=event.batch_id,
            detail=event.detail,
        )
        return
    # A soft bounce: suppressed once there were enough of them within the window. ESPs report
    # each retry of one delayed message (greylisting): a message counts once, by its recipient
    # row, else by its message id or key (single messages have no recipient row); only a
    # report that names no message counts on its own.
    since = event.occurred_at - dt.timedelta(seconds=app_settings.SOFT_BOUNCE_WINDOW)
    untied = Q(recipient__isnull=True)
    counts = FeedbackEvent.objects.filter(
        address=event.address, kind=Kind.SOFT_BOUNCE, occurred_at__gte=since
    ).aggregate(
        recipients=Count("recipient", distinct=True),
        messages=Count("message", distinct=True, filter=untied & ~Q(message="")),
        unnamed=Count("pk", filter=untied & Q(message="")),
    )
    recent = counts["recipients"] + counts["messages"] + counts["unnamed"]
    if recent >= app_settings.SOFT_BOUNCE_LIMIT:
        suppress(
            event.address,
            reason=Reason.SOFT_BOUNCES,
            source=event.source,
            batch=event.batch_id,
            detail="%s soft bounces within %ss" % (recent, app_settings.SOFT_BOUNCE_WINDOW),
        )


def unsubscribe_scope(batch_id: int | None) -> str:
    """Return the scope an unsubscribe from the batch covers (UNSUBSCRIBE_SCOPE)."""
    if batch_id is None or app_settings.UNSUBSCRIBE_SCOPE != "audience":
        return ""
    return SendBatch.objects.values_list("audience", flat=True).get(pk=batch_id)


def _recipient_of(event: Feedback) -> Recipient | None:
    """Return the recipient row the event is about, if it can be found."""
    if event.recipient_id is not None:
        return Recipient.objects.filter(pk=event.recipient_id).first()
    batch_id, _, key = event.idempotency_key.partition(":")
    # ASCII digits that fit a bigint: int() refuses "²" and SQLite a number past 2**63.
    if key and batch_id.isascii() and batch_id.isdigit() and len(batch_id) <= 18:
        found = Recipient.objects.filter(batch_id=int(batch_id), recipient_key=key).first()
        if found:
            return found
    message_id = event.message_id.strip()
    bare = message_id.strip("<>").strip()
    if bare:  # "<>" is no message id: it would match every recipient that has none
        ids = {message_id, bare, "<%s>" % bare}
        return Recipient.objects.filter(provider_message_id__in=ids).order_by("-pk").first()
    return None


def batch_feedback(batch_id: int, *, since: dt.datetime | None = None) -> dict[str, int]:
    """Return {kind: recipients} of the feedback events tied to the batch (every kind, 0 if
    none; a recipient reported twice, e.g. by two sources, counts once). With ``since``, only
    events recorded after it."""
    events = FeedbackEvent.objects.filter(batch_id=batch_id)
    if since is not None:
        events = events.filter(recorded_at__gt=since)
    counts = dict.fromkeys(Kind.values, 0)
    rows = events.values("kind").annotate(n=Count("address", distinct=True))
    counts.update({row["kind"]: row["n"] for row in rows})
    return counts


def rate_breach(
    batch_id: int, *, since: dt.datetime | None = None
) -> tuple[str, dict[str, float | int]] | None:
    """Return (why, numbers) if the batch's complaint or hard-bounce rate passed its limit
    (once it has sent FEEDBACK_MIN_SENT), else None. With ``since``, only the events
    recorded after it count (the breaker after an operator resumed the batch)."""
    batch = SendBatch.objects.filter(pk=batch_id).first()
    sent = None if batch is None else batch.sent
    if sent is None or sent < app_settings.FEEDBACK_MIN_SENT:
        return None
    counts = batch_feedback(batch_id, since=since)
    for kind, limit in (
        (Kind.COMPLAINT, app_settings.COMPLAINT_RATE_LIMIT),
        (Kind.HARD_BOUNCE, app_settings.BOUNCE_RATE_LIMIT),
    ):
        rate = counts[kind] / sent
        if limit is not None and rate > limit:
            why = "%s rate %.2f%% (%s of %s sent) passed its limit of %.2f%%" % (
                Kind(kind).label,
                rate * 100,
                counts[kind],
                sent,
                limit * 100,
            )
            numbers = {"kind": str(kind), "count": counts[kind], "sent": sent}
            return why, {**numbers, "rate": rate, "limit": limit}
    return None


def check_rates(batch_id: int) -> str:
    """Pause the batch if its complaint or hard-bounce rate passed its limit; return why ('')."""
    from scheduler_app.sends import states

    # Once an operator resumed the batch, only what came after counts: the same events
    # would otherwise pause it again at the next complaint.
    resumed = (
        ControlEvent.objects.filter(scope="batch", target=str(batch_id), action="resume")
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    breach = rate_breach(batch_id, since=resumed)
    if breach is None:
        return ""
    states.pause(batch_id, reason=breach[0])  # only a scheduled or sending batch
    return breach[0]
