"""Open, resolve, acknowledge and deliver alerts: the functions rules and guards call."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import IntegrityError, transaction

from scheduler_app import clock
from scheduler_app.alerts.notifiers import OPENED, RESOLVED, configured_notifiers
from scheduler_app.controls import as_user
from scheduler_app.models import Alert
from scheduler_app.signals import alert_opened, alert_resolved

logger = logging.getLogger("scheduler_app.alerts")


def open_alert(
    *,
    kind: str,
    subject: str,
    summary: str,
    numbers: dict[str, Any] | None = None,
    admin_url: str = "",
    now: dt.datetime | None = None,
) -> tuple[Alert, bool]:
    """Open an alert, or refresh the open one of the same kind and subject; return (it, opened).

    A new alert is delivered when the caller's transaction commits. The
    database keeps one open alert per (kind, subject), so two processes
    opening the same one at once end with one alert, opened by one of them.
    """
    now = now or clock.now()
    fields = {"summary": summary, "numbers": numbers or {}, "admin_url": admin_url}
    refreshed = Alert.objects.open().filter(kind=kind, subject=subject)
    if refreshed.update(last_seen_at=now, **fields):
        return refreshed.get(), False
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                kind=kind,
                subject=subject,
                opened_at=now,
                last_seen_at=now,
                last_notified_at=now,
                notifications=1,
                **fields,
            )
    except IntegrityError:  # opened by another process since our UPDATE
        return Alert.objects.open().get(kind=kind, subject=subject), False
    logger.warning("alert opened kind=%s subject=%s summary=%s", kind, subject, summary)
    transaction.on_commit(lambda: deliver(OPENED, alert))
    return alert, True


def resolve_alert(alert: Alert, *, now: dt.datetime | None = None) -> bool:
    """Resolve ``alert`` if it is still open; it is delivered as resolved at commit."""
    now = now or clock.now()
    if not Alert.objects.open().filter(pk=alert.pk).update(resolved_at=now):
        return False
    alert.resolved_at = now
    logger.info("alert resolved kind=%s subject=%s", alert.kind, alert.subject)
    transaction.on_commit(lambda: deliver(RESOLVED, alert))
    return True


def acknowledge(alert_ids: list[int], *, by: Any) -> int:
    """Acknowledge the open, unacknowledged alerts among ``alert_ids``; return how many.

    An acknowledged alert is not re-notified and does not fail the health
    command; it still resolves on its own.
    """
    return (
        Alert.objects.unacknowledged()
        .filter(pk__in=alert_ids)
        .update(acknowledged_at=clock.now(), acknowledged_by=as_user(by))
    )


def claim_renotifications(now: dt.datetime, after: dt.timedelta) -> list[Alert]:
    """Mark the open, unacknowledged alerts last delivered before ``now - after`` as delivered
    now and return them, so exactly one process delivers each again."""
    claimed = []
    for alert in Alert.objects.due_for_notice(now - after):
        if (
            Alert.objects.unacknowledged()
            .filter(pk=alert.pk, last_notified_at=alert.last_notified_at)
            .update(last_notified_at=now, notifications=alert.notifications + 1)
        ):
            claimed.append(alert)
    return claimed


def deliver(event: str, alert: Alert) -> None:
    """Deliver ``alert`` through every notifier and the signal; failures are logged, not raised."""
    try:
        notifiers = configured_notifiers()
    except Exception:
        logger.exception("alert notifiers cannot be built; check ALERT_NOTIFIERS")
        notifiers = []
    for notifier in notifiers:
        try:
            notifier.notify(event, alert)
        except Exception:
            logger.exception(
                "alert notifier failed notifier=%s event=%s kind=%s subject=%s",
                type(notifier).__name__,
                event,
                alert.kind,
                alert.subject,
            )
    signal = alert_opened if event == OPENED else alert_resolved
    for receiver, response in signal.send_robust(sender=Alert, alert=alert):
        if isinstance(response, Exception):
            logger.error(
                "alert signal receiver failed receiver=%r event=%s kind=%s subject=%s error=%s",
                receiver,
                event,
                alert.kind,
                alert.subject,
                response,
            )
