"""The SCHEDULER_APP setting as a whole: a dict of known keys (E001), its queues (E002),
the worker's and the sends' positive numbers and counts (E003, E004), the margins
(E005), and every number within its bound (E007)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

from scheduler_app.bounds import SETTING_BOUNDS, out_of_bounds
from scheduler_app.conf import DEFAULTS, app_settings, is_number

POSITIVE_NUMBERS = (
    "POLL_INTERVAL",
    "SCHEDULER_INTERVAL",
    "LEASE_SECONDS",
    "SHUTDOWN_TIMEOUT",
    "DATABASE_UNAVAILABLE_TIMEOUT",
    "SUMMARY_INTERVAL",
    "SEND_CLAIM_SECONDS",
    "LARGE_BATCH_WINDOW",
)
POSITIVE_INTEGERS = (
    "CONCURRENCY",
    "CLAIM_BATCH_SIZE",
    "SEND_LANES",
    "SEND_WINDOW",
    "SEND_CHUNK_SIZE",
    "RECIPIENT_MAX_ATTEMPTS",
    "BREAKER_WINDOW",
    "PROGRESS_LOG_EVERY",
    "LARGE_BATCH",
)

NON_NEGATIVE_NUMBERS = ("UNDO_SAFETY_MARGIN", "UNKNOWN_TASK_GRACE")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """SCHEDULER_APP: a dict of known keys (E001), QUEUES (E002), the positive numbers and
    counts (E003, E004) and the margins (E005)."""
    user = getattr(settings, "SCHEDULER_APP", {})
    if not isinstance(user, dict):
        return [
            Error(
                "SCHEDULER_APP must be a dict, not %s." % type(user).__name__,
                hint="Until it is one, scheduler_app uses its defaults for every key.",
                id="scheduler_app.E001",
            )
        ]
    errors = [
        Error(
            "Unknown key %r in SCHEDULER_APP." % key,
            hint="Known keys: %s." % ", ".join(sorted(DEFAULTS)),
            id="scheduler_app.E001",
        )
        for key in sorted(set(user) - set(DEFAULTS))
    ]
    queues = app_settings.QUEUES
    if (
        not isinstance(queues, list | tuple)
        or not queues
        or not all(isinstance(q, str) and q and len(q) <= 100 for q in queues)
    ):
        errors.append(
            Error(
                "SCHEDULER_APP['QUEUES'] must be a non-empty list of queue names "
                "(strings of 1 to 100 characters).",
                id="scheduler_app.E002",
            )
        )
    for name in POSITIVE_NUMBERS:
        value = getattr(app_settings, name)
        if not is_number(value) or value <= 0:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive number." % name, id="scheduler_app.E003"
                )
            )
    for name in POSITIVE_INTEGERS:
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name, id="scheduler_app.E004"
                )
            )
    for name in NON_NEGATIVE_NUMBERS:
        value = getattr(app_settings, name)
        if not is_number(value) or value < 0:
            errors.append(
                Error("SCHEDULER_APP[%r] must be a number >= 0." % name, id="scheduler_app.E005")
            )
    return errors


@register(Tags.compatibility)
def check_numeric_bounds(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E007: every numeric setting within its bound (scheduler_app.bounds.SETTING_BOUNDS).

    Finite is not enough: a 1e300 s lease passes ``isis_number()`` and kills the lease
    thread. The other checks judge a value's type and sign; this one its size.
    """
    errors = []
    for name in SETTING_BOUNDS:
        value = getattr(app_settings, name)
        bound = out_of_bounds(name, value)
        if bound is not None:
            errors.append(
                Error(
                    "SCHEDULER_APP[%r] must be %s, not %r." % (name, bound.describe(), value),
                    hint=bound.why,
                    id="scheduler_app.E007",
                )
            )
    return errors
