"""The one Celery task: run a published job through runworker's execution path."""

from __future__ import annotations

import datetime as dt
import os

from celery import shared_task

from scheduler_app.celery.execution import run_published
from scheduler_app.conf import app_settings

#: The task's name, which the relay publishes to.
RUN_JOB = "scheduler_app.celery.run_job"


@shared_task(name=RUN_JOB, bind=True, acks_late=True, ignore_result=True)
def run_job(self, job_id: int, lease_token: int, lease_seconds: float | None = None) -> str:
    """Run job ``job_id`` if ``lease_token`` is still its claim; return what happened.

    ``lease_seconds``: the lease to hold while it runs (default LEASE_SECONDS).
    """
    worker_id = "%s:%s" % (self.request.hostname or "celery", os.getpid())
    lease = dt.timedelta(seconds=lease_seconds or app_settings.LEASE_SECONDS)
    return run_published(job_id, lease_token, worker_id=worker_id, lease=lease)
