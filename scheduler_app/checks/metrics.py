"""The Prometheus metrics' settings (E050-E053, W050)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register

from scheduler_app.conf import app_settings, is_number


@register(Tags.compatibility)
def check_metrics_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the METRICS_* settings (E050-E053, W050)."""
    problems: list[CheckMessage] = []
    allowed = app_settings.METRICS_ALLOWED_IPS
    networks = []
    if not isinstance(allowed, list | tuple):
        allowed = None
    else:
        try:
            networks = [ipaddress.ip_network(entry, strict=False) for entry in allowed]
        except (TypeError, ValueError):
            allowed = None
    if allowed is None:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_ALLOWED_IPS'] must be a list of IP addresses or "
                "networks such as '127.0.0.1' or '10.0.0.0/8'.",
                id="scheduler_app.E050",
            )
        )
    elif any(network.prefixlen == 0 for network in networks):
        problems.append(
            Warning(
                "SCHEDULER_APP['METRICS_ALLOWED_IPS'] serves the metrics to every address.",
                hint="List the Prometheus servers' addresses, or use METRICS_TOKEN.",
                id="scheduler_app.W050",
            )
        )
    token = app_settings.METRICS_TOKEN
    if token is not None and (not isinstance(token, str) or not token.strip()):
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_TOKEN'] must be None or a non-empty string.",
                id="scheduler_app.E051",
            )
        )
    cache_seconds, window = app_settings.METRICS_CACHE_SECONDS, app_settings.METRICS_WINDOW
    if not is_number(cache_seconds) or cache_seconds < 0 or not is_number(window) or window <= 0:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_CACHE_SECONDS'] must be a number >= 0 and "
                "SCHEDULER_APP['METRICS_WINDOW'] a number > 0.",
                id="scheduler_app.E052",
            )
        )
    batches = app_settings.METRICS_MAX_BATCHES
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        problems.append(
            Error(
                "SCHEDULER_APP['METRICS_MAX_BATCHES'] must be an integer >= 0.",
                id="scheduler_app.E053",
            )
        )
    return problems
