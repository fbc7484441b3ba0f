"""Start, run and record published jobs inside a Celery worker.

The same path as runworker's: ``execute()`` runs the handler (registry,
retries, Retry-After, payload versions), the outcome is recorded fenced by
the lease token, and the task's timeout fails the attempt when the handler
returns. Only the start differs: a guarded UPDATE takes the job over from
the relay and consumes its token. A task runs its message's jobs in turn, and
records each outcome in the transaction that starts its next job; the tasks a
worker process runs at once share those transactions (see grouping), each
committed before the handlers it started run, and one thread renews every
lease held (see renewals).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence

from django.db import DatabaseError, close_old_connections

from scheduler_app.celery.grouping import GroupCommit
from scheduler_app.celery.renewals import renewer
from scheduler_app.controls import CONTROL_REFRESH, PausedScopes, paused_scopes
from scheduler_app.db import backend, write_across_reconnects
from scheduler_app.exceptions import UnknownTask
from scheduler_app.models import Job
from scheduler_app.registry import get_task
from scheduler_app.signals import job_failed
from scheduler_app.worker.execution import (
    ClaimedJob,
    Finish,
    execute,
    hand_back,
    timeout_failure,
)
from scheduler_app.worker.outcomes import CONNECTION_ERRORS, finish_jobs, record_one

logger = logging.getLogger("scheduler_app.celery")


Delivery = tuple[int, int, str, dt.timedelta]  # (job id, lease token, worker id, lease)
Outcome = tuple[Finish, str]  # (finish, worker id)
Step = tuple[Outcome | None, Delivery | None]  # an outcome to record, then a delivery to start
Started = tuple[ClaimedJob, str] | None


def start_deliveries(deliveries: Sequence[Delivery]) -> list[Started]:
    """Take published jobs over from the relay; return each one's job and queue, or None.

    A guarded UPDATE moves each token on (published -> started): of two
    deliveries of one message, only the first matches, even in one group.
    None: the token is spent (a duplicate delivery), or the job was handed
    back or rescued.
    """
    by_start: dict[tuple[str, dt.timedelta], list[tuple[int, int]]] = {}
    for job_id, token, worker_id, lease in deliveries:
        by_start.setdefault((worker_id, lease), []).append((job_id, token))
    rows = [
        row
        for (worker_id, lease), pairs in by_start.items()
        for row in backend().start_jobs(pairs, worker=worker_id, lease=lease)
    ]
    return matched(deliveries, rows)


def matched(deliveries: Sequence[Delivery], rows: Sequence[tuple]) -> list[Started]:
    """Return, for each delivery, the job and queue of the started row its token matched."""
    started: dict[tuple[int, int], tuple[ClaimedJob, str]] = {}
    for row in rows:
        job = ClaimedJob.from_row(row[:-1])
        started[(job.id, job.lease_token - 1)] = (job, row[-1])
    # pop: a second delivery of the same message in the group gets None.
    return [started.pop((job_id, token), None) for job_id, token, _, _ in deliveries]


def record_outcomes(outcomes: Sequence[Outcome]) -> list[bool]:
    """Record (finish, worker id) pairs fenced by their tokens; return whether each held.

    A group the database refuses (an unstorable result, say) is recorded
    one by one, so only the outcome at fault is stored without its text.
    """
    by_worker: dict[str, list[Finish]] = {}
    for finish, worker_id in outcomes:
        by_worker.setdefault(worker_id, []).append(finish)
    accepted: set[tuple[int, int]] = set()
    for worker_id, finishes in by_worker.items():
        try:
            accepted |= finish_jobs(finishes, worker=worker_id)
        except CONNECTION_ERRORS:
            raise
        except DatabaseError:
            for finish in finishes:
                accepted |= record_one(finish, worker=worker_id)
    return [finish.job.fence in accepted for finish, _ in outcomes]


def take_steps(steps: Sequence[Step]) -> list[tuple[bool | None, Started | DatabaseError]]:
    """Record the outcomes of ``steps``, then start their deliveries; return for each step
    whether its outcome held (None: none) and its delivery's start (see start_deliveries;
    None: none), or the error that refused the starts.

    An error of the outcomes is raised and nothing is started: each caller tries its
    step again whole. An error of the starts, once the outcomes are in, is each start's
    result instead, so no outcome is recorded twice.
    """
    outcomes = [outcome for outcome, _ in steps if outcome is not None]
    deliveries = [delivery for _, delivery in steps if delivery is not None]
    held, started = together(outcomes, deliveries) or apart(outcomes, deliveries)
    held_in_turn, started_in_turn = iter(held), iter(started)
    return [
        (
            next(held_in_turn) if outcome is not None else None,
            next(started_in_turn) if delivery is not None else None,
        )
        for outcome, delivery in steps
    ]


def together(
    outcomes: Sequence[Outcome], deliveries: Sequence[Delivery]
) -> tuple[list[bool], list[Started]] | None:
    """Record ``outcomes`` and start ``deliveries`` in one round trip and one commit
    (backend().finish_and_start); return (held, started), or None where they cannot
    go together: more than one worker id or lease among them (never within one Celery
    worker process), a success's cursor proposals to save, or an outcome the database
    refuses (a lost connection is raised)."""
    finished_by = {worker_id for _, worker_id in outcomes}
    starts = {(worker_id, lease) for _, _, worker_id, lease in deliveries}
    if len(finished_by) > 1 or len(starts) > 1:
        return None
    if any(finish.cursors and finish.status == Job.Status.SUCCEEDED for finish, _ in outcomes):
        return None
    worker_id, lease = next(iter(starts), ("", dt.timedelta(0)))
    try:
        accepted, rows = backend().finish_and_start(
            [finish.as_row() for finish, _ in outcomes],
            next(iter(finished_by), ""),
            [(job_id, token) for job_id, token, _, _ in deliveries],
            worker=worker_id,
            lease=lease,
        )
    except CONNECTION_ERRORS:
        raise
    except DatabaseError:
        return None  # an unstorable outcome, say: record_outcomes() records one by one
    return [finish.job.fence in accepted for finish, _ in outcomes], matched(deliveries, rows)


def apart(
    outcomes: Sequence[Outcome], deliveries: Sequence[Delivery]
) -> tuple[list[bool], list[Started | DatabaseError]]:
    """Record ``outcomes``, then start ``deliveries`` (see take_steps)."""
    held = record_outcomes(outcomes)
    try:
        return held, list(start_deliveries(deliveries))
    except DatabaseError as exc:
        return held, [exc] * len(deliveries)


_steps = GroupCommit(take_steps)


def step(
    finish: Finish | None, delivery: Delivery | None, *, worker_id: str, within: dt.timedelta
) -> tuple[bool | None, Started | DatabaseError]:
    """Record ``finish`` fenced by its token, then start ``delivery``, with the steps this
    process's other tasks take at the same moment; return take_steps()' answer for it.

    A lost connection is tried again on a new one for up to ``within`` (the outcome's
    lease no longer renews), as runworker keeps an outcome for its next turn.
    """
    outcome = (finish, worker_id) if finish is not None else None
    return write_across_reconnects(
        lambda: _steps.submit((outcome, delivery)),
        seconds=within.total_seconds(),
        retry_on=CONNECTION_ERRORS,
    )


def run_deliveries(
    deliveries: Sequence[tuple[int, int]], *, worker_id: str, lease: dt.timedelta
) -> list[str]:
    """Run each published job of ``deliveries`` ((job id, lease token) pairs) in turn: start
    it, run it, record its outcome; return for each "refused", "stale", or the attempt's
    outcome ("succeeded", "retried", "interrupted" for a hand-back under a kill switch, ...).

    A job starts only once the one before it has finished, in the same commit as that
    one's outcome (see step): one commit per job, and a job waiting its turn is still
    the relay's, so if this worker dies it goes back unharmed.
    """
    reported: list[str] = []
    finish: Finish | None = None  # the last job's outcome, recorded with the next start
    try:
        for job_id, lease_token in deliveries:
            held, started = step(
                finish,
                (job_id, lease_token, worker_id, lease),
                worker_id=worker_id,
                within=lease / 2,
            )
            if finish is not None:
                reported.append(report(finish, held))
            if isinstance(started, DatabaseError):
                raise started
            finish = None
            if started is None:
                logger.info(
                    "delivery refused, its lease token is spent (a duplicate, or the job was "
                    "handed back or rescued) job=%s token=%s worker=%s",
                    job_id,
                    lease_token,
                    worker_id,
                )
                reported.append("refused")
            else:
                finish = attempt(*started, worker_id=worker_id, lease=lease)
        if finish is not None:
            held, _ = step(finish, None, worker_id=worker_id, within=lease / 2)
            reported.append(report(finish, held))
    finally:
        close_old_connections()
    return reported


def attempt(job: ClaimedJob, queue: str, *, worker_id: str, lease: dt.timedelta) -> Finish:
    """Run a started job, holding its lease renewed, unless a kill switch covers it: then
    return the Finish that hands it back unrun."""
    if current_pauses().covers(queue=queue, task_name=job.task_name):
        return hand_back(
            job, "A kill switch covers it; handed back by %s without running." % worker_id
        )
    with renewer().holding(job, worker_id=worker_id, lease=lease):
        return run(job)


def report(finish: Finish, held: bool | None) -> str:
    """Return what became of ``finish`` once recorded (``held``: its fence held); log a
    stale one, and send job_failed as runworker does."""
    job = finish.job
    if not held:
        logger.warning(
            "stale completion discarded job=%s task=%s attempt=%s: lease lost, the job was "
            "rescued or claimed again",
            job.id,
            job.task_name,
            job.attempt,
        )
        return "stale"
    if finish.status == Job.Status.FAILED:
        job_failed.send(sender=Job, job_id=job.id, task_name=job.task_name, error=finish.error)
    return finish.outcome


_pauses: tuple[float, PausedScopes] | None = None  # (time.monotonic() read, scopes)


def current_pauses() -> PausedScopes:
    """Return the kill switches, read at most every CONTROL_REFRESH seconds per process.

    The same delay as runworker's, which reads them on that cadence too.
    """
    global _pauses
    if _pauses is None or time.monotonic() - _pauses[0] > CONTROL_REFRESH:
        _pauses = (time.monotonic(), paused_scopes())
    return _pauses[1]


def run(job: ClaimedJob) -> Finish:
    """Run the handler; an attempt that outlived its task's timeout fails as a timeout."""
    began = time.monotonic()
    finish = execute(job)
    try:
        timeout = get_task(job.task_name).timeout
    except UnknownTask:
        return finish
    if timeout is not None and time.monotonic() - began > timeout.total_seconds():
        return timeout_failure(job)
    return finish
