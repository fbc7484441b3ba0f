"""Gauges read from the database: queues, recent runs and lateness, active sends."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric

from scheduler_app import stats
from scheduler_app.conf import app_settings
from scheduler_app.db import database_now
from scheduler_app.models import Alert


class DatabaseCollector:
    """A prometheus_client collector: every collect() reads the numbers afresh."""

    def collect(self) -> Iterator[Metric]:
        # The database's clock, which run times and started_at are written from.
        now = database_now()
        yield from queue_metrics(now)
        since = now - dt.timedelta(seconds=app_settings.METRICS_WINDOW)
        yield from run_metrics(stats.recent_runs(since, now))
        yield from send_metrics()
        yield from operability_metrics()


def queue_metrics(now: dt.datetime) -> Iterator[Metric]:
    """Yield jobs by queue and state, due jobs and the age of the oldest due job."""
    jobs = GaugeMetricFamily(
        "scheduler_jobs", "Unfinished jobs by queue and state.", labels=["queue", "state"]
    )
    due = GaugeMetricFamily(
        "scheduler_jobs_due", "Pending jobs whose time has come, by queue.", labels=["queue"]
    )
    oldest = GaugeMetricFamily(
        "scheduler_oldest_due_job_age_seconds",
        "How long the oldest due pending job has waited, by queue (0: none is due).",
        labels=["queue"],
    )
    depths = {depth.queue: depth for depth in stats.queue_depths(now)}
    for queue in sorted(set(app_settings.QUEUES) | set(depths)):
        depth = depths.get(queue) or stats.QueueDepth(
            queue=queue, pending=0, due=0, running=0, oldest_due_at=None
        )
        jobs.add_metric([queue, "pending"], depth.pending)
        jobs.add_metric([queue, "running"], depth.running)
        due.add_metric([queue], depth.due)
        oldest.add_metric([queue], depth.oldest_due_age(now))
    yield from (jobs, due, oldest)


def run_metrics(runs: list[stats.TaskRuns]) -> Iterator[Metric]:
    """Yield recent attempts by task and outcome, first attempts' lateness and success ratio."""
    window = "in the last METRICS_WINDOW seconds"
    attempts = GaugeMetricFamily(
        "scheduler_recent_runs",
        "Attempts that started %s, by task and outcome." % window,
        labels=["task", "outcome"],
    )
    lateness = GaugeHistogramMetricFamily(
        "scheduler_recent_lateness_seconds",
        "Lateness (started - due) of first attempts that started %s, by task." % window,
        labels=["task"],
    )
    ratio = GaugeMetricFamily(
        "scheduler_recent_first_attempt_success_ratio",
        "Share of first attempts that succeeded, of those that started %s and "
        "succeeded or failed, by task." % window,
        labels=["task"],
    )
    for task in runs:
        for outcome, count in sorted(task.outcomes.items()):
            attempts.add_metric([task.task_name, outcome], count)
        buckets = [(_bound(bound), count) for bound, count in task.lateness_buckets]
        lateness.add_metric(
            [task.task_name],
            [*buckets, ("+Inf", task.first_attempts)],
            gsum_value=task.lateness_sum,
        )
        if task.first_attempt_success_ratio is not None:
            ratio.add_metric([task.task_name], task.first_attempt_success_ratio)
    yield from (attempts, lateness, ratio)


def send_metrics() -> Iterator[Metric]:
    """Yield batches by status, and the progress of the most recent sending or paused ones."""
    batches = GaugeMetricFamily(
        "scheduler_send_batches", "Unfinished send batches by status.", labels=["status"]
    )
    for status, count in sorted(stats.batches_by_status().items()):
        batches.add_metric([status], count)
    recipients = GaugeMetricFamily(
        "scheduler_send_batch_recipients",
        "Recipients of a sending or paused batch by status (the METRICS_MAX_BATCHES most "
        "recent batches).",
        labels=["batch", "status"],
    )
    paused = GaugeMetricFamily(
        "scheduler_send_batch_paused",
        "1 if the batch is paused, 0 if it is sending.",
        labels=["batch"],
    )
    for batch in stats.batch_progress(app_settings.METRICS_MAX_BATCHES):
        label = str(batch.batch_id)
        for status in ("sent", "failed", "skipped", "pending"):
            recipients.add_metric([label, status], getattr(batch, status))
        paused.add_metric([label], 1 if batch.status == "paused" else 0)
    yield from (batches, recipients, paused)


def operability_metrics() -> Iterator[Metric]:
    """Yield open alerts by kind and acknowledgement, and the number of live workers."""
    alerts = GaugeMetricFamily(
        "scheduler_open_alerts",
        "Open alerts by kind and whether someone acknowledged them.",
        labels=["kind", "acknowledged"],
    )
    counts = stats.open_alerts()
    for kind in Alert.Kind.values:
        for acknowledged in (False, True):
            alerts.add_metric(
                [kind, str(acknowledged).lower()], counts.get((kind, acknowledged), 0)
            )
    workers = GaugeMetricFamily(
        "scheduler_live_workers", "Workers alive and seen within WORKER_LOST_AFTER seconds."
    )
    workers.add_metric([], stats.live_workers().count())
    yield from (alerts, workers)


def _bound(seconds: float) -> str:
    return repr(float(seconds))
