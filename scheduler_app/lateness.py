"""Lateness: how long after it was due each attempt started, per task."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

from django.db.models import QuerySet

from scheduler_app.database import connection
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
    since: dt.datetime,
    until: dt.datetime,
    *,
    task_name: str | None = None,
    task_names: list[str] | None = None,
    first_attempts: bool = False,
) -> list[TaskLateness]:
    """Return count, p50, p95 and max of (started_at - due_at) per task.

    Covers attempts that started in ``[since, until)`` (only first attempts
    if ``first_attempts``, of ``task_name`` or ``task_names`` if given); percentiles are
    interpolated (PostgreSQL's percentile_cont; the same formula in Python
    on SQLite). Sorted by task name.
    """
    attempts = attempt_times(
        since, until, task_name=task_name, task_names=task_names, first_attempts=first_attempts
    )
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
    since: dt.datetime,
    until: dt.datetime,
    *,
    task_name: str | None = None,
    task_names: list[str] | None = None,
    first_attempts: bool = False,
) -> QuerySet:
    """Return (task_name, due_at, started_at) of every attempt that started in ``[since, until)``.

    The attempt-history rows, and the first-attempt successes their job rows
    alone describe (see Job.attempt_history()): one query, a UNION ALL.
    """
    recorded = JobAttempt.objects.filter(started_at__gte=since, started_at__lt=until)
    described = Job.objects.told_by_row(since, until)
    if task_name is not None:
        recorded = recorded.filter(task_name=task_name)
        described = described.filter(task_name=task_name)
    if task_names is not None:
        recorded = recorded.filter(task_name__in=task_names)
        described = described.filter(task_name__in=task_names)
    if first_attempts:
        recorded = recorded.filter(attempt=1)
    return (
        recorded.order_by()
        .values_list("task_name", "due_at", "started_at")
        .union(described.order_by().values_list("task_name", "run_at", "started_at"), all=True)
        .order_by()  # no default ordering: its columns are not in the result (Django 6)
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


def hourly_p95(until: dt.datetime, *, hours: int = 24) -> dict[str, list[float | None]]:
    """Return per task the p95 lateness of each of the ``hours`` hours before ``until``.

    Oldest hour first; None for an hour in which the task did not start. One
    query per hour, each a range of the attempts' started_at index.
    """
    start = until - dt.timedelta(hours=hours)
    series: dict[str, list[float | None]] = {}
    for hour in range(hours):
        since = start + dt.timedelta(hours=hour)
        for row in lateness_by_task(since, since + dt.timedelta(hours=1)):
            series.setdefault(row.task_name, [None] * hours)[hour] = row.p95
    return dict(sorted(series.items()))
