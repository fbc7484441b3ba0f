"""System checks for the SCHEDULER_APP setting and the task registry."""

from __future__ import annotations

import re
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLResolver, get_resolver

from scheduler_app.conf import DEFAULTS, app_settings, message_id_domain
from scheduler_app.registry import all_tasks

POSITIVE_NUMBERS = (
    "POLL_INTERVAL",
    "SCHEDULER_INTERVAL",
    "LEASE_SECONDS",
    "SHUTDOWN_TIMEOUT",
    "DATABASE_UNAVAILABLE_TIMEOUT",
    "SUMMARY_INTERVAL",
)
POSITIVE_INTEGERS = ("CONCURRENCY", "CLAIM_BATCH_SIZE", "DEFAULT_MAX_ATTEMPTS")
DOMAIN_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)

NON_NEGATIVE_NUMBERS = ("UNDO_SAFETY_MARGIN", "UNKNOWN_TASK_GRACE")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    user = getattr(settings, "SCHEDULER_APP", {})
    if not isinstance(user, dict):
        return [Error("SCHEDULER_APP must be a dict.", id="scheduler_app.E001")]
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
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
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
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            errors.append(
                Error("SCHEDULER_APP[%r] must be a number >= 0." % name, id="scheduler_app.E005")
            )
    errors.extend(_check_message_id_domain())

    version = app_settings.SCHEDULES_VERSION
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        errors.append(
            Error(
                "SCHEDULER_APP['SCHEDULES_VERSION'] must be an integer >= 0.",
                id="scheduler_app.E006",
            )
        )
    return errors


def _check_message_id_domain() -> list[Error]:
    configured = app_settings.MESSAGE_ID_DOMAIN
    if configured is not None:
        if isinstance(configured, str) and _plausible_domain(configured):
            return []
        return [
            Error(
                "SCHEDULER_APP['MESSAGE_ID_DOMAIN'] must be a domain name such as "
                "'mail.example.com', not %r." % (configured,),
                id="scheduler_app.E030",
            )
        ]
    if _plausible_domain(message_id_domain()):
        return []
    return [
        Error(
            "Message-IDs take their domain from DEFAULT_FROM_EMAIL (%r), which has none."
            % settings.DEFAULT_FROM_EMAIL,
            hint="Set SCHEDULER_APP['MESSAGE_ID_DOMAIN'] (e.g. 'mail.example.com').",
            id="scheduler_app.E030",
        )
    ]


def _plausible_domain(domain: str) -> bool:
    """Return True for a host name of dot-separated labels (IDNA allowed), at most 253 long."""
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_domain.split(".")
    return len(ascii_domain) <= 253 and all(DOMAIN_LABEL.fullmatch(label) for label in labels)


@register(Tags.compatibility)
def check_task_queues(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    queues = app_settings.QUEUES
    if not isinstance(queues, list | tuple):
        return []
    return [
        Error(
            "Task %r uses queue %r, which SCHEDULER_APP['QUEUES'] does not list."
            % (name, spec.queue),
            id="scheduler_app.E010",
        )
        for name, spec in sorted(all_tasks().items())
        if spec.queue not in queues
    ]


@register(Tags.compatibility)
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from scheduler_app.exceptions import ValidationError
    from scheduler_app.schedules.declared import declared_schedules

    try:
        declared_schedules()
    except ValidationError as exc:
        return [Error(exc.message, id="scheduler_app.E020")]
    return []


@register(Tags.urls)
def check_api_docs_assets(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when the URLconf serves the API docs page but its assets cannot be served."""
    # Imported here: the API's views load DRF, which only projects that route it need.
    from scheduler_app.api.views import DocsView

    if apps.is_installed("drf_spectacular_sidecar"):
        return []
    try:
        patterns = get_resolver().url_patterns
    except (ImportError, ImproperlyConfigured):
        return []  # Django's own URL checks report a broken URLconf
    if not _routes_view(patterns, DocsView):
        return []
    return [
        Warning(
            "The API docs page (/api/docs/) is routed but 'drf_spectacular_sidecar' is not in "
            "INSTALLED_APPS, so its Swagger UI files will not be found and the page stays blank.",
            hint="Add 'drf_spectacular_sidecar' to INSTALLED_APPS (it is installed with "
            "django-scheduler-app).",
            id="scheduler_app.W090",
        )
    ]


def _routes_view(patterns: list[Any], view_class: type) -> bool:
    """Return whether any of ``patterns``, followed into includes, is ``view_class``."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if _routes_view(pattern.url_patterns, view_class):
                return True
        elif issubclass(getattr(pattern.callback, "view_class", object), view_class):
            return True
    return False
