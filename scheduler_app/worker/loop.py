"""The Worker: claim due jobs in batches, run them on a bounded thread pool, record
outcomes in batches; schedule the side duties; stop gracefully.

Lifecycle: ``Worker(options).run()`` blocks until ``stop()`` (or a stop
signal, when run under ``graceful_signals``) and returns after running jobs
finished or were let go of (see drain); it raises WorkerFatal when it cannot go on.

Around the loop, each in its own module: the side duties (``duties/``: kill switches,
rescue, send sweeper, heartbeat, summary, schedules, lease renewal, alert evaluation),
the handlers that outlive their timeout (``abandoned``), the drain after stop()
(``drain``), the stop signals (``shutdown``) and the LISTEN wake-up (``wakeup``).

An executor that runs jobs elsewhere subclasses Worker (the Celery relay,
scheduler_app.celery.relay): it overrides ``_exchange``, ``_claim``, ``_free_slots`` and
``_start_executor``, and keeps the jobs it hands on leased with ``_hold_lease``,
so every side duty and the lease thread serve it unchanged.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections
from django.db.models import F

from scheduler_app.conf import app_settings
from scheduler_app.controls import PausedScopes
from scheduler_app.database import connection
from scheduler_app.database_clock import DatabaseNow
from scheduler_app.db import backend
from scheduler_app.exceptions import SchedulerError, UnknownTask
from scheduler_app.models import Job
from scheduler_app.registry import get_task
from scheduler_app.signals import attempt_finished, job_failed, jobs_claimed
from scheduler_app.worker import leases
from scheduler_app.worker.abandoned import AbandonedThreadsMixin
from scheduler_app.worker.drain import DrainMixin
from scheduler_app.worker.duties import Duty, DutyThread
from scheduler_app.worker.duties.alerts import alert_evaluation
from scheduler_app.worker.duties.heartbeat import Heartbeat
from scheduler_app.worker.duties.kill_switches import KillSwitches
from scheduler_app.worker.duties.lease_renewal import Leased, lease_renewal
from scheduler_app.worker.duties.rescue import rescue
from scheduler_app.worker.duties.schedules import Schedules
from scheduler_app.worker.duties.send_sweeper import send_sweeper
from scheduler_app.worker.duties.summary import Summary
from scheduler_app.worker.execution import ClaimedJob, Finish, execute, fail, hand_back
from scheduler_app.worker.options import WorkerOptions
from scheduler_app.worker.outcomes import CONNECTION_ERRORS, finish_jobs, record_one
from scheduler_app.worker.running import Running

logger = logging.getLogger("scheduler_app.worker")

T = TypeVar("T")

#: After the first job finishes, wait up to this long for more to finish, so
#: that recording outcomes and claiming again happen in batches, not per job.
BATCH_WINDOW = 0.002


class WorkerFatal(SchedulerError):
    """The worker cannot go on (e.g. the database stayed unreachable)."""

    code = "worker_fatal"


class Worker(AbandonedThreadsMixin, DrainMixin):
    """One runworker process's claim loop."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.id = options.worker_id
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._inbox: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[tuple[Running, Finish | BaseException]] = (
            queue.SimpleQueue()
        )
        self._running: dict[int, Running] = {}
        # Attempts whose thread was abandoned (see abandoned.py) and still runs.
        self._abandoned: list[Running] = []
        self._lock = threading.Lock()  # between a thread returning and _abandon giving up on it
        self._fatal: str | None = None
        # While the loop gathers finished jobs into a batch, executors wake it
        # only once this many are waiting (or BATCH_WINDOW passes).
        self._enough = max(1, min(options.concurrency, options.batch_size) // 2)
        self._gathering = False
        self._unflushed: list[Finish] = []
        self._threads: list[threading.Thread] = []
        self._listener: threading.Thread | None = None
        self._renewer: DutyThread | None = None
        self._renewer_stop = threading.Event()
        self._alerter: DutyThread | None = None
        self._db_down_since: float | None = None
        # The connection was lost since the last look (see _reconcile): a claim's commit may
        # have gone through without its reply reaching us.
        self._connection_lost = False
        self._kill_switches = KillSwitches(self.id, self._with_db)
        self._heartbeat = Heartbeat(
            self.id,
            queues=options.queues,
            concurrency=options.concurrency,
            interval=options.heartbeat_interval,
            running=lambda: len(self._running),
            with_db=self._with_db,
        )
        self._summary = Summary(
            self.id, interval=options.summary_interval, running=lambda: len(self._running)
        )
        self._schedules: Schedules | None = None
        self._duties: list[Duty] = [
            self._kill_switches.duty(),
            rescue(worker_id=self.id, lease_seconds=options.lease_seconds, with_db=self._with_db),
            send_sweeper(lease_seconds=options.lease_seconds, with_db=self._with_db),
            self._heartbeat.duty(),
            self._summary.duty(),
        ]
        if options.scheduler_interval is not None:
            self._schedules = Schedules(
                interval=options.scheduler_interval,
                stopping=lambda: self.stopping,
                with_db=self._with_db,
            )
            self._duties.append(self._schedules.duty())

    @property
    def _paused(self) -> PausedScopes:
        """The kill switches as this worker last read them."""
        return self._kill_switches.paused

    @property
    def _counts(self) -> Counter[str]:
        """What this worker did since the last summary."""
        return self._summary.counts

    # -- lifecycle ---------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; run() returns once running jobs finished or were let go of."""
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self) -> None:
        """Run until stop(); raise WorkerFatal if the worker cannot go on."""
        self._start_threads()
        logger.info(
            "worker started worker=%s queues=%s concurrency=%s batch=%s vendor=%s",
            self.id,
            ",".join(self.options.queues),
            self.options.concurrency,
            self.options.batch_size,
            connection.vendor,
        )
        self._heartbeat.started()
        if self._schedules is not None:
            self._schedules.started()
        try:
            while not self.stopping:
                self._turn()
            self._drain()
            self._heartbeat.stopped()
        finally:
            for _ in self._threads:
                self._inbox.put(None)
            self._renewer_stop.set()
            for thread in (self._listener, self._renewer, self._alerter):
                if thread is not None:
                    thread.join(timeout=5)
            self._summary.log()
            connection.close()
        logger.info("worker stopped worker=%s", self.id)
        if self._fatal is not None:
            raise WorkerFatal(self._fatal)

    # -- one turn of the loop ----------------------------------------------

    def _turn(self) -> None:
        self._wake.clear()
        self._collect()
        self._reconcile()
        self._side_duties()
        free = self._free_slots()
        limit = 0 if self.stopping else min(free, self.options.batch_size)
        claimed = self._exchange(limit)
        if limit and claimed == limit:
            return  # a full batch: more may be due, claim again as slots free up
        self._wait(self._sleep_time(idle=claimed == 0 and free > 0))

    def _exchange(self, limit: int) -> int:
        """Record the collected outcomes and claim up to ``limit`` jobs; return how many.

        When there is both to do, one round trip and one commit do both
        (backend().finish_and_claim); if the database refuses that, each is
        done on its own, so that a refused outcome never costs the claim.
        """
        queues = self._claimable_queues() if limit else []
        if not queues:
            self._flush()
            return 0
        if not self._unflushed:
            return self._claim(limit)
        finishes = self._unflushed
        if any(finish.cursors for finish in finishes):
            # Cursor proposals are saved with their outcomes (outcomes.finish_jobs).
            self._flush()
            return self._claim(limit)
        arguments = self._claim_arguments(queues, limit)
        try:
            result = self._with_db(
                lambda: backend().finish_and_claim([f.as_row() for f in finishes], **arguments)
            )
        except DatabaseError:
            logger.exception(
                "finish and claim refused, recording outcomes and claiming apart worker=%s",
                self.id,
            )
            self._flush()
            return self._claim(limit)
        if result is None:
            return 0  # the database is away; the outcomes are kept for the next turn
        accepted, rows = result
        self._unflushed = []
        self._settle(finishes, accepted)
        return self._took(rows)

    def _wait(self, timeout: float) -> None:
        """Sleep until woken or ``timeout``; once woken by a finished job, gather a batch."""
        self._wake.wait(timeout)
        if self.stopping or not 0 < self._outbox.qsize() < min(self._enough, len(self._running)):
            return
        # Executor threads now wake us only once enough jobs have finished.
        self._gathering = True
        self._wake.clear()
        if self._outbox.qsize() < min(self._enough, len(self._running)):
            self._wake.wait(BATCH_WINDOW)
        self._gathering = False

    def _free_slots(self) -> int:
        return self.options.concurrency - len(self._running)

    def _claimable_queues(self) -> list[str]:
        """Return the queues this worker may claim from under the kill switches."""
        paused = self._paused
        if paused.everything:
            return []
        return [q for q in self.options.queues if q not in paused.queues]

    def _claim(self, limit: int) -> int:
        queues = self._claimable_queues()
        if not queues:
            return 0
        arguments = self._claim_arguments(queues, limit)
        rows = self._with_db(lambda: backend().claim_jobs(**arguments))
        return self._took(rows or [])

    def _claim_arguments(self, queues: list[str], limit: int) -> dict:
        """Return the keyword arguments of backend().claim_jobs() for this worker."""
        return {
            "worker": self.id,
            "queues": queues,
            "limit": limit,
            "lease": self.options.lease,
            "paused_tasks": sorted(self._paused.tasks),
        }

    def _took(self, rows: list[tuple]) -> int:
        """Start the jobs a claim returned; return how many."""
        for row in rows:
            self._take(ClaimedJob.from_row(row))
        self._counts["claimed"] += len(rows)
        jobs_claimed.send(sender=Worker, worker_id=self.id, count=len(rows))
        return len(rows)

    def _take(self, job: ClaimedJob) -> None:
        """Start a job just claimed, unless an earlier attempt of it still runs here."""
        if self.stopping:
            # The stop signal arrived while we were claiming: don't start it.
            self._hand_back(job, "Worker %s stopped before starting it." % self.id)
            return
        stuck = next((r for r in self._abandoned if r.job.id == job.id), None)
        if stuck is not None:
            # Its hold lapsed (the database was away for a lease): hold it again.
            logger.warning(
                "job claimed again while an abandoned attempt still runs here, handed back "
                "job=%s task=%s attempt=%s",
                job.id,
                job.task_name,
                job.attempt,
            )
            self._hold(stuck, hand_back(job, self._held_reason()))
            return
        earlier = self._running.get(job.id)
        if earlier is not None:
            logger.warning(
                "job claimed again while an earlier attempt still runs here, it starts when "
                "that attempt ends job=%s task=%s attempt=%s earlier_attempt=%s",
                job.id,
                job.task_name,
                job.attempt,
                earlier.job.attempt,
            )
            earlier.next = job
            return
        self._start(job)

    def _reconcile(self) -> None:
        """After a lost connection, hand back the jobs running under this worker's id that
        it does not know, without using an attempt.

        A claim whose commit went through but whose reply was lost (a failover, a restart
        mid-commit) leaves such rows. Nothing here runs them nor renews their leases, so
        the rescue would charge each an attempt it never started: a max_attempts=1 job
        would fail without running.
        """
        if not self._connection_lost:
            return
        self._connection_lost = False  # set again if this look loses the connection too
        known = set(self._running) | {finish.job.id for finish in self._unflushed}
        rows = self._with_db(lambda: leases.claims_of(self.id))
        for row in rows or ():
            job = ClaimedJob.from_row(row)
            if job.id in known:
                continue
            logger.warning(
                "job claimed by a claim whose reply was lost, handed back job=%s task=%s worker=%s",
                job.id,
                job.task_name,
                self.id,
            )
            self._hand_back(
                job,
                "Worker %s claimed it, but the reply to the claim was lost with the database "
                "connection; handed back without using an attempt." % self.id,
            )

    def _hand_back(self, job: ClaimedJob, reason: str) -> None:
        self._unflushed.append(hand_back(job, reason))
        self._counts["handed_back"] += 1

    def _hold_lease(self, job: ClaimedJob) -> None:
        """Renew ``job``'s lease with the running jobs' without running it here.

        For executors that run jobs elsewhere (the Celery relay's published jobs).
        """
        self._running[job.id] = Running(job=job, deadline=None)

    def _start(self, job: ClaimedJob) -> None:
        running = Running(job=job, deadline=self._deadline(job))
        self._running[job.id] = running
        self._inbox.put(running)

    def _deadline(self, job: ClaimedJob) -> float | None:
        try:
            timeout = get_task(job.task_name).timeout
        except UnknownTask:
            return None
        return time.monotonic() + timeout.total_seconds() if timeout else None

    def _collect(self) -> None:
        """Take finished attempts from the executor threads."""
        while True:
            try:
                running, outcome = self._outbox.get_nowait()
            except queue.Empty:
                return
            if running.abandoned:
                self._end_abandoned(running)
                continue
            job = running.job
            del self._running[job.id]
            if running.next is not None and not running.finalised:
                # This attempt is stale (fencing refuses its outcome): its successor may start.
                if self.stopping:
                    self._hand_back(running.next, "Worker %s stopped before starting it." % self.id)
                else:
                    self._start(running.next)
            if running.finalised:
                logger.warning(
                    "late completion discarded job=%s task=%s: it was handed back",
                    job.id,
                    job.task_name,
                )
                continue
            if isinstance(outcome, BaseException):
                # execute() itself broke (a bug, or the interpreter shutting down).
                outcome = fail(running.job, outcome, retryable=False)
            elif running.timed_out:
                outcome = self._timeout_failure(running.job)
            self._unflushed.append(outcome)

    def _flush(self) -> None:
        """Write the collected outcomes in one batch, fenced by lease token."""
        if not self._unflushed:
            return
        finishes = self._unflushed
        accepted = self._with_db(lambda: self._record(finishes))
        if accepted is None:
            return  # the database is away; keep them and try again next turn
        self._unflushed = []
        self._settle(finishes, accepted)

    def _settle(self, finishes: list[Finish], accepted: set[tuple[int, int]]) -> None:
        """Count the recorded outcomes and signal failures; report the ones fencing refused."""
        for finish in finishes:
            job = finish.job
            if job.fence not in accepted:
                logger.warning(
                    "stale completion discarded job=%s task=%s attempt=%s: lease lost, "
                    "the job was rescued or claimed again",
                    job.id,
                    job.task_name,
                    job.attempt,
                )
                continue
            self._counts[finish.outcome] += 1
            attempt_finished.send(
                sender=Worker,
                worker_id=self.id,
                task_name=job.task_name,
                outcome=finish.outcome,
                attempt=job.attempt,
                lateness=(job.started_at - job.due_at).total_seconds(),
                duration=(finish.finished_at - job.started_at).total_seconds(),
            )
            if finish.status == Job.Status.FAILED:
                job_failed.send(
                    sender=Job, job_id=job.id, task_name=job.task_name, error=finish.error
                )

    def _record(self, finishes: list[Finish]) -> set[tuple[int, int]]:
        """Record outcomes in one statement; if the database refuses it, record them one by one.

        Outcomes are made storable before they get here, so a refusal is a
        surprise: it must cost only the outcome it concerns, never the batch.
        """
        try:
            return finish_jobs(finishes, worker=self.id)
        except CONNECTION_ERRORS:
            raise
        except DatabaseError:
            logger.exception(
                "batched finish refused, recording outcomes one by one worker=%s outcomes=%s",
                self.id,
                len(finishes),
            )
        accepted: set[tuple[int, int]] = set()
        for finish in finishes:
            accepted |= record_one(finish, worker=self.id)
        return accepted

    def _side_duties(self) -> None:
        for name, thread in (
            ("LISTEN", self._listener),
            ("lease renewal", self._renewer),
            ("alert evaluation", self._alerter),
        ):
            if thread is not None and not thread.is_alive() and not self.stopping:
                raise WorkerFatal("The %s thread died; see the traceback above." % name)
        now = time.monotonic()
        self._expire_timeouts(now)
        for duty in self._duties:
            if now >= duty.next_at:
                duty.next_at = now + duty.interval()
                duty.run()

    def _leased(self) -> Leased:
        """Return what the lease renewal renews: the jobs running here (but those handed
        back at shutdown), and the jobs held while their abandoned thread runs."""
        # A copy made in C, atomic under the GIL: the loop changes _running meanwhile.
        running = self._running.copy()
        ids = [job_id for job_id, r in running.items() if not r.finalised]
        held = [(r.held.id, r.held.lease_token) for r in list(self._abandoned) if r.held]
        return ids, held

    def _sleep_time(self, *, idle: bool) -> float:
        timeout = min(
            self.options.poll_interval, *(d.next_at - time.monotonic() for d in self._duties)
        )
        if self._listener is not None:
            next_run_at = self._listener.pop_next_run_at()  # type: ignore[attr-defined]
            if next_run_at is not None:
                timeout = min(timeout, max(next_run_at - time.time(), 0))
        if idle:
            next_due = self._with_db(self._next_due_in)
            if next_due is not None:
                timeout = min(timeout, next_due)
        grace = self.options.timeout_grace
        deadlines = [
            r.deadline + (grace if r.timed_out else 0)
            for r in self._running.values()
            if r.deadline is not None
        ]
        if deadlines:
            timeout = min(timeout, max(min(deadlines) - time.monotonic(), 0))
        return max(timeout, 0.0)

    def _next_due_in(self) -> float | None:
        """Return seconds until the earliest pending job this worker may claim is due.

        Paused queues and tasks are left out: a due job behind a kill switch
        must not make an idle worker poll without sleeping.
        """
        queues = self._claimable_queues()
        if not queues:
            return None
        # Measured against the database's clock, which claims compare run_at with: a host
        # whose clock runs ahead must not poll without sleeping until the job is due.
        wait = (
            Job.objects.by_due_time(queues, self._paused.tasks)
            .annotate(wait=F("run_at") - DatabaseNow())
            .values_list("wait", flat=True)
            .first()
        )
        return None if wait is None else max(wait.total_seconds(), 0)

    # -- helpers -------------------------------------------------------------

    def _start_threads(self) -> None:
        for _ in range(self.options.concurrency):
            self._start_executor()
        listen_on = app_settings.LISTEN_DATABASE
        if connection.vendor == "postgresql" and listen_on != "":
            from scheduler_app.worker.wakeup import Listener

            self._listener = Listener(
                self.options.queues, self._wake, self._stopping, alias=listen_on
            )
            self._listener.start()
        self._renewer = lease_renewal(
            worker_id=self.id,
            lease_seconds=self.options.lease_seconds,
            leased=self._leased,
            stop=self._renewer_stop,
        )
        self._renewer.start()
        if self.options.alert_interval is not None:
            self._alerter = alert_evaluation(
                worker_id=self.id,
                every=self.options.alert_interval,
                lease_seconds=self.options.lease_seconds,
                stop=self._stopping,
            )
            self._alerter.start()

    def _start_executor(self) -> None:
        thread = threading.Thread(
            target=self._execute_forever,
            name="scheduler-exec-%s" % len(self._threads),
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    def _execute_forever(self) -> None:
        while True:
            running = self._inbox.get()
            if running is None:
                return
            try:
                outcome: Finish | BaseException = execute(running.job, self._stopping.is_set)
            except BaseException as exc:
                outcome = exc
            # A handler thread holds connections only while its handler runs, whatever
            # CONN_MAX_AGE says (with Django's pool, closing hands one back to the pool).
            try:
                connections.close_all()
            except Exception:  # the outcome must reach the loop whatever closing did
                logger.exception("could not close a handler's connection job=%s", running.job.id)
            with self._lock:
                running.returned = True
                abandoned = running.abandoned
            self._outbox.put((running, outcome))
            if not self._gathering or self._outbox.qsize() >= self._enough:
                self._wake.set()
            if abandoned:
                return  # another thread took this one's place when it was abandoned

    def _with_db(self, operation: Callable[[], T]) -> T | None:
        """Run a database operation; on a lost connection, reconnect next turn.

        Only connection errors count as "database down"; any other error
        propagates. Raises WorkerFatal once the database has been unreachable
        for longer than database_unavailable_timeout.
        """
        try:
            result = operation()
        except CONNECTION_ERRORS as exc:
            connection.close()
            self._connection_lost = True
            now = time.monotonic()
            if self._db_down_since is None:
                self._db_down_since = now
            down_for = now - self._db_down_since
            logger.warning(
                "database error, will retry worker=%s down_for=%.1fs error=%s",
                self.id,
                down_for,
                exc,
            )
            if down_for > self.options.database_unavailable_timeout:
                raise WorkerFatal(
                    "Database unreachable for %.0fs (limit %ss): %s"
                    % (down_for, self.options.database_unavailable_timeout, exc)
                ) from exc
            self._stopping.wait(min(1.0, self.options.poll_interval))
            return None
        if self._db_down_since is not None:
            logger.info("database reachable again worker=%s", self.id)
            self._db_down_since = None
        return result
