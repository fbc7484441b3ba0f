"""Open, resolve, acknowledge and deliver alerts: the functions rules and guards call."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.db import IntegrityError
from django.db.models import F

from scheduler_app import clock
from scheduler_app.alerts.notifiers import OPENED, RESOLVED, configured_notifiers
from scheduler_app.conf import app_settings
from scheduler_app.controls import as_user
from scheduler_app.database import atomic, on_commit
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
    deliver: bool = True,
) -> tuple[Alert, bool]:
    """Open an alert, or refresh the open one of the same kind and subject; return (it, opened).

    An alert resolved so recently that its resolved notice is still owed (see
    ALERT_RESOLVE_AFTER) is reopened instead, silently: a flapping condition is one
    alert. A new alert's notice is delivered when the caller's transaction commits.
    The database keeps one open alert per (kind, subject), so two processes opening
    the same one at once end with one alert, opened by one of them.
    """
    now = now or clock.now()
    fields = {"summary": summary, "numbers": numbers or {}, "admin_url": admin_url}
    refreshed = Alert.objects.open().filter(kind=kind, subject=subject)
    if refreshed.update(last_seen_at=now, **fields):
        return refreshed.get(), False
    try:
        with atomic():
            reopened = _reopen(kind, subject, now, fields)
            if reopened is not None:
                return reopened, False
            alert = Alert.objects.create(
                kind=kind,
                subject=subject,
                opened_at=now,
                last_seen_at=now,
                notice=OPENED,
                notice_due_at=now,
                **fields,
            )
    except IntegrityError:  # opened by another process since our UPDATE
        return Alert.objects.open().get(kind=kind, subject=subject), False
    logger.warning("alert opened kind=%s subject=%s summary=%s", kind, subject, summary)
    if deliver:
        on_commit(lambda: deliver_notices(now, alert_id=alert.pk))
    return alert, True


def _reopen(kind: str, subject: str, now: dt.datetime, fields: dict[str, Any]) -> Alert | None:
    """Reopen the latest alert of (kind, subject) whose resolved notice is still owed."""
    settling = Alert.objects.filter(kind=kind, subject=subject, notice=RESOLVED)
    latest = settling.order_by("-resolved_at").values_list("pk", flat=True).first()
    if latest is None or not settling.filter(pk=latest).update(
        resolved_at=None, last_seen_at=now, **_NOTHING_OWED, **fields
    ):
        return None
    logger.info(
        "alert reopened before its resolution was notified kind=%s subject=%s", kind, subject
    )
    return Alert.objects.get(pk=latest)


#: The fields of an alert that owes no notice.
_NOTHING_OWED = {
    "notice": "",
    "notice_due_at": None,
    "notice_failures": 0,
    "notice_unreached": None,
}


def resolve_alert(alert: Alert, *, now: dt.datetime | None = None) -> bool:
    """Resolve ``alert`` if it is still open.

    Its resolved notice waits ALERT_RESOLVE_AFTER (the alert reopens if the breach
    returns sooner), then the evaluator delivers it; an alert whose opened notice never
    reached anyone owes none.
    """
    now = now or clock.now()
    still_open = Alert.objects.open().filter(pk=alert.pk)
    if not still_open.filter(last_notified_at=None).update(resolved_at=now, **_NOTHING_OWED):
        settle = dt.timedelta(seconds=app_settings.ALERT_RESOLVE_AFTER)
        if not still_open.update(
            resolved_at=now,
            notice=RESOLVED,
            notice_due_at=now + settle,
            notice_failures=0,
            notice_unreached=None,
        ):
            return False
    alert.resolved_at = now
    logger.info("alert resolved kind=%s subject=%s", alert.kind, alert.subject)
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


def owe_renotifications(now: dt.datetime, after: dt.timedelta) -> int:
    """Owe an opened notice again for each open, unacknowledged alert last delivered before
    ``now - after``; return how many."""
    return Alert.objects.due_for_notice(now - after).update(
        notice=OPENED, notice_due_at=now, notice_failures=0, notice_unreached=None
    )


def deliver_notices(
    now: dt.datetime,
    *,
    alert_id: int | None = None,
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> int:
    """Deliver every notice due at ``now`` (only ``alert_id``'s, if given); return how many
    reached every notifier.

    Each is claimed by a guarded UPDATE that also sets its next try (the backoff), so
    one process delivers it, and one that dies while delivering leaves it to be
    retried. A notice some notifiers refused is retried, with backoff, on those only.
    Call it outside a transaction: each claim commits before the delivery. Every use of
    the database happens inside a ``turn()`` block, and no delivery does (a worker passes
    its side connection's turns, which other threads wait for).
    """
    due = Alert.objects.notices_due(now)
    if alert_id is not None:
        due = due.filter(pk=alert_id)
    with turn():
        alerts = list(due.order_by("notice_due_at", "pk"))
    delivered = 0
    for alert in alerts:
        retry_at = now + _backoff(alert.notice_failures + 1)
        mine = Alert.objects.filter(pk=alert.pk, notice=alert.notice, notice_due_at=retry_at)
        with turn():
            claimed = Alert.objects.filter(
                pk=alert.pk, notice=alert.notice, notice_due_at=alert.notice_due_at
            ).update(notice_due_at=retry_at)
        if not claimed:
            continue  # delivered, reopened or claimed by another process meanwhile
        if not alert.notice_failures:  # receivers get each notice once, with its first try
            _signal(alert.notice, alert)
        failed = deliver(alert.notice, alert, only=alert.notice_unreached)
        if failed is None or failed:
            with turn():
                mine.update(
                    notice_failures=F("notice_failures") + 1,
                    notice_unreached=alert.notice_unreached if failed is None else failed,
                )
            logger.warning(
                "alert notice not delivered kind=%s subject=%s event=%s failures=%s retry_at=%s",
                alert.kind,
                alert.subject,
                alert.notice,
                alert.notice_failures + 1,
                retry_at.isoformat(),
            )
            continue
        with turn():
            recorded = mine.update(
                last_notified_at=now, notifications=F("notifications") + 1, **_NOTHING_OWED
            )
        delivered += bool(recorded)
    return delivered


#: Doublings of the retry delay before it reaches its cap (and no float overflows).
_MOST_DOUBLINGS = 30


def _backoff(failures: int) -> dt.timedelta:
    """Return the wait before the next try: ALERT_INTERVAL, doubled by each failure,
    at most ALERT_RENOTIFY_AFTER."""
    doubled = app_settings.ALERT_INTERVAL * 2 ** min(failures - 1, _MOST_DOUBLINGS)
    return dt.timedelta(seconds=min(doubled, app_settings.ALERT_RENOTIFY_AFTER))


def deliver(event: str, alert: Alert, *, only: list[str] | None = None) -> list[str] | None:
    """Deliver ``alert`` through the notifiers (those keyed in ``only``, if given); return
    the keys of those that failed, or None if none could be built (logged, not raised).
    """
    try:
        notifiers = configured_notifiers()
    except Exception:
        logger.exception("alert notifiers cannot be built; check ALERT_NOTIFIERS")
        return None
    failed = []
    for key, notifier in notifiers.items():
        if only is not None and key not in only:
            continue
        try:
            notifier.notify(event, alert)
        except Exception:
            failed.append(key)
            logger.exception(
                "alert notifier failed notifier=%s event=%s kind=%s subject=%s",
                type(notifier).__name__,
                event,
                alert.kind,
                alert.subject,
            )
    return failed


def _signal(event: str, alert: Alert) -> None:
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
