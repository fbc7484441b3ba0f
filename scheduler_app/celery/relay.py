"""The relay: ``runworker --executor celery`` claims due jobs and publishes them to Celery.

A Worker whose claim publishes instead of running: the same SKIP LOCKED
claim and lease, and every side duty runworker runs (kill switches, lease
rescue, send sweeper, schedules). Published jobs stay in ``_running``, so
the lease thread renews them while they wait in the broker; once a Celery
worker starts one (its worker_id changes), the relay lets go of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from celery import Celery

from scheduler_app.celery.publishing import publish_jobs
from scheduler_app.db import backend
from scheduler_app.worker.duties import Duty
from scheduler_app.worker.execution import ClaimedJob
from scheduler_app.worker.loop import Worker
from scheduler_app.worker.options import WorkerOptions

logger = logging.getLogger("scheduler_app.celery")

#: After a failed publish, how long the relay waits before it claims again.
BROKER_BACKOFF = 1.0

#: Most seconds between looks at which published jobs Celery workers have started.
FOLLOW_INTERVAL = 0.25


class Relay(Worker):
    """Claim due jobs and publish them to Celery; never run a job here."""

    def __init__(
        self,
        options: WorkerOptions,
        *,
        app: Celery,
        max_in_flight: int,
        max_broker_wait: float,
        jobs_per_message: int = 1,
    ) -> None:
        super().__init__(options)
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_broker_wait = max_broker_wait
        self.jobs_per_message = jobs_per_message
        self._queue_of: dict[int, str] = {}  # published job -> its queue
        self._published_at: dict[int, float] = {}  # published job -> time.monotonic()
        self._broker_down_until = 0.0
        interval = min(options.poll_interval, FOLLOW_INTERVAL)
        self._duties.append(
            Duty(name="celery deliveries", interval=lambda: interval, run=self._follow)
        )

    def _start_executor(self) -> None:
        """Start no thread: Celery workers run the jobs."""

    def _in_flight(self, queue: str) -> int:
        return sum(1 for q in self._queue_of.values() if q == queue)

    def _free_slots(self) -> int:
        if time.monotonic() < self._broker_down_until:
            return 0
        queues = self._claimable_queues()
        return sum(max(self.max_in_flight - self._in_flight(q), 0) for q in queues)

    def _exchange(self, limit: int) -> int:
        """Record outcomes and claim apart: every claim goes through _claim, which publishes
        (the loop's pipelined finish-and-claim would claim jobs nobody publishes)."""
        self._flush()
        return self._claim(limit) if limit else 0

    def _claim(self, limit: int) -> int:
        """Claim up to ``limit`` jobs, each queue up to its in-flight cap, and publish them."""
        claimed: list[tuple[str, ClaimedJob]] = []
        paused_tasks = sorted(self._paused.tasks)
        for queue in self._claimable_queues():
            room = min(limit - len(claimed), self.max_in_flight - self._in_flight(queue))
            if room <= 0:
                continue
            rows = self._with_db(
                # Unstarted: a Celery worker starts them (start_jobs sets started_at), and
                # until then the rescue knows that none ran.
                lambda queue=queue, room=room: backend().claim_jobs(
                    worker=self.id,
                    queues=[queue],
                    limit=room,
                    lease=self.options.lease,
                    paused_tasks=paused_tasks,
                    started=False,
                )
            )
            claimed += [(queue, ClaimedJob.from_row(row)) for row in rows or ()]
        if not claimed:
            return 0
        self._counts["claimed"] += len(claimed)
        self._publish(claimed)
        return len(claimed)

    def _publish(self, claimed: list[tuple[str, ClaimedJob]]) -> None:
        now = time.monotonic()
        # Held before publishing, so the lease thread renews them while a slow broker takes
        # the batch, and a Celery worker may start one before the batch is done.
        for queue, job in claimed:
            self._hold_lease(job)
            self._queue_of[job.id] = queue
            self._published_at[job.id] = now
        published = 0
        if not self.stopping:
            published = publish_jobs(
                self.app,
                claimed,
                lease_seconds=self.options.lease_seconds,
                jobs_per_message=self.jobs_per_message,
            )
        self._counts["published"] += published
        unpublished = [job for _, job in claimed[published:]]
        self._let_go(job.id for job in unpublished)
        for job in unpublished:
            self._hand_back(job, "Relay %s could not publish it to Celery." % self.id)
        if unpublished and not self.stopping:
            self._broker_down_until = time.monotonic() + BROKER_BACKOFF

    def _leave_unfinished(self, jobs: list[ClaimedJob]) -> int:
        """Hand back the jobs still waiting in the broker at the shutdown timeout: no handler
        runs them, and a Celery worker that gets one later finds its token spent."""
        for job in jobs:
            self._hand_back(
                job,
                "Relay %s stopped; no Celery worker started the job within the %ss shutdown "
                "timeout and it was handed back." % (self.id, self.options.shutdown_timeout),
            )
        return 0

    def _follow(self) -> None:
        """Let go of published jobs a Celery worker started; hand back those waiting too long."""
        ids = list(self._published_at)
        if not ids:
            return
        waiting = self._with_db(lambda: self._still_published(ids))
        if waiting is None:
            return
        now = time.monotonic()
        overdue = [i for i in waiting if now - self._published_at[i] > self.max_broker_wait]
        for job_id in overdue:
            job = self._running[job_id].job
            logger.warning(
                "published job not started within CELERY_MAX_BROKER_WAIT, handed back to be "
                "published again job=%s task=%s waited=%.1fs",
                job_id,
                job.task_name,
                now - self._published_at[job_id],
            )
            self._hand_back(
                job,
                "No Celery worker started it within %ss of publishing (a lost message?); "
                "relay %s handed it back." % (self.max_broker_wait, self.id),
            )
        self._let_go([i for i in ids if i not in waiting or i in overdue])

    def _still_published(self, ids: list[int]) -> set[int]:
        """Return those of ``ids`` still running under this relay's lease (not yet started)."""
        return backend().still_published(ids, relay=self.id)

    def _let_go(self, ids: Iterable[int]) -> None:
        for job_id in ids:
            self._running.pop(job_id, None)
            self._queue_of.pop(job_id, None)
            self._published_at.pop(job_id, None)
