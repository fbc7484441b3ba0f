"""The evaluator: run every rule, open what they find, resolve what they no longer find.

Workers run it every ALERT_INTERVAL (on a thread of their own) and ``scheduler_health``
runs it before it answers. One process at a time: on PostgreSQL a
transaction-level advisory lock (a second evaluator skips its turn); on
SQLite the database's single writer serialises them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from django.db import InterfaceError, OperationalError

from scheduler_app.alerts import rules
from scheduler_app.alerts.store import (
    deliver_notices,
    open_alert,
    owe_renotifications,
    resolve_alert,
)
from scheduler_app.alerts.targets import task_targets
from scheduler_app.conf import app_settings
from scheduler_app.database import atomic, connection
from scheduler_app.db import backend, database_now
from scheduler_app.models import Alert, Schedule
from scheduler_app.workers import mark_lost_workers

logger = logging.getLogger("scheduler_app.alerts")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Evaluation:
    """What one evaluation did; ``skipped``: another process was evaluating."""

    skipped: bool = False
    opened: tuple[Alert, ...] = ()
    resolved: tuple[Alert, ...] = ()
    still_open: tuple[Alert, ...] = ()
    #: Kinds whose rule raised: their open alerts were left as they were.
    failed_rules: tuple[str, ...] = ()
    lost_workers: int = 0


def evaluate(
    *,
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    time_limit: float | None = None,
) -> Evaluation:
    """Evaluate every rule once; open, refresh and resolve alerts; deliver what changed.

    A rule that raises is logged and skipped (its alerts stay as they are);
    connection errors propagate. Deliveries happen after the commit: the notices now
    due, including the retries of failed ones. The database is used inside ``turn()``
    blocks only, and no delivery is (see deliver_notices). On PostgreSQL, ``time_limit``
    (seconds) cancels the evaluation when a statement of it runs or waits for a lock longer
    (an OperationalError): a worker's evaluation shares its turns with the lease renewal.
    """
    with turn(), atomic():
        if time_limit is not None and connection.vendor == "postgresql":
            backend().limit_transaction(time_limit)
        if not _take_lock():
            return Evaluation(skipped=True)
        now = database_now()
        lost = mark_lost_workers()
        findings, failed = _run_rules(now)
        opened, still_open, resolved = _apply(findings, failed, now)
        owe_renotifications(now, dt.timedelta(seconds=app_settings.ALERT_RENOTIFY_AFTER))
    deliver_notices(now, turn=turn)
    return Evaluation(
        opened=tuple(opened),
        resolved=tuple(resolved),
        still_open=tuple(still_open),
        failed_rules=tuple(failed),
        lost_workers=lost,
    )


def _take_lock() -> bool:
    if connection.vendor == "postgresql":
        return backend().try_alert_lock()
    return True


def _run_rules(now: dt.datetime) -> tuple[list[rules.Finding], list[str]]:
    schedules = list(Schedule.objects.filter(enabled=True).order_by("name"))
    situation = rules.Situation(now=now, schedules=schedules, targets=task_targets(schedules))
    findings: list[rules.Finding] = []
    failed: list[str] = []
    for kind, rule in rules.RULES.items():
        try:
            with atomic():  # a failing statement must not abort the others
                findings.extend(rule(situation))
        except (OperationalError, InterfaceError):
            raise
        except Exception:
            logger.exception("alert rule failed kind=%s", kind)
            failed.append(kind)
    return findings, failed


def _apply(
    findings: list[rules.Finding], failed: list[str], now: dt.datetime
) -> tuple[list[Alert], list[Alert], list[Alert]]:
    opened, still_open = [], []
    found = set()
    for finding in findings:
        found.add((finding.kind, finding.subject))
        alert, is_new = open_alert(
            kind=finding.kind,
            subject=finding.subject,
            summary=finding.summary,
            numbers=finding.numbers,
            admin_url=finding.admin_url,
            now=now,
            deliver=False,  # evaluate() delivers every notice due once it committed
        )
        (opened if is_new else still_open).append(alert)
    resolved = [
        alert
        for alert in Alert.objects.open().exclude(kind__in=failed)
        if (alert.kind, alert.subject) not in found and resolve_alert(alert, now=now)
    ]
    return opened, still_open, resolved


def evaluate_quietly(
    *,
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    time_limit: float | None = None,
) -> None:
    """Evaluate for a worker's Duty: log any error but a database's (a lost connection, a
    time limit), never raise it."""
    try:
        evaluate(turn=turn, time_limit=time_limit)
    except (OperationalError, InterfaceError):
        raise
    except Exception:
        logger.exception("alert evaluation failed")
