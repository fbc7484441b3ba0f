"""Links from an alert to the admin page of what it is about."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.urls import NoReverseMatch, reverse

from scheduler_app.conf import app_settings


def admin_link(view: str, *args: Any, query: dict[str, str] | None = None) -> str:
    """Return ADMIN_BASE_URL + the admin ``view``'s path (+ ``query``); '' if it is not mounted."""
    try:
        path = reverse("admin:%s" % view, args=args)
    except NoReverseMatch:
        return ""
    if query:
        path += "?" + urlencode(query)
    return app_settings.ADMIN_BASE_URL.rstrip("/") + path
