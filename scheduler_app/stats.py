"""What the system looks like now, read from the database: queues, recent runs, active sends.

Read-only numbers shared by the metrics view (scheduler_app.metrics) and the
admin overview page. Each function is one query that an index serves, so a
scrape every few seconds costs little even with millions of finished jobs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
)

from scheduler_app.conf import app_settings
from scheduler_app.models import Alert, Job, JobAttempt, SendBatch, WorkerHeartbeat

#: Upper bounds (seconds) of the lateness histogram's buckets; +Inf is implied.
LATENESS_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

#: Outcomes of a first attempt that say whether it worked; retry-later and shutdown
#: hand-backs use no attempt, so they count neither way.
DECIDED_OUTCOMES = (
    JobAttempt.Outcome.SUCCEEDED,
    JobAttempt.Outcome.FAILED,
    JobAttempt.Outcome.RETRIED,
    JobAttempt.Outcome.LEASE_EXPIRED,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueDepth:
    """Unfinished jobs of one queue: pending (due or not), due now, running, oldest due."""

    queue: str
    pending: int
    due: int
    running: int
    oldest_due_at: dt.datetime | None

    def oldest_due_age(self, now: dt.datetime) -> float:
        """Return how long the oldest due job has waited, in seconds (0 if none is due)."""
        if self.oldest_due_at is None:
            return 0.0
        return max((now - self.oldest_due_at).total_seconds(), 0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskRuns:
    """Attempts of one task that started in a window, and its first attempts' lateness."""

    task_name: str
    #: outcome -> attempts
    outcomes: dict[str, int]
    first_attempts: int
    first_attempts_decided: int
    first_attempts_succeeded: int
    #: (upper bound in seconds, first attempts at most that late), cumulative, without +Inf
    lateness_buckets: list[tuple[float, int]]
    lateness_sum: float

    @property
    def first_attempt_success_ratio(self) -> float | None:
        """Return succeeded / decided first attempts, None if none was decided."""
        if not self.first_attempts_decided:
            return None
        return self.first_attempts_succeeded / self.first_attempts_decided


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchProgress:
    """Progress of one send batch that is sending or paused."""

    batch_id: int
    name: str
    status: str
    total: int | None
    sent: int
    failed: int
    skipped: int

    @property
    def pending(self) -> int:
        """Return recipients neither sent, failed nor skipped (0 before the freeze)."""
        if self.total is None:
            return 0
        return max(self.total - self.sent - self.failed - self.skipped, 0)


def queue_depths(now: dt.datetime) -> list[QueueDepth]:
    """Return the unfinished jobs per queue, in two queries.

    One for pending and one for running jobs, so each reads its own partial
    index (a status IN (...) would not match either predicate).
    """
    due = Q(run_at__lte=now)
    pending = {
        row["queue"]: row
        for row in Job.objects.pending()
        .values("queue")
        .annotate(
            pending=Count("id"),
            due=Count("id", filter=due),
            oldest_due_at=Min("run_at", filter=due),
        )
        .order_by()
    }
    running = dict(Job.objects.running().values_list("queue").annotate(n=Count("id")).order_by())
    return [
        QueueDepth(
            queue=queue,
            pending=pending.get(queue, {}).get("pending", 0),
            due=pending.get(queue, {}).get("due", 0),
            running=running.get(queue, 0),
            oldest_due_at=pending.get(queue, {}).get("oldest_due_at"),
        )
        for queue in sorted(set(pending) | set(running))
    ]


