"""Operability: the alert, heartbeat and stale-send settings, and the alert notifiers
(E040-E044, W040)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

from scheduler_app.alerts.notifiers import build_notifier
from scheduler_app.conf import app_settings, is_number

#: Operability settings that must be positive numbers of seconds (check E040).
OPERABILITY_SECONDS = (
    "ALERT_INTERVAL",
    "ALERT_RENOTIFY_AFTER",
    "ALERT_RESOLVE_AFTER",
    "OVERDUE_AFTER",
    "FAILING_WINDOW",
    "WORKER_HEARTBEAT_INTERVAL",
    "WORKER_LOST_AFTER",
    "STALE_SEND_AFTER",
    "STALLED_SEND_AFTER",
)


@register(Tags.compatibility)
def check_operability(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """Alert, heartbeat and stale-send settings; warn when no alert would be delivered."""
    problems: list[Error | Warning] = []
    for name in OPERABILITY_SECONDS:
        value = getattr(app_settings, name)
        if not is_number(value) or value <= 0:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive number of seconds." % name,
                    id="scheduler_app.E040",
                )
            )
    rate = app_settings.FAILING_RATE
    if not is_number(rate) or not 0 <= rate < 1:
        problems.append(
            Error(
                "SCHEDULER_APP['FAILING_RATE'] must be a number >= 0 and < 1.",
                id="scheduler_app.E041",
            )
        )
    base = app_settings.ADMIN_BASE_URL
    if not isinstance(base, str) or (base and not base.startswith(("http://", "https://"))):
        problems.append(
            Error(
                "SCHEDULER_APP['ADMIN_BASE_URL'] must be '' or an absolute http(s) URL, not %r."
                % (base,),
                id="scheduler_app.E042",
            )
        )
    heartbeat, lost = app_settings.WORKER_HEARTBEAT_INTERVAL, app_settings.WORKER_LOST_AFTER
    if not problems and lost <= 2 * heartbeat:
        problems.append(
            Error(
                "SCHEDULER_APP['WORKER_LOST_AFTER'] (%ss) must exceed twice "
                "WORKER_HEARTBEAT_INTERVAL (%ss), or live workers are marked lost."
                % (lost, heartbeat),
                id="scheduler_app.E043",
            )
        )
    entries = app_settings.ALERT_NOTIFIERS
    if not isinstance(entries, list | tuple):
        return [
            *problems,
            Error("SCHEDULER_APP['ALERT_NOTIFIERS'] must be a list.", id="scheduler_app.E044"),
        ]
    notifiers = []
    for entry in entries:
        try:
            notifier = build_notifier(entry)
        except (ImportError, ValueError) as exc:
            problem = str(exc)
        except Exception as exc:  # whatever the class's constructor raises
            problem = "%s: %s" % (type(exc).__name__, exc)
        else:
            if callable(getattr(notifier, "notify", None)):
                notifiers.append(notifier)
                continue
            problem = "it has no notify() method"
        problems.append(
            Error(
                "SCHEDULER_APP['ALERT_NOTIFIERS'] entry %r cannot be built: %s" % (entry, problem),
                id="scheduler_app.E044",
            )
        )
    if not any(getattr(n, "would_deliver", lambda: True)() for n in notifiers):
        problems.append(
            Warning(
                "No alert notifier would deliver anything: alerts are only visible in the "
                "admin and to scheduler_health.",
                hint="Set ADMINS (the default notifier mails them) or add a notifier such as "
                "{'class': 'scheduler_app.alerts.notifiers.Webhook', 'url': ...} to "
                "SCHEDULER_APP['ALERT_NOTIFIERS'].",
                id="scheduler_app.W040",
            )
        )
    return problems
