"""Where the relay publishes: the project's Celery app and each job queue's Celery queue."""

from __future__ import annotations

from celery import Celery
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from scheduler_app.conf import app_settings


def celery_app() -> Celery:
    """Return the Celery app SCHEDULER_APP['CELERY_APP'] names."""
    path = app_settings.CELERY_APP
    if not path:
        raise ImproperlyConfigured(
            "SCHEDULER_APP['CELERY_APP'] is not set: name your project's Celery app "
            "(e.g. 'proj.celery.app') to run the Celery executor."
        )
    try:
        app = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            "SCHEDULER_APP['CELERY_APP'] = %r cannot be imported: %s" % (path, exc)
        ) from exc
    if not isinstance(app, Celery):
        raise ImproperlyConfigured(
            "SCHEDULER_APP['CELERY_APP'] = %r is a %s, not a Celery app."
            % (path, type(app).__name__)
        )
    return app


def celery_queue(queue: str) -> str:
    """Return the Celery queue that jobs of ``queue`` are published to."""
    return app_settings.CELERY_QUEUE_PREFIX + queue
