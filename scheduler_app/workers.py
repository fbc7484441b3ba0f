"""Live workers: each runworker keeps a heartbeat row; silent ones are marked lost.

A lost worker's jobs come back through lease rescue, as always; the row
only tells operators (and the ``no_worker`` alert) who is serving what.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from collections.abc import Sequence
from importlib import metadata

from scheduler_app.conf import app_settings
from scheduler_app.database_clock import DatabaseNow
from scheduler_app.models import WorkerHeartbeat

logger = logging.getLogger("scheduler_app.worker")

Status = WorkerHeartbeat.Status


def package_version() -> str:
    """Return the installed scheduler_app version, or '' when it is not installed."""
    try:
        return metadata.version("django-scheduler-app")
    except metadata.PackageNotFoundError:
        return ""


def worker_started(worker_id: str, *, queues: Sequence[str], concurrency: int) -> None:
    """Write the worker's heartbeat row as it starts (database clock)."""
    WorkerHeartbeat.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": package_version(),
            "queues": list(queues),
            "concurrency": concurrency,
            "started_at": DatabaseNow(),
            "last_seen_at": DatabaseNow(),
            "running": 0,
            "status": Status.ALIVE,
            "stopped_at": None,
        },
    )


def heartbeat(worker_id: str, *, running: int) -> bool:
    """Record that the worker is alive with ``running`` jobs; False if its row is gone or lost.

    A worker marked lost that turns out alive is alive again.
    """
    return bool(
        WorkerHeartbeat.objects.filter(worker_id=worker_id)
        .exclude(status=Status.STOPPED)
        .update(last_seen_at=DatabaseNow(), running=running, status=Status.ALIVE)
    )


def worker_stopped(worker_id: str) -> None:
    """Mark the worker stopped (a clean exit)."""
    WorkerHeartbeat.objects.filter(worker_id=worker_id).update(
        status=Status.STOPPED, stopped_at=DatabaseNow(), last_seen_at=DatabaseNow(), running=0
    )


def lost_after() -> dt.timedelta:
    return dt.timedelta(seconds=app_settings.WORKER_LOST_AFTER)


def mark_lost_workers() -> int:
    """Mark alive workers silent for longer than WORKER_LOST_AFTER as lost; return how many."""
    silent = WorkerHeartbeat.objects.silent_for(lost_after())
    ids = list(silent.values_list("worker_id", flat=True))
    if ids:
        WorkerHeartbeat.objects.silent_for(lost_after()).filter(worker_id__in=ids).update(
            status=Status.LOST
        )
        logger.warning("workers lost workers=%s", ",".join(ids))
    return len(ids)


def live_workers() -> list[WorkerHeartbeat]:
    """Return the workers alive and seen within WORKER_LOST_AFTER, latest seen first."""
    return list(WorkerHeartbeat.objects.live(lost_after()))
