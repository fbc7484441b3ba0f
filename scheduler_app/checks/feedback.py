"""Mail feedback: the unsubscribe link's origin, scope and limits, the bounce and
complaint rates, and the webhook secret (W100, W101, E100-E105)."""

from __future__ import annotations

import re
from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email

from scheduler_app.conf import app_settings, is_number


@register(Tags.compatibility)
def check_feedback_settings(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """Mail feedback: the unsubscribe link's origin, scope, limits and webhook secret."""
    problems: list[Error | Warning] = []
    base = app_settings.PUBLIC_BASE_URL
    if base is None:
        problems.append(
            Warning(
                "Batch messages carry no one-click unsubscribe: SCHEDULER_APP"
                "['PUBLIC_BASE_URL'] is not set.",
                hint="Set it to your site's https origin and include "
                "scheduler_app.feedback.urls; large mailbox providers require it of bulk mail.",
                id="scheduler_app.W100",
            )
        )
    elif not is_origin(base):
        problems.append(
            Error(
                "SCHEDULER_APP['PUBLIC_BASE_URL'] must be an origin such as "
                "'https://example.com', not %r." % (base,),
                id="scheduler_app.E100",
            )
        )
    elif base.startswith("http://") and not re.match(r"http://(localhost|127\.0\.0\.1)\b", base):
        problems.append(
            Warning(
                "SCHEDULER_APP['PUBLIC_BASE_URL'] is not https: mailbox providers ignore "
                "one-click unsubscribe links that are not HTTPS (RFC 8058).",
                id="scheduler_app.W101",
            )
        )
    if app_settings.UNSUBSCRIBE_SCOPE not in ("audience", "all"):
        problems.append(
            Error(
                "SCHEDULER_APP['UNSUBSCRIBE_SCOPE'] must be 'audience' or 'all'.",
                id="scheduler_app.E101",
            )
        )
    for name in ("UNSUBSCRIBE_RATE_LIMIT", "SOFT_BOUNCE_LIMIT", "FEEDBACK_MIN_SENT"):
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name, id="scheduler_app.E102"
                )
            )
    window = app_settings.SOFT_BOUNCE_WINDOW
    if not is_number(window) or window <= 0:
        problems.append(
            Error(
                "SCHEDULER_APP['SOFT_BOUNCE_WINDOW'] must be a positive number.",
                id="scheduler_app.E102",
            )
        )
    for name in ("COMPLAINT_RATE_LIMIT", "BOUNCE_RATE_LIMIT"):
        value = getattr(app_settings, name)
        if value is not None and (not is_number(value) or not 0 < value < 1):
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be None or a share between 0 and 1." % name,
                    id="scheduler_app.E103",
                )
            )
    secret = app_settings.FEEDBACK_WEBHOOK_SECRET
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        problems.append(
            Error(
                "SCHEDULER_APP['FEEDBACK_WEBHOOK_SECRET'] must be a string of at least 16 "
                "characters.",
                id="scheduler_app.E104",
            )
        )
    mailto = app_settings.UNSUBSCRIBE_MAILTO
    if mailto is not None and not _plain_address(mailto):
        problems.append(
            Error(
                "SCHEDULER_APP['UNSUBSCRIBE_MAILTO'] must be a plain address such as "
                "'unsubscribe@example.com', not %r." % (mailto,),
                id="scheduler_app.E105",
            )
        )
    return problems


def _plain_address(value: Any) -> bool:
    """Return whether ``value`` is an email address alone, fit for a mailto: URL in a header:
    no name, no control characters (a CR or LF fails every message), nothing URL-like."""
    if (
        not isinstance(value, str)
        or any(c in value for c in '<>?,"\\ :')
        or not value.isprintable()
    ):
        return False
    try:
        validate_email(value)
    except DjangoValidationError:
        return False
    return True


def is_origin(base: Any) -> bool:
    """Return whether ``base`` is an http(s) origin, such as 'https://example.com'."""
    return isinstance(base, str) and re.fullmatch(r"https?://[^/\s?#]+/?", base) is not None
