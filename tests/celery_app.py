"""The Celery app of tests/celery: ``celery -A tests.celery_app worker`` runs it.

The broker comes from SCHEDULER_TEST_BROKER (default: Redis database 5).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from celery import Celery  # noqa: E402

REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/5")
RABBITMQ_URL = os.environ.get("SCHEDULER_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def make_app(broker_url: str) -> Celery:
    """Return a Celery app on ``broker_url`` configured as docs/celery.md recommends."""
    app = Celery("scheduler_tests", include=["scheduler_app.celery"])
    app.conf.update(
        broker_url=broker_url,
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        # Longer than the longest job (see docs/celery.md); the tests' jobs take seconds.
        broker_transport_options={"visibility_timeout": 3600},
        # Without it Celery's Django fixup closes the connection before and after every task,
        # whatever CONN_MAX_AGE says (see docs/celery.md).
        CELERY_DB_REUSE_MAX=1000,
    )
    return app


app = make_app(os.environ.get("SCHEDULER_TEST_BROKER", REDIS_URL))
