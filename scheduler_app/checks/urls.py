"""What the URLconf routes for the pages scheduler_app serves: the API docs page's assets
(W090) and the unsubscribe view a PUBLIC_BASE_URL promises (E106). These load the
URLconf, which only ``check --tag urls`` (or a full check) should do."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.urls import NoReverseMatch, URLResolver, get_resolver, reverse

from scheduler_app.checks.feedback import is_origin
from scheduler_app.conf import app_settings


@register(Tags.urls)
def check_api_docs_assets(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Warn when the URLconf serves the API docs page but its assets cannot be served."""
    # Imported here: the API's views load DRF, which only projects that route it need.
    from scheduler_app.api.views import DocsView

    if apps.is_installed("drf_spectacular_sidecar") or not _has_urlconf():
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


@register(Tags.urls)
def check_unsubscribe_route(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a PUBLIC_BASE_URL whose unsubscribe view the URLconf does not route.

    A URLs check: it loads the URLconf, which only ``check --tag urls`` (or a
    full check) should do.
    """
    if not is_origin(app_settings.PUBLIC_BASE_URL):
        return []  # check_feedback_settings reports it
    # Without a URLconf nothing routes it, and a worker could not make the links either.
    if _has_urlconf():
        try:
            reverse("scheduler_app_feedback:unsubscribe", args=["r1:x"])
        except NoReverseMatch:
            pass
        except (ImportError, ImproperlyConfigured):
            return []  # Django's own URL checks report a broken URLconf
        else:
            return []
    return [
        Error(
            "SCHEDULER_APP['PUBLIC_BASE_URL'] is set but no URL pattern routes "
            "'scheduler_app_feedback:unsubscribe': batch messages could not carry their "
            "unsubscribe links.",
            hint='Add path("mail/", include("scheduler_app.feedback.urls")) to the URLconf '
            "that ROOT_URLCONF names (workers make the links with it too).",
            id="scheduler_app.E106",
        )
    ]


def _has_urlconf() -> bool:
    """Return whether the settings name a URLconf; a worker-only settings module may not."""
    return bool(getattr(settings, "ROOT_URLCONF", None))


def _routes_view(patterns: list[Any], view_class: type) -> bool:
    """Return whether any of ``patterns``, followed into includes, is ``view_class``."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if _routes_view(pattern.url_patterns, view_class):
                return True
        elif issubclass(getattr(pattern.callback, "view_class", object), view_class):
            return True
    return False
