"""Prometheus metrics: the database's numbers (``views.metrics_view``) and each worker's counters.

Needs the optional extra: ``pip install 'django-scheduler-app[metrics]'``. This
package is the only place that imports prometheus_client, so the rest of
scheduler_app works without it; importing this package without it raises
ImproperlyConfigured saying what to install.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

MISSING_EXTRA = (
    "scheduler_app.metrics needs prometheus_client: "
    "pip install 'django-scheduler-app[metrics]' (or prometheus_client)."
)

try:
    import prometheus_client  # noqa: F401
except ImportError as exc:
    raise ImproperlyConfigured(MISSING_EXTRA) from exc
