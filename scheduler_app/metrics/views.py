"""The metrics view projects mount (e.g. at ``/metrics``): the database's gauges, cached.

Access: clients whose address is in METRICS_ALLOWED_IPS, or that present
``Authorization: Bearer <METRICS_TOKEN>``; anyone else gets 403. The numbers
are read at most once per METRICS_CACHE_SECONDS (Django's default cache, so
every process behind a shared cache reads them once between them).
"""

from __future__ import annotations

import ipaddress

from django.contrib.auth.decorators import login_not_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler_app.conf import app_settings
from scheduler_app.metrics.database import DatabaseCollector

CACHE_KEY = "scheduler_app:metrics"

FORBIDDEN = (
    "Metrics are served to the addresses in SCHEDULER_APP['METRICS_ALLOWED_IPS'] and to "
    "requests bearing SCHEDULER_APP['METRICS_TOKEN'].\n"
)


@login_not_required  # its own access rule, also under LoginRequiredMiddleware
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the database's gauges in Prometheus' text format to allowed clients."""
    if not is_allowed(request):
        return HttpResponseForbidden(FORBIDDEN, content_type="text/plain")
    body = cache.get(CACHE_KEY)
    if body is None:
        body = generate_latest(DatabaseCollector())  # type: ignore[arg-type]
        if app_settings.METRICS_CACHE_SECONDS > 0:
            cache.set(CACHE_KEY, body, app_settings.METRICS_CACHE_SECONDS)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def is_allowed(request: HttpRequest) -> bool:
    """Return True if the request bears METRICS_TOKEN or comes from METRICS_ALLOWED_IPS."""
    token = app_settings.METRICS_TOKEN
    if token and constant_time_compare(
        request.headers.get("Authorization", ""), "Bearer %s" % token
    ):
        return True
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped is not None:
        client = client.ipv4_mapped
    return any(client in network for network in allowed_networks())


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Return METRICS_ALLOWED_IPS as networks (a single address is a /32 or /128)."""
    return [ipaddress.ip_network(entry, strict=False) for entry in app_settings.METRICS_ALLOWED_IPS]
