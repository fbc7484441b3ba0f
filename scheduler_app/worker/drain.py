"""Drain: after stop(), let running jobs finish within SHUTDOWN_TIMEOUT and record their
outcomes; give back the attempts of those still running then, without using an attempt
(graceful shutdown)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from scheduler_app.worker import leases
from scheduler_app.worker.execution import ClaimedJob, Finish
from scheduler_app.worker.options import WorkerOptions
from scheduler_app.worker.running import Running

logger = logging.getLogger("scheduler_app.worker")


class DrainMixin:
    """The Worker's drain: what run() does once stop() was called.

    Works on the worker's running attempts (``_running``) and the outcomes waiting to be
    recorded (``_unflushed``), with the loop's own steps (``_collect()``, ``_flush()``,
    ``_side_duties()``, ``_reconcile()``). An executor that runs jobs elsewhere overrides
    ``_leave_unfinished`` (the Celery relay hands its published jobs back).
    """

    id: str
    options: WorkerOptions
    _running: dict[int, Running]
    _unflushed: list[Finish]
    _counts: Counter[str]
    _fatal: str | None
    _wake: threading.Event

    def _drain(self) -> None:
        """After stop(): wait for running jobs up to the shutdown timeout, then let go of the
        rest (see _leave_unfinished)."""
        deadline = time.monotonic() + self.options.shutdown_timeout
        while self._running and time.monotonic() < deadline:
            self._wake.clear()
            self._collect()
            self._flush()
            self._side_duties()
            if self._running:
                self._wake.wait(min(deadline - time.monotonic(), 0.5))
        self._collect()
        unfinished = [running for running in self._running.values() if not running.finalised]
        for running in unfinished:
            running.finalised = True  # not renewed any more; whatever it returns is discarded
        lost = self._leave_unfinished([running.next or running.job for running in unfinished])
        self._reconcile()
        self._flush()
        lost += len(self._unflushed)
        if lost and self._fatal is None:
            # Not a clean stop: an attempt not given back is charged by the rescue (guarantee 11).
            self._fatal = (
                "could not record %s outcomes before exiting (the database is away); their "
                "leases will expire and the jobs run again" % lost
            )
            logger.error("%s worker=%s", self._fatal, self.id)

    def _leave_unfinished(self, jobs: list[ClaimedJob]) -> int:
        """Give back the attempts of jobs whose handlers still run at the shutdown timeout,
        leaving them running under a lease no longer renewed; return how many could not be.

        Not handed back: a pending job could be claimed by another worker, or
        cancelled, while its handler still runs here, and that thread runs
        until this process exits, after which nothing here can write. Their
        leases lapse within a lease of the last renewal, and the rescue puts
        them back to pending; the attempt is not charged, as it was given
        back here.
        """
        if not jobs:
            return 0
        reason = (
            "Worker %s stopped; the job did not finish within the %ss shutdown timeout. Its "
            "handler was still running, so the job stays running until its lease lapses, then "
            "runs again without using an attempt." % (self.id, self.options.shutdown_timeout)
        )
        fences = [job.fence for job in jobs]
        released = self._with_db(lambda: leases.give_back_attempts(fences, reason))
        if released is None:
            return len(fences)
        self._counts["handed_back"] += len(fences)
        logger.warning(
            "worker stopped with handlers still running, their jobs run again once their "
            "leases lapse worker=%s jobs=%s",
            self.id,
            ",".join(str(job_id) for job_id, _ in fences),
        )
        return 0
