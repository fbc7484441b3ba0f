"""Run one claimed job and decide what its attempt leads to.

``execute()`` is pure with respect to the database: it returns a Finish
that the worker writes later, in a batch, fenced by the lease token.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import re
import time
import traceback
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.cursors import DEFAULT_COUNT_KEY, CursorProposal, Cursors, with_processed_count
from scheduler_app.exceptions import (
    JobTimeout,
    RetryLater,
    SchedulerError,
    UnknownTask,
    describe,
)
from scheduler_app.models import Job, JobAttempt
from scheduler_app.registry import JobContext, TaskSpec, get_task

logger = logging.getLogger("scheduler_app.worker")

Status = Job.Status
Outcome = JobAttempt.Outcome

#: How soon a job of a task this worker does not know is looked at again.
UNKNOWN_TASK_RECHECK = dt.timedelta(seconds=10)

#: A NUL escape in JSON text: ``\\u0000`` preceded by an even number of backslashes.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedJob:
    """A job this worker holds a lease on, as the claim statement returned it."""

    id: int
    task_name: str
    payload: Any
    payload_version: int
    attempt: int
    max_attempts: int
    scheduled_for: dt.datetime
    due_at: dt.datetime
    unique_key: str | None
    lease_token: int
    retry_later_deadline: dt.datetime | None
    #: When the claim started it, by the database's clock (None: a row the Celery relay
    #: published and no worker started yet).
    started_at: dt.datetime | None
    #: How far the database's clock was ahead of this host's at the claim.
    clock_offset: dt.timedelta
    #: This host's monotonic clock when the claim returned (see now()).
    claimed_monotonic: float = dataclasses.field(default_factory=time.monotonic)

    @classmethod
    def from_row(cls, row: tuple) -> ClaimedJob:
        """Return the job of a row that a claim (or start) statement just returned."""
        (
            job_id,
            task_name,
            payload,
            version,
            attempt,
            max_attempts,
            scheduled_for,
            due_at,
            unique_key,
            token,
            deadline,
            started_at,
        ) = row
        return cls(
            id=job_id,
            task_name=task_name,
            payload=json.loads(payload) if isinstance(payload, str) else payload,
            payload_version=version,
            attempt=attempt,
            max_attempts=max_attempts,
            scheduled_for=scheduled_for,
            due_at=due_at,
            unique_key=unique_key,
            lease_token=token,
            retry_later_deadline=deadline,
            started_at=started_at,
            # A row the Celery relay published and no worker started has no start yet.
            clock_offset=dt.timedelta(0) if started_at is None else started_at - clock.now(),
        )

    def now(self) -> dt.datetime:
        """Return the database's clock: as the claim read it, moved on by this host's
        monotonic clock since (a frozen clock's moves while a test freezes it).

        What this attempt writes for other hosts to compare (retry and hold times, when it
        finished) is measured from it, so a host whose clock is off neither retries early
        nor holds a job in the past, and a step of the host's clock in the middle of the
        attempt (NTP, a virtual machine resumed) moves none of them.
        """
        if clock.frozen_at() is not None or self.started_at is None:
            return clock.now() + self.clock_offset
        return self.started_at + dt.timedelta(seconds=time.monotonic() - self.claimed_monotonic)

    @property
    def fence(self) -> tuple[int, int]:
        """(job id, lease token): what finish_jobs() reports an accepted outcome by. Two
        attempts of one job can reach one batch; only the current token's outcome counts."""
        return (self.id, self.lease_token)

    def context(
        self, should_stop: Callable[[], bool] | None = None, cursors: Cursors | None = None
    ) -> JobContext:
        return JobContext(
            cursors=cursors or Cursors(),
            should_stop=should_stop or (lambda: False),
            job_id=self.id,
            task_name=self.task_name,
            payload=self.payload,
            payload_version=self.payload_version,
            attempt=self.attempt,
            scheduled_for=self.scheduled_for,
            idempotency_key=self.unique_key or str(self.id),
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finish:
    """What one attempt led to: the job's next status and its history row."""

    job: ClaimedJob
    status: str
    outcome: str
    finished_at: dt.datetime
    run_at: dt.datetime | None = None  # next attempt time, for retries
    refund: int = 0  # 1 when the attempt does not count (retry later, shutdown)
    error: str = ""
    result: str | None = None  # JSON text
    retry_later_deadline: dt.datetime | None = None
    #: Cursors to save with a success (see scheduler_app.cursors).
    cursors: tuple[CursorProposal, ...] = ()

    def as_row(self) -> tuple:
        """Return the column tuple db.<vendor>.finish_jobs() takes."""
        job = self.job
        return (
            job.id,
            job.lease_token,
            self.status,
            self.outcome,
            self.run_at,
            self.refund,
            self.error,
            self.finished_at,
            self.result,
            self.retry_later_deadline,
            job.attempt,
            job.task_name,
            job.due_at,
            job.started_at,
            self.needs_history_row,
        )

    @property
    def needs_history_row(self) -> bool:
        """Return whether the attempt needs a JobAttempt row to be told later.

        A first attempt that succeeds is fully described by the job row (its
        worker, attempt 1, started_at, finished_at): see Job.attempt_history().
        """
        return not (self.outcome == Outcome.SUCCEEDED and self.job.attempt == 1)

    def storable(self, reason: str) -> Finish:
        """Return this outcome with its result and error cut down to what any database stores."""
        note = "(The outcome could not be stored as it was: %s)" % reason
        return dataclasses.replace(
            self,
            result=None if self.result is None else unstorable_result(reason),
            error=storable_text("%s\n\n%s" % (self.error[:1000], note) if self.error else ""),
        )


def storable_text(text: str) -> str:
    """Return ``text`` with what PostgreSQL text cannot hold (NUL, lone surrogates) escaped."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_result(reason: str) -> str:
    """Return the JSON recorded instead of a result the database cannot store."""
    return json.dumps({"unstorable_result": storable_text(reason)})


def execute(job: ClaimedJob, should_stop: Callable[[], bool] | None = None) -> Finish:
    """Run ``job``'s handler in this thread and return how the attempt ended."""
    try:
        spec = get_task(job.task_name)
    except UnknownTask as exc:
        return _unknown_task(job, exc)
    try:
        spec.check_payload_version(job.payload_version)
    except SchedulerError as exc:
        # Scheduled by newer code: retrying on this worker cannot help.
        return fail(job, exc, retryable=False, with_traceback=False)
    cursors = Cursors()
    try:
        value = spec(job.context(should_stop, cursors))
    except RetryLater as exc:
        return _retry_later(job, spec, exc)
    except Exception as exc:
        return fail(job, exc, retryable=spec.retry.should_retry(exc), spec=spec)
    finally:
        close_old_connections()
    proposals = cursors.proposals()
    if proposals:
        count_key = spec.targets.count_key or DEFAULT_COUNT_KEY
        value = with_processed_count(value, proposals, count_key)
    return Finish(
        job=job,
        status=Status.SUCCEEDED,
        outcome=Outcome.SUCCEEDED,
        finished_at=job.now(),
        result=_as_json(job, value),
        cursors=proposals,
    )


def fail(
    job: ClaimedJob,
    exc: BaseException,
    *,
    retryable: bool,
    spec: TaskSpec | None = None,
    with_traceback: bool = True,
) -> Finish:
    """Return the Finish for a failed attempt: a retry with backoff, or failed for good."""
    now = job.now()
    error = describe(exc)
    if with_traceback:
        error += "\n\n" + "".join(traceback.format_exception(exc)).rstrip()
    error = storable_text(error)
    if retryable and spec is not None and job.attempt < job.max_attempts:
        return Finish(
            job=job,
            status=Status.PENDING,
            outcome=Outcome.RETRIED,
            finished_at=now,
            run_at=now + spec.retry.backoff(job.attempt),
            error=error,
        )
    logger.warning(
        "job failed job=%s task=%s attempt=%s/%s error=%s",
        job.id,
        job.task_name,
        job.attempt,
        job.max_attempts,
        error.splitlines()[0],
    )
    return Finish(
        job=job, status=Status.FAILED, outcome=Outcome.FAILED, finished_at=now, error=error
    )


def timeout_failure(job: ClaimedJob, *, abandoned_after: float | None = None) -> Finish:
    """Return the Finish for an attempt that ran past its task's timeout.

    ``abandoned_after``: the grace, in seconds, after which its thread was given up on.
    """
    spec = get_task(job.task_name)
    assert spec.timeout is not None
    message = "Job ran longer than its %ss timeout" % spec.timeout.total_seconds()
    if abandoned_after is not None:
        message += " and did not return within a further %ss; its thread was abandoned" % (
            abandoned_after
        )
    exc = JobTimeout(message + ".")
    return fail(job, exc, retryable=spec.retry.should_retry(exc), spec=spec, with_traceback=False)


def hand_back(job: ClaimedJob, reason: str) -> Finish:
    """Return the Finish that puts an unfinished job back to pending without using an attempt."""
    return Finish(
        job=job,
        status=Status.PENDING,
        outcome=Outcome.INTERRUPTED,
        finished_at=job.now(),
        refund=1,
        error=reason,
    )


def _unknown_task(job: ClaimedJob, exc: UnknownTask) -> Finish:
    """Hand the job back for a worker that knows its task, until the grace has passed.

    During a rolling deploy an old worker may claim a new task's job. The
    grace runs from ``scheduled_for``, which hand-backs do not move, so it
    ends the same however often the job comes back.
    """
    now = job.now()
    grace = app_settings.UNKNOWN_TASK_GRACE
    grace_ends = job.scheduled_for + dt.timedelta(seconds=grace)
    if now >= grace_ends:
        final = UnknownTask(
            "No task is registered as %r, and no worker that knows it ran the job within "
            "UNKNOWN_TASK_GRACE (%gs) of its scheduled time %s."
            % (job.task_name, grace, job.scheduled_for.isoformat())
        )
        return fail(job, final, retryable=False, with_traceback=False)
    run_at = min(now + UNKNOWN_TASK_RECHECK, grace_ends)
    logger.warning(
        "job handed back, unknown task job=%s task=%s retry_at=%s grace_ends=%s",
        job.id,
        job.task_name,
        run_at.isoformat(),
        grace_ends.isoformat(),
    )
    return _defer(
        job,
        now,
        run_at,
        "UnknownTask: %s Handed back for a worker that knows it; it fails if none has run "
        "it by %s (UNKNOWN_TASK_GRACE after its scheduled time)." % (exc, grace_ends.isoformat()),
    )


def _retry_later(job: ClaimedJob, spec: TaskSpec, exc: RetryLater) -> Finish:
    now = job.now()
    deadline = job.retry_later_deadline or now + spec.retry.retry_later_budget
    run_at = now + exc.delay
    if run_at > deadline:
        budget_error = SchedulerError(
            "Retry-later budget exhausted: asked to retry at %s, budget ends %s (%s)."
            % (run_at.isoformat(), deadline.isoformat(), exc)
        )
        return fail(job, budget_error, retryable=True, spec=spec, with_traceback=False)
    return _defer(job, now, run_at, str(exc), retry_later_deadline=deadline)


def _defer(
    job: ClaimedJob,
    now: dt.datetime,
    run_at: dt.datetime,
    reason: str,
    *,
    retry_later_deadline: dt.datetime | None = None,
) -> Finish:
    """Return the Finish that runs the job again at ``run_at`` without using an attempt."""
    return Finish(
        job=job,
        status=Status.PENDING,
        outcome=Outcome.DEFERRED,
        finished_at=now,
        run_at=run_at,
        refund=1,
        error=storable_text(reason),
        retry_later_deadline=retry_later_deadline,
    )


def _as_json(job: ClaimedJob, value: Any) -> str | None:
    """Return ``value`` as JSON text, or an ``unstorable_result`` note saying why it cannot be.

    The handler returned, so its side effects happened: the job succeeds either way.
    """
    if value is None:
        return None
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "The result is not JSON-serialisable: %s." % exc
    else:
        if _JSON_NUL.search(text):
            reason = "The result contains a NUL character (\\u0000), which PostgreSQL cannot store."
        elif not _encodable(text):
            reason = "The result contains text that is not valid Unicode (a surrogate code point)."
        else:
            return text
    logger.warning("job result not stored job=%s task=%s reason=%s", job.id, job.task_name, reason)
    return unstorable_result(reason)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
