"""Abandoned threads: a handler still running past its task's timeout plus TIMEOUT_GRACE.

A thread cannot be interrupted or killed. A job past its timeout keeps its slot and its
lease until the handler returns, and fails as a timeout when it does; past the grace too,
the worker gives up on the thread: it records the attempt, starts another thread in its
place, and holds the job (see holds) while the abandoned thread lives, so a retry never
runs beside it. More abandoned threads than CONCURRENCY stop the worker.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter

from scheduler_app.models import Job
from scheduler_app.registry import get_task
from scheduler_app.worker import holds
from scheduler_app.worker.execution import ClaimedJob, Finish, hand_back, timeout_failure
from scheduler_app.worker.options import WorkerOptions
from scheduler_app.worker.running import Running

logger = logging.getLogger("scheduler_app.worker")


class AbandonedThreadsMixin:
    """The Worker's handling of handlers that outlive their timeout.

    Works on the worker's running attempts (``_running``), the abandoned ones
    (``_abandoned``, whose holds the lease renewal extends), the outcomes waiting to be
    recorded (``_unflushed``); starts a thread with ``_start_executor()`` and stops the
    worker with ``stop()``.
    """

    id: str
    options: WorkerOptions
    _running: dict[int, Running]
    _abandoned: list[Running]
    _lock: threading.Lock
    _unflushed: list[Finish]
    _counts: Counter[str]
    _fatal: str | None

    def _expire_timeouts(self, now: float) -> None:
        """Mark jobs past their task's timeout; each fails as a timeout when it returns.

        A thread cannot be interrupted, so the job keeps its slot and its
        lease until the handler returns: a retry never runs beside it.
        """
        for running in list(self._running.values()):
            if running.deadline is None or now < running.deadline:
                continue
            if not running.timed_out:
                running.timed_out = True
                job = running.job
                logger.warning(
                    "job timed out, its attempt will fail when the handler returns "
                    "job=%s task=%s attempt=%s",
                    job.id,
                    job.task_name,
                    job.attempt,
                )
            if now >= running.deadline + self.options.timeout_grace:
                self._abandon(running)

    def _abandon(self, running: Running) -> None:
        """Give up on a handler still running past its timeout plus grace.

        A thread cannot be killed, so it runs on, and a new thread takes its
        place. The attempt is recorded under the timeout rule; a retry is held
        (see holds) until the thread ends, so it never runs beside it. More
        abandoned threads than CONCURRENCY stop the worker with WorkerFatal.
        """
        with self._lock:
            if running.returned:
                return  # it just returned: its outcome waits in the outbox
            running.abandoned = True
        job = running.job
        del self._running[job.id]
        self._abandoned.append(running)
        self._start_executor()
        self._counts["abandoned"] += 1
        logger.error(
            "job abandoned, its handler did not return within its timeout plus grace; the thread "
            "runs on and the job is held until it ends job=%s task=%s attempt=%s timeout=%ss "
            "grace=%ss abandoned_threads=%s",
            job.id,
            job.task_name,
            job.attempt,
            get_task(job.task_name).timeout.total_seconds(),  # type: ignore[union-attr]
            self.options.timeout_grace,
            len(self._abandoned),
        )
        if running.next is None:
            self._hold(running, self._timeout_failure(job, abandoned=True))
        else:
            self._hold(running, hand_back(running.next, self._held_reason()))
        if len(self._abandoned) > self.options.concurrency and self._fatal is None:
            self._fatal = (
                "%s handler threads did not return after their timeout (more than the "
                "concurrency, %s); restart the worker."
                % (len(self._abandoned), self.options.concurrency)
            )
            logger.error("stopping: %s worker=%s", self._fatal, self.id)
            self.stop()

    def _held_reason(self) -> str:
        return (
            "Worker %s handed it back: an abandoned attempt of this job still runs there; "
            "it is held until that ends." % self.id
        )

    def _hold(self, running: Running, finish: Finish) -> None:
        """Record ``finish``; if the job runs again, hold it while ``running``'s thread lives."""
        if finish.status == Job.Status.PENDING:
            running.held = finish.job
            running.retry_at = finish.run_at or finish.finished_at
            finish = dataclasses.replace(
                finish, run_at=max(running.retry_at, finish.job.now() + self.options.lease)
            )
        self._unflushed.append(finish)

    def _end_abandoned(self, running: Running) -> None:
        """An abandoned thread returned: discard its outcome, let its held job run."""
        self._abandoned.remove(running)
        job = running.job
        logger.warning(
            "abandoned handler returned, its outcome is discarded job=%s task=%s attempt=%s",
            job.id,
            job.task_name,
            job.attempt,
        )
        held, retry_at = running.held, running.retry_at
        if held is not None and retry_at is not None:
            self._with_db(lambda: holds.release(held.id, held.lease_token, retry_at))

    def _timeout_failure(self, job: ClaimedJob, *, abandoned: bool = False) -> Finish:
        grace = self.options.timeout_grace if abandoned else None
        return timeout_failure(job, abandoned_after=grace)
