"""Helpers for alert tests: tasks with targets, finished jobs written directly, open alerts."""

from __future__ import annotations

import datetime as dt
from typing import Any

from scheduler_app.models import Alert, Job
from scheduler_app.registry import task

T0 = dt.datetime(2027, 3, 1, 12, 0, tzinfo=dt.UTC)
COUNTED = "tests.ops.counted"
TIMED = "tests.ops.timed"
HOURLY = "tests.ops.hourly"


@task(name=COUNTED, count_key="processed", zero_runs_alert=2)
def counted(ctx):
    return ctx.payload


@task(name=TIMED, lateness_target=60, max_runtime=30)
def timed(ctx):
    return None


@task(name=HOURLY, expected_every=dt.timedelta(hours=1))
def hourly(ctx):
    return None


def job(task_name: str, status: str, *, at: dt.datetime, **fields: Any) -> Job:
    """Create a job of ``task_name`` that finished (or started, if running) at ``at``."""
    values: dict[str, Any] = {
        "task_name": task_name,
        "status": status,
        "scheduled_for": at - dt.timedelta(seconds=5),
        "run_at": at - dt.timedelta(seconds=5),
        "started_at": at - dt.timedelta(seconds=1),
        "attempts": 1,
    }
    if status in (Job.Status.SUCCEEDED, Job.Status.FAILED):
        values["finished_at"] = at
    return Job.objects.create(**{**values, **fields})


def open_alerts(kind: str | None = None) -> dict[str, Alert]:
    """Return the open alerts (of ``kind``) by subject."""
    alerts = Alert.objects.open()
    if kind is not None:
        alerts = alerts.filter(kind=kind)
    return {alert.subject: alert for alert in alerts}
