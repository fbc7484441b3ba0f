"""Notifiers deliver alerts: mail to ADMINS, a JSON webhook, or anything with ``notify()``.

SCHEDULER_APP['ALERT_NOTIFIERS'] lists them: dotted paths, or dicts
``{"class": path, **options}`` whose options go to the constructor. The
``alert_opened`` / ``alert_resolved`` signals are sent whatever the list.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.request
from typing import Any, Protocol

from django.conf import settings
from django.core.mail import mail_admins
from django.utils.module_loading import import_string

from scheduler_app.conf import app_settings
from scheduler_app.models import Alert

logger = logging.getLogger("scheduler_app.alerts")

#: What happened to the alert: it opened (or is re-notified), or it resolved.
OPENED = "opened"
RESOLVED = "resolved"


class Notifier(Protocol):
    def notify(self, event: str, alert: Alert) -> None:
        """Deliver ``alert`` (``event`` is "opened" or "resolved"); raise if it was not."""

    def would_deliver(self) -> bool:
        """Return False when this notifier is configured so that nothing arrives."""


def alert_document(event: str, alert: Alert) -> dict[str, Any]:
    """Return the alert as a JSON-ready dict (the webhook's body)."""
    return {
        "event": event,
        "id": alert.pk,
        "kind": alert.kind,
        "subject": alert.subject,
        "summary": alert.summary,
        "numbers": alert.numbers,
        "since": alert.opened_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
        "acknowledged_at": alert.acknowledged_at.isoformat() if alert.acknowledged_at else None,
        "admin_url": alert.admin_url,
    }


class MailAdmins:
    """Mail ``settings.ADMINS`` through Django's ``mail_admins``."""

    def notify(self, event: str, alert: Alert) -> None:
        subject = "[%s] %s: %s" % (event, alert.kind, alert.subject)
        lines = [
            alert.summary,
            "",
            "Since: %s" % alert.opened_at.isoformat(),
            *("%s: %s" % (key, value) for key, value in sorted(alert.numbers.items())),
        ]
        if alert.admin_url:
            lines += ["", alert.admin_url]
        mail_admins(subject, "\n".join(lines), fail_silently=False)

    def would_deliver(self) -> bool:
        return bool(settings.ADMINS)


class RedirectRefused(Exception):
    """A webhook answered with a redirect, which Webhook does not follow."""


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is then raised as an HTTPError


_NO_REDIRECTS = urllib.request.build_opener(_RefuseRedirects)


class Webhook:
    """POST the alert as JSON (see ``alert_document``) to ``url``."""

    def __init__(self, url: str, timeout: float = 10.0, headers: dict[str, str] | None = None):
        if not isinstance(url, str):
            raise ValueError("the webhook url must be a string, not %r" % (url,))
        if not url.startswith(("http://", "https://")):
            raise ValueError("the webhook url must start with http:// or https://")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < math.inf
        ):
            raise ValueError(
                "the webhook timeout must be a positive number of seconds, not %r" % (timeout,)
            )
        self.url = url
        self.timeout = timeout
        self.headers = headers or {}

    def notify(self, event: str, alert: Alert) -> None:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(alert_document(event, alert)).encode(),
            headers={"Content-Type": "application/json", **self.headers},
            method="POST",
        )
        try:
            with _NO_REDIRECTS.open(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise RedirectRefused(
                    "the webhook answered %s, a redirect to %s: alerts are not sent through "
                    "redirects (a 301-303 would turn the POST into a GET without the alert); "
                    "set the url it points to" % (exc.code, exc.headers.get("Location"))
                ) from exc
            raise

    def would_deliver(self) -> bool:
        return True


def build_notifier(entry: Any) -> Notifier:
    """Return the notifier an ALERT_NOTIFIERS entry names; raise ValueError or ImportError."""
    if isinstance(entry, str):
        return import_string(entry)()
    if isinstance(entry, dict) and isinstance(entry.get("class"), str):
        options = {key: value for key, value in entry.items() if key != "class"}
        try:
            return import_string(entry["class"])(**options)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc
    raise ValueError("a notifier is a dotted path or a dict with a 'class' key, not %r" % entry)


def configured_notifiers() -> dict[str, Notifier]:
    """Return the notifiers ALERT_NOTIFIERS lists, by their entry written as JSON (the key
    an alert records for a notifier its notice has not reached yet)."""
    return {
        json.dumps(entry, sort_keys=True, default=str): build_notifier(entry)
        for entry in app_settings.ALERT_NOTIFIERS
    }
