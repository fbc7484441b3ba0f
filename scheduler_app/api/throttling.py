"""Per-user throttling of write actions (cancel, undo, ...); reads are not throttled.

The rate is REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['scheduler_app_write']
when the project sets it (None turns throttling off), else DEFAULT_WRITE_RATE.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

WRITE_SCOPE = "scheduler_app_write"
DEFAULT_WRITE_RATE = "120/min"


class WriteRateThrottle(SimpleRateThrottle):
    """Throttle unsafe requests per user (per client address for anonymous ones)."""

    scope = WRITE_SCOPE

    def get_rate(self) -> str | None:
        # Read at each request, not once at import as DRF's THROTTLE_RATES is,
        # so override_settings(REST_FRAMEWORK=...) applies.
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        return rates.get(self.scope, DEFAULT_WRITE_RATE)

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        if request.user is not None and request.user.is_authenticated:
            ident = "user-%s" % request.user.pk
        else:
            ident = "addr-%s" % self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
