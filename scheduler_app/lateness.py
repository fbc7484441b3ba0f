"""Lateness: how long after it was due each attempt started, per task."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet

from scheduler_app.models import Job, JobAttempt


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskLateness:
    """Lateness of one task's attempts that started in a time range, in seconds."""

    task_name: str
    count: int
    p50: float
    p95: float
    max: float


def lateness_by_task(
    since: dt.datetime, until: dt.datetime, *, task_name: str | None = None
) -> list[TaskLateness]:
    """Return count, p50, p95 and max of (started_at - due_at) per task.

    Covers attempts that started in ``[since, until)``; percentiles are
    interpolated (PostgreSQL's percentile_cont; the same formula in Python
    on SQLite). Sorted by task name.
    """
    attempts = attempt_times(since, until, task_name=task_name)
    if connection.vendor == "postgresql":
        from scheduler_app.db.postgresql import lateness_percentiles

        rows = lateness_percentiles(attempts)
    else:
        rows = _percentiles_in_python(attempts)
    return [
        TaskLateness(task_name=name, count=count, p50=p50, p95=p95, max=worst)
        for name, count, p50, p95, worst in rows
    ]


def attempt_times(
    since: dt.datetime, until: dt.datetime, *, task_name: str | None = None
) -> QuerySet:
    """Return (task_name, due_at, started_at) of every attempt that started in ``[since, until)``.

    The attempt-history rows, and the first-attempt successes their job rows
    alone describe (see Job.attempt_history()): one query, a UNION ALL.
    """
    recorded = JobAttempt.objects.filter(started_at__gte=since, started_at__lt=until)
    described = Job.objects.filter(
        status=Job.Status.SUCCEEDED, started_at__gte=since, started_at__lt=until
    ).exclude(
        # Jobs finished before upgrading have their success as a row too: count it once.
        Exists(JobAttempt.objects.filter(job=OuterRef("pk"), outcome=JobAttempt.Outcome.SUCCEEDED))
    )
    if task_name is not None:
        recorded = recorded.filter(task_name=task_name)
        described = described.filter(task_name=task_name)
    return (
        recorded.order_by()
        .values_list("task_name", "due_at", "started_at")
        .union(described.order_by().values_list("task_name", "run_at", "started_at"), all=True)
    )


def _percentiles_in_python(attempts: QuerySet) -> list[tuple]:
    by_task: dict[str, list[float]] = {}
    for name, due_at, started_at in attempts:
        by_task.setdefault(name, []).append((started_at - due_at).total_seconds())
    rows = []
    for name in sorted(by_task):
        values = sorted(by_task[name])
        rows.append(
            (name, len(values), _interpolate(values, 0.5), _interpolate(values, 0.95), values[-1])
        )
    return rows


def _interpolate(values: list[float], fraction: float) -> float:
    """Return the continuous percentile of sorted ``values``, as percentile_cont does."""
    position = fraction * (len(values) - 1)
    lower, upper = math.floor(position), math.ceil(position)
    return values[lower] + (values[upper] - values[lower]) * (position - lower)
