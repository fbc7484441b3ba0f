"""Each worker's own counters, served by ``runworker --metrics-port`` over HTTP.

The counters follow the worker signals (scheduler_app.signals): attempts by
task and outcome, first attempts' lateness, run durations, claimed jobs and
rate-limit waits. Each process has its own registry; Prometheus adds the
workers up (``sum by (task, outcome) (rate(...))``).
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from scheduler_app.signals import attempt_finished, jobs_claimed, rate_limit_waited
from scheduler_app.stats import LATENESS_BUCKETS

logger = logging.getLogger("scheduler_app.worker")

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class WorkerMetrics:
    """The counters of one worker process, in their own registry."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        Info("scheduler_worker", "This worker.", registry=self.registry).info(
            {"worker_id": worker_id}
        )
        self.runs = Counter(
            "scheduler_worker_runs",
            "Attempts this worker finished, by task and outcome.",
            ["task", "outcome"],
            registry=self.registry,
        )
        self.lateness = Histogram(
            "scheduler_worker_lateness_seconds",
            "Lateness (started - due) of the first attempts this worker finished, by task.",
            ["task"],
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "scheduler_worker_run_duration_seconds",
            "How long the attempts this worker finished ran, by task.",
            ["task"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.claimed = Counter(
            "scheduler_worker_claimed_jobs", "Jobs this worker claimed.", registry=self.registry
        )
        self.waits = Counter(
            "scheduler_worker_rate_limit_waits",
            "Sends that waited for the shared rate limiter, by limiter key.",
            ["key"],
            registry=self.registry,
        )
        self.waited = Counter(
            "scheduler_worker_rate_limit_wait_seconds",
            "Seconds sends waited for the shared rate limiter, by limiter key.",
            ["key"],
            registry=self.registry,
        )

    def connect(self) -> None:
        """Start counting: listen to the worker signals until disconnect()."""
        # Strong references: runworker keeps no other reference to this object.
        for signal, receiver, name in (
            (jobs_claimed, self._on_claimed, "claimed"),
            (attempt_finished, self._on_finished, "finished"),
            (rate_limit_waited, self._on_waited, "waited"),
        ):
            signal.connect(receiver, weak=False, dispatch_uid=self._uid(name))

    def disconnect(self) -> None:
        """Stop counting."""
        jobs_claimed.disconnect(dispatch_uid=self._uid("claimed"))
        attempt_finished.disconnect(dispatch_uid=self._uid("finished"))
        rate_limit_waited.disconnect(dispatch_uid=self._uid("waited"))

    def serve(self, port: int, address: str) -> None:
        """Serve the registry over HTTP on ``address:port`` from a daemon thread."""
        start_http_server(port, addr=address, registry=self.registry)
        logger.info(
            "worker metrics served worker=%s address=%s port=%s", self.worker_id, address, port
        )

    def _uid(self, name: str) -> str:
        return "scheduler_app.metrics:%s:%s" % (id(self), name)

    def _on_claimed(self, *, count: int, **kwargs: Any) -> None:
        self.claimed.inc(count)

    def _on_finished(
        self,
        *,
        task_name: str,
        outcome: str,
        attempt: int,
        lateness: float,
        duration: float,
        **kwargs: Any,
    ) -> None:
        self.runs.labels(task_name, outcome).inc()
        self.duration.labels(task_name).observe(max(duration, 0.0))
        if attempt == 1:
            self.lateness.labels(task_name).observe(max(lateness, 0.0))

    def _on_waited(self, *, key: str, seconds: float, **kwargs: Any) -> None:
        self.waits.labels(key).inc()
        self.waited.labels(key).inc(seconds)