def recent_runs(since: dt.datetime, until: dt.datetime) -> list[TaskRuns]:
    """Return per task the attempts that started in ``[since, until)``, in two queries (attempt
    rows, and the first-attempt successes only their job row tells).

    Lateness (started_at - due_at) counts first attempts only: a retry is late
    by its backoff on purpose.
    """
    lateness = ExpressionWrapper(F("started_at") - F("due_at"), output_field=DurationField())
    first = Q(attempt=1)
    buckets = {
        "le_%s" % index: Count("id", filter=first & Q(lateness__lte=dt.timedelta(seconds=bound)))
        for index, bound in enumerate(LATENESS_BUCKETS)
    }
    rows = (
        JobAttempt.objects.filter(started_at__gte=since, started_at__lt=until)
        .alias(lateness=lateness)
        .values("task_name", "outcome")
        .annotate(
            attempts=Count("id"),
            first_attempts=Count("id", filter=first),
            lateness_sum=Sum("lateness", filter=first),
            **buckets,
        )
        .order_by("task_name", "outcome")
    )
    # First-attempt successes that only their job row tells (see Job.attempt_history()).
    row_lateness = ExpressionWrapper(F("started_at") - F("run_at"), output_field=DurationField())
    told_by_row = (
        Job.objects.told_by_row(since, until)
        .alias(lateness=row_lateness)
        .values("task_name")
        .annotate(
            outcome=Value(JobAttempt.Outcome.SUCCEEDED),
            attempts=Count("id"),
            first_attempts=Count("id"),
            lateness_sum=Sum("lateness"),
            **{
                "le_%s" % index: Count("id", filter=Q(lateness__lte=dt.timedelta(seconds=bound)))
                for index, bound in enumerate(LATENESS_BUCKETS)
            },
        )
        .order_by("task_name")
    )
    by_task: dict[str, dict] = {}
    for row in itertools.chain(rows, told_by_row):
        task = by_task.setdefault(
            row["task_name"],
            {
                "outcomes": {},
                "first": 0,
                "decided": 0,
                "succeeded": 0,
                "buckets": [0] * len(LATENESS_BUCKETS),
                "sum": 0.0,
            },
        )
        outcomes = task["outcomes"]
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + row["attempts"]
        task["first"] += row["first_attempts"]
        if row["outcome"] in DECIDED_OUTCOMES:
            task["decided"] += row["first_attempts"]
        if row["outcome"] == JobAttempt.Outcome.SUCCEEDED:
            task["succeeded"] += row["first_attempts"]
        for index in range(len(LATENESS_BUCKETS)):
            task["buckets"][index] += row["le_%s" % index]
        if row["lateness_sum"] is not None:
            task["sum"] += row["lateness_sum"].total_seconds()
    return [
        TaskRuns(
            task_name=name,
            outcomes=task["outcomes"],
            first_attempts=task["first"],
            first_attempts_decided=task["decided"],
            first_attempts_succeeded=task["succeeded"],
            lateness_buckets=list(zip(LATENESS_BUCKETS, task["buckets"], strict=True)),
            lateness_sum=task["sum"],
        )
        for name, task in by_task.items()
    ]


def batches_by_status() -> dict[str, int]:
    """Return how many batches are scheduled, sending and paused (the unfinished ones)."""
    active = (SendBatch.Status.SCHEDULED, SendBatch.Status.SENDING, SendBatch.Status.PAUSED)
    counts = dict.fromkeys(active, 0)
    rows = SendBatch.objects.filter(status__in=active).values_list("status").annotate(n=Count("id"))
    counts.update(dict(rows))
    return counts


def batch_progress(limit: int) -> list[BatchProgress]:
    """Return the progress of the ``limit`` most recent batches that are sending or paused."""
    batches = (
        SendBatch.objects.filter(status__in=(SendBatch.Status.SENDING, SendBatch.Status.PAUSED))
        .with_lane_counts()
        .order_by("-id")
        .only("id", "name", "status", "total", "counted_sent", "counted_failed", "counted_skipped")
    )
    return [
        BatchProgress(
            batch_id=batch.pk,
            name=batch.name,
            status=batch.status,
            total=batch.total,
            sent=batch.sent,
            failed=batch.failed,
            skipped=batch.skipped,
        )
        for batch in batches[:limit]
    ]


def open_alerts() -> dict[tuple[str, bool], int]:
    """Return open alerts by (kind, acknowledged)."""
    rows = (
        Alert.objects.open()
        .values_list("kind", Q(acknowledged_at__isnull=False))
        .annotate(n=Count("id"))
        .order_by()
    )
    return {(kind, bool(acknowledged)): n for kind, acknowledged, n in rows}


def live_workers() -> QuerySet[WorkerHeartbeat]:
    """Return workers alive and seen within WORKER_LOST_AFTER (database clock)."""
    lost_after = dt.timedelta(seconds=app_settings.WORKER_LOST_AFTER)
    return WorkerHeartbeat.objects.live(lost_after)
