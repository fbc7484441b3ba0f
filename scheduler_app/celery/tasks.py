"""The Celery tasks: run published jobs through runworker's execution path; and what a
Celery worker logs as it starts: settings that would make every task reconnect, and a
database that lacks one of scheduler_app's migrations."""

from __future__ import annotations

import datetime as dt
import logging
import os

from celery import Celery, shared_task
from celery.signals import worker_init
from django.core.management.base import CommandError
from django.db import DatabaseError

from scheduler_app.celery.execution import run_deliveries
from scheduler_app.conf import app_settings
from scheduler_app.management.database import check_migrated, one_line

logger = logging.getLogger("scheduler_app.celery")

#: The task of a message of several jobs (CELERY_JOBS_PER_MESSAGE above 1).
RUN_JOBS = "scheduler_app.celery.run_jobs"

#: The task of a message of one job, which Celery workers of every release run.
RUN_JOB = "scheduler_app.celery.run_job"


@shared_task(name=RUN_JOBS, bind=True, acks_late=True, ignore_result=True)
def run_jobs(self, deliveries: list[list[int]], lease_seconds: float | None = None) -> list[str]:
    """Run each job of ``deliveries`` ([job id, lease token] pairs) in turn, if its token is
    still its claim; return what happened to each (see run_deliveries).

    Each job starts just before its handler runs, so one still waiting its turn stays
    the relay's: if this worker dies, it was never started and goes back unharmed.
    ``lease_seconds``: the lease to hold while each runs (default LEASE_SECONDS).
    """
    return run_deliveries(deliveries, **_runner(self, lease_seconds))


@shared_task(name=RUN_JOB, bind=True, acks_late=True, ignore_result=True)
def run_job(self, job_id: int, lease_token: int, lease_seconds: float | None = None) -> str:
    """Run job ``job_id`` if ``lease_token`` is still its claim; return what happened."""
    return run_deliveries([(job_id, lease_token)], **_runner(self, lease_seconds))[0]


def _runner(task, lease_seconds: float | None) -> dict:
    """Return run_deliveries()' worker id (this Celery worker's host name and process) and
    lease for a task of this worker."""
    return {
        "worker_id": "%s:%s" % (task.request.hostname or "celery", os.getpid()),
        "lease": dt.timedelta(seconds=lease_seconds or app_settings.LEASE_SECONDS),
    }


def connection_reuse_problem(app: Celery) -> str | None:
    """Return why ``app``'s workers would open a database connection per task, or None.

    Celery's Django fixup closes the connections of the thread that runs a
    task before and after every task, whatever CONN_MAX_AGE says, unless
    CELERY_DB_REUSE_MAX is set: each job then pays a new connection.
    """
    if app.conf.get("CELERY_DB_REUSE_MAX"):
        return None
    return (
        "CELERY_DB_REUSE_MAX is not set: Celery closes the database connection before and "
        "after every task, so each job opens a new one (several times slower). Set "
        "CELERY_DB_REUSE_MAX = 1000 in your Django settings (see scheduler_app's "
        "docs/celery.md)."
    )


@worker_init.connect
def warn_about_connection_reuse(sender, **kwargs) -> None:
    """Log connection_reuse_problem() once, as the Celery worker starts."""
    problem = connection_reuse_problem(sender.app)
    if problem:
        logger.warning(problem)


@worker_init.connect
def warn_about_missing_migrations(sender, **kwargs) -> None:
    """Log an error as the Celery worker starts if the scheduler's database lacks one of
    scheduler_app's migrations (``runworker`` refuses to start then).

    The jobs a Celery worker runs record their outcomes through functions the migrations
    make, so until ``migrate`` runs those outcomes fail, and the jobs run again after
    their lease. The worker still starts: it may serve other tasks of the project.
    """
    try:
        check_migrated()
    except CommandError as exc:
        logger.error("%s Until then scheduler_app's jobs cannot record their outcomes.", exc)
    except DatabaseError as exc:
        logger.warning("Could not check scheduler_app's migrations: %s", one_line(exc))
