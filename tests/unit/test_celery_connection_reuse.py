"""A Celery worker whose settings make every task reconnect says so as it starts (Celery's
Django fixup closes the connection around each task unless CELERY_DB_REUSE_MAX is set)."""

from __future__ import annotations

import logging

from celery import Celery
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import worker_init

from scheduler_app.celery.tasks import connection_reuse_problem


class WorkController:
    """What worker_init sends: the starting worker, with its app."""

    def __init__(self, app: Celery) -> None:
        self.app = app


def test_without_db_reuse_max_the_worker_warns_as_it_starts(caplog):
    app = Celery("reuse", broker="memory://")
    assert not DjangoWorkerFixup(app).db_reuse_max  # Celery will close around every task
    with caplog.at_level(logging.WARNING, logger="scheduler_app.celery"):
        worker_init.send(sender=WorkController(app))
    assert "CELERY_DB_REUSE_MAX is not set" in caplog.text


def test_with_db_reuse_max_there_is_nothing_to_say(caplog):
    app = Celery("reuse", broker="memory://")
    app.conf.update(CELERY_DB_REUSE_MAX=1000)
    assert DjangoWorkerFixup(app).db_reuse_max == 1000  # the key Celery's fixup reads
    assert connection_reuse_problem(app) is None
    with caplog.at_level(logging.WARNING, logger="scheduler_app.celery"):
        worker_init.send(sender=WorkController(app))
    assert "CELERY_DB_REUSE_MAX" not in caplog.text
