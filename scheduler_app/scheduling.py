"""schedule() and schedule_many(): create jobs inside the caller's transaction.

Both write on the scheduler's database (SCHEDULER_APP['DATABASE'], "default" unless
the project gave the scheduler a database of its own), so a job scheduled inside
``transaction.atomic()`` of that database exists only if that block commits.
schedule_many() writes inside ``atomic()`` (a savepoint within the caller's
transaction), so one failing item writes nothing, in a transaction or not.

On a database of its own, a transaction of the business database no longer covers the
job, unless SCHEDULER_APP['ENQUEUE_ON_COMMIT_OF'] names that database (the outbox
mode): inside a transaction of it (and outside one of the scheduler's), the jobs are
checked at once and written by ``transaction.on_commit()`` when it commits; a rollback
schedules nothing. Until then the returned jobs are unsaved (``pk`` None); the write
then fills them in, as the stored jobs (the existing ones for matching unique keys). A
process that dies between that commit and the write loses those jobs; a write that
fails raises from the block's exit, after the commit, and is logged
(docs/separate-database.md).

Unique keys: while a job of a task with a given ``unique_key`` is pending or
running, scheduling the same task and key again creates nothing and returns that job (its
payload and time are left as they were). Once it has finished (succeeded,
failed or cancelled) the key is free and a new job is created. A partial
unique constraint enforces this in the database, so concurrent callers on
different connections also end up with one job.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from scheduler_app import clock, database
from scheduler_app.bounds import LARGEST_INTEGER
from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db import (
    database_now,
    in_lists,
    notify_jobs_scheduled,
    write_across_reconnects,
)
from scheduler_app.exceptions import (
    InvalidSchedule,
    ValidationError,
)
from scheduler_app.models import Job
from scheduler_app.payloads import check_payload, has_lone_surrogate
from scheduler_app.registry import TaskSpec, check_queue, get_task

logger = logging.getLogger("scheduler_app.scheduling")

SMALLINT_RANGE = range(-32768, 32768)
#: Every run time is before this: far enough from datetime.max that no time
#: zone or later arithmetic (retries, jitter) can overflow.
LATEST_RUN_AT = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobRequest:
    """One item of schedule_many(): its payload and what differs from the shared options."""

    payload: Any = None
    at: dt.datetime | None = None
    delay: dt.timedelta | float | None = None
    #: The time the handler sees as scheduled_for (e.g. a recurring schedule's
    #: occurrence when ``at`` adds jitter); defaults to the run time.
    scheduled_for: dt.datetime | None = None
    unique_key: str | None = None
    owner: Any = None
    priority: int | None = None


def schedule(
    task: TaskSpec | str,
    payload: Any = None,
    *,
    at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    undo_window: dt.timedelta | float | None = None,
    queue: str | None = None,
    priority: int | None = None,
    unique_key: str | None = None,
    owner: Any = None,
    payload_version: int | None = None,
    max_attempts: int | None = None,
    outbox: bool = True,
) -> Job:
    """Schedule one job of ``task`` now, ``at`` an aware datetime, or after ``delay``.

    ``payload`` must be JSON-serialisable (None stores ``{}``).

    ``undo_window`` schedules it to run after the window plus
    SCHEDULER_APP['UNDO_SAFETY_MARGIN'] and records the undo deadline, so
    cancel() inside the window always wins. Returns the Job (the existing
    one when ``unique_key`` matches an unfinished job). Raises a
    scheduler_app ValidationError subclass for any invalid argument.

    In the outbox mode (see the module's docstring) the Job is unsaved until the
    business transaction commits; ``outbox=False`` writes it at once all the same.
    """
    spec = _resolve_task(task)
    # "Now", a delay and an undo window run on the database's clock, as claims and undos do.
    now = database_now()
    run_at, undo_deadline = _run_time(at=at, delay=delay, undo_window=undo_window, now=now)
    job = _build_job(
        spec,
        JobRequest(payload=payload, unique_key=unique_key, owner=owner, priority=priority),
        run_at=run_at,
        now=now,
        queue=queue,
        payload_version=payload_version,
        max_attempts=max_attempts,
    )
    job.undo_deadline = undo_deadline
    if outbox and waits_for_commit():
        _write_on_commit([job], lambda: [_write_one(job, now=now)])
        return job
    return _write_one(job, now=now)


def _write_one(job: Job, *, now: dt.datetime) -> Job:
    """Insert ``job`` (or find the unfinished job of its unique key); return the stored job."""
    if job.unique_key is None:
        job.save(force_insert=True)
    else:
        job = _insert_unique([job])[0]
    notify_jobs_scheduled([job], now=now)
    return job


def schedule_many(
    task: TaskSpec | str,
    items: Iterable[JobRequest | Any],
    *,
    at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    queue: str | None = None,
    priority: int | None = None,
    owner: Any = None,
    payload_version: int | None = None,
    max_attempts: int | None = None,
    batch_size: int = 1000,
    outbox: bool = True,
) -> list[Job]:
    """Schedule many jobs of ``task`` with a few multi-row INSERTs.

    Each item is a payload, or a JobRequest to give that item its own time,
    unique key, owner or priority; the keyword arguments are the defaults.
    Items are validated before anything is written, so one bad item
    schedules nothing. Returns the jobs in item order (existing ones for
    unique keys that matched an unfinished job); in the outbox mode, unsaved
    until the business transaction commits (``outbox=False`` writes at once).
    """
    spec = _resolve_task(task)
    # Items are checked against this host's clock, so that a bad one costs no query; the
    # jobs' times are then moved onto the database's clock (_on_database_clock).
    now = clock.now()
    jobs = []
    from_now: list[tuple[bool, bool]] = []
    for index, item in enumerate(items):
        request = item if isinstance(item, JobRequest) else JobRequest(payload=item)
        has_own_time = request.at is not None or request.delay is not None
        item_at = request.at if has_own_time else at
        try:
            run_at, _ = _run_time(
                at=item_at,
                delay=request.delay if has_own_time else delay,
                undo_window=None,
                now=now,
            )
            job = _build_job(
                spec,
                dataclasses.replace(
                    request,
                    owner=request.owner if request.owner is not None else owner,
                    priority=request.priority if request.priority is not None else priority,
                ),
                run_at=run_at,
                now=now,
                queue=queue,
                payload_version=payload_version,
                max_attempts=max_attempts,
            )
        except ValidationError as exc:
            raise type(exc)("Item %s: %s" % (index, exc.message)) from exc
        jobs.append(job)
        from_now.append((item_at is None, item_at is None and request.scheduled_for is None))
    if not jobs:
        return []
    keys = [job.unique_key for job in jobs if job.unique_key is not None]
    if len(keys) != len(set(keys)):
        repeated = sorted(key for key, count in Counter(keys).items() if count > 1)
        raise ValidationError(
            "schedule_many() was given the same unique_key more than once: %s."
            % ", ".join(map(repr, repeated[:5]))
        )
    now = _on_database_clock(jobs, from_now, host_now=now)
    if outbox and waits_for_commit():
        _write_on_commit(jobs, lambda: _write_many(jobs, now=now, batch_size=batch_size))
        return jobs
    return _write_many(jobs, now=now, batch_size=batch_size)


def _write_many(jobs: list[Job], *, now: dt.datetime, batch_size: int) -> list[Job]:
    """Insert ``jobs`` in one atomic block; return the stored jobs in the same order."""
    # One atomic block (a savepoint inside the caller's transaction): a
    # failing INSERT of the keyed items must not leave the plain ones behind.
    with database.atomic():
        keyless = Job.objects.bulk_create(
            [job for job in jobs if job.unique_key is None], batch_size=batch_size
        )
        keyed = iter(_insert_unique([job for job in jobs if job.unique_key], batch_size=batch_size))
        plain = iter(keyless)
        stored = [next(keyed) if job.unique_key else next(plain) for job in jobs]
        notify_jobs_scheduled(stored, now=now)
    return stored


def waits_for_commit() -> bool:
    """Return whether schedule() waits for the business database's commit (the outbox
    mode): ENQUEUE_ON_COMMIT_OF is set, and the caller is inside a transaction of that
    database and not inside one of the scheduler's own (whose jobs commit with it)."""
    business = app_settings.ENQUEUE_ON_COMMIT_OF
    return (
        business is not None and database.in_transaction(business) and not database.in_transaction()
    )


#: How long a write after the business commit tries again while the scheduler's database
#: is unreachable (a failover, a restart) before the jobs are given up and logged.
WRITE_ON_COMMIT_RETRY_SECONDS = 5.0


def _write_on_commit(jobs: list[Job], write: Callable[[], list[Job]]) -> None:
    """Run ``write`` once the business database commits, and make ``jobs`` (unsaved) the
    stored jobs it returns.

    A lost connection is tried again for WRITE_ON_COMMIT_RETRY_SECONDS. A write that still
    fails is logged at ERROR, one line per job, and not raised: the business transaction
    has committed, raising would only fail the caller's request for saved work and keep the
    transaction's later on-commit callbacks (other jobs' writes, the project's own) from
    running."""

    def enqueue() -> None:
        try:
            stored = write_across_reconnects(
                write,
                seconds=WRITE_ON_COMMIT_RETRY_SECONDS,
                retry_on=(OperationalError, InterfaceError),
            )
        except Exception:
            logger.exception(
                "jobs not scheduled after the commit of database=%s task=%s count=%s",
                app_settings.ENQUEUE_ON_COMMIT_OF,
                jobs[0].task_name,
                len(jobs),
            )
            for job in jobs:
                logger.error(
                    "job not scheduled task=%s unique_key=%s run_at=%s",
                    job.task_name,
                    job.unique_key or "",
                    job.run_at.isoformat() if job.run_at else "",
                )
            return
        for job, kept in zip(jobs, stored, strict=True):
            if kept is not job:
                _take_over(job, kept)

    transaction.on_commit(enqueue, using=app_settings.ENQUEUE_ON_COMMIT_OF)


def _take_over(job: Job, stored: Job) -> None:
    """Make ``job`` a copy of ``stored``, the unfinished job its unique key matched."""
    for field in Job._meta.concrete_fields:
        setattr(job, field.attname, getattr(stored, field.attname))
    job._state.adding = False
    job._state.db = stored._state.db
    job._state.fields_cache.clear()


def _on_database_clock(
    jobs: list[Job], from_now: list[tuple[bool, bool]], *, host_now: dt.datetime
) -> dt.datetime:
    """Move the times of ``jobs`` that were measured from ``host_now`` (this host's clock)
    onto the database's clock, which claims compare them with; return the database's now.

    ``from_now``: for each job, whether its run_at and its scheduled_for were measured
    from ``host_now`` (it runs now or after a delay) rather than given.
    """
    now = database_now()
    shift = now - host_now
    for job, (run_at_from_now, scheduled_for_from_now) in zip(jobs, from_now, strict=True):
        job.created_at = now
        if run_at_from_now:
            job.run_at += shift
        if scheduled_for_from_now:
            job.scheduled_for += shift
    return now


def _resolve_task(task: TaskSpec | str) -> TaskSpec:
    if isinstance(task, TaskSpec):
        return get_task(task.name)
    if isinstance(task, str):
        return get_task(task)
    raise ValidationError("task must be a registered task or its name, not %r." % (task,))


def _run_time(
    *,
    at: dt.datetime | None,
    delay: dt.timedelta | float | None,
    undo_window: dt.timedelta | float | None,
    now: dt.datetime,
) -> tuple[dt.datetime, dt.datetime | None]:
    """Return (run_at, undo_deadline) for the given options."""
    if sum(option is not None for option in (at, delay, undo_window)) > 1:
        raise InvalidSchedule("Give at most one of at, delay and undo_window.")
    if at is not None:
        if not isinstance(at, dt.datetime):
            raise InvalidSchedule("at must be a datetime, not %s." % type(at).__name__)
        if timezone.is_naive(at):
            raise InvalidSchedule(
                "at must be timezone-aware; got the naive datetime %s." % at.isoformat()
            )
        try:
            run_at: dt.datetime | None = at.astimezone(dt.UTC)
        except OverflowError:  # it is in year 0 or 10000 in UTC
            run_at = None
        if run_at is None or run_at >= LATEST_RUN_AT:
            raise InvalidSchedule(
                "at must fall in the years 1 to %s (UTC); got %s."
                % (LATEST_RUN_AT.year - 1, at.isoformat())
            )
        return run_at, None
    if delay is not None:
        return now + _duration(delay, "delay", room=LATEST_RUN_AT - now), None
    if undo_window is not None:
        window = check_undo_window(undo_window, now=now)
        return now + window + dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN), now + window
    return now, None


def check_undo_window(value: dt.timedelta | float, *, now: dt.datetime) -> dt.timedelta:
    """Return ``value`` as an undo window starting ``now``, or raise InvalidSchedule.

    It must not be negative, and the run time after it and UNDO_SAFETY_MARGIN
    must fall before LATEST_RUN_AT.
    """
    margin = dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN)
    return _duration(value, "undo_window", room=LATEST_RUN_AT - now - margin)


def _duration(value: dt.timedelta | float, name: str, *, room: dt.timedelta) -> dt.timedelta:
    """Return ``value`` as a timedelta from 0 to less than ``room``, or raise InvalidSchedule."""
    if isinstance(value, bool) or not isinstance(value, dt.timedelta | int | float):
        raise InvalidSchedule(
            "%s must be a timedelta or a number of seconds, not %s." % (name, type(value).__name__)
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSchedule("%s must be a finite number of seconds; got %s." % (name, value))
    # Compared before converting: timedelta(seconds=1e12) itself overflows.
    if value < (dt.timedelta(0) if isinstance(value, dt.timedelta) else 0):
        raise InvalidSchedule("%s must not be negative; got %s." % (name, value))
    if value >= (room if isinstance(value, dt.timedelta) else room.total_seconds()):
        raise InvalidSchedule(
            "%s puts the run time after %s, the latest allowed; got %s."
            % (name, LATEST_RUN_AT.isoformat(), value)
        )
    return value if isinstance(value, dt.timedelta) else dt.timedelta(seconds=value)


def _build_job(
    spec: TaskSpec,
    request: JobRequest,
    *,
    run_at: dt.datetime,
    now: dt.datetime,
    queue: str | None,
    payload_version: int | None,
    max_attempts: int | None,
) -> Job:
    queue = queue if queue is not None else spec.queue
    check_queue(queue)
    priority = request.priority if request.priority is not None else spec.priority
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or priority not in SMALLINT_RANGE
    ):
        raise ValidationError(
            "priority must be an integer from -32768 to 32767; got %r." % (priority,)
        )
    version = payload_version if payload_version is not None else spec.current_payload_version
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValidationError("payload_version must be an integer; got %r." % (version,))
    spec.check_payload_version(version)
    attempts = max_attempts if max_attempts is not None else spec.max_attempts
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValidationError("max_attempts must be a positive integer; got %r." % (attempts,))
    if attempts > LARGEST_INTEGER:
        raise ValidationError(
            "max_attempts must be at most %s; got %r." % (LARGEST_INTEGER, attempts)
        )
    unique_key = request.unique_key
    if unique_key is not None and (
        not isinstance(unique_key, str) or not unique_key or len(unique_key) > 255
    ):
        raise ValidationError("unique_key must be a non-empty string of at most 255 characters.")
    if unique_key is not None and "\x00" in unique_key:
        raise ValidationError("unique_key must not contain a NUL character (\\x00).")
    if unique_key is not None and has_lone_surrogate(unique_key):
        raise ValidationError("unique_key must be valid Unicode text (no surrogate code points).")
    scheduled_for = request.scheduled_for if request.scheduled_for is not None else run_at
    if timezone.is_naive(scheduled_for):
        raise InvalidSchedule("scheduled_for must be timezone-aware.")
    return Job(
        task_name=spec.name,
        queue=queue,
        priority=priority,
        payload=check_payload({} if request.payload is None else request.payload),
        payload_version=version,
        scheduled_for=scheduled_for,
        run_at=run_at,
        max_attempts=attempts,
        unique_key=unique_key,
        owner=request.owner,
        created_at=now,
    )


def _insert_unique(jobs: Sequence[Job], batch_size: int = 1000) -> list[Job]:
    """Insert jobs (all of one task) whose key is free; return the stored job for each."""
    if not jobs:
        return []
    if connection.vendor == "postgresql":
        # ON CONFLICT DO NOTHING skips only unique-key conflicts; a concurrent
        # inserter of the same key waits for our commit, then skips. Keys go in
        # sorted so that two callers lock them in the same order (no deadlock).
        ordered = sorted(jobs, key=lambda job: job.unique_key or "")
        Job.objects.bulk_create(ordered, batch_size=batch_size, ignore_conflicts=True)
        return _stored_for(jobs)
    # SQLite's INSERT OR IGNORE would also swallow NOT NULL and CHECK
    # violations, so insert only the keys that are free; SQLite's single
    # writer makes the look-up and the insert one step inside the savepoint.
    with database.atomic():
        taken = {job.unique_key for job in _unfinished_with_keys(jobs)}
        Job.objects.bulk_create(
            [job for job in jobs if job.unique_key not in taken], batch_size=batch_size
        )
    return _stored_for(jobs)


def _stored_for(jobs: Sequence[Job]) -> list[Job]:
    stored = {job.unique_key: job for job in _unfinished_with_keys(jobs)}
    missing = [job for job in jobs if job.unique_key not in stored]
    if missing:
        # The conflicting job finished between the INSERT and this look-up,
        # which freed its key: insert those once more.
        Job.objects.bulk_create(missing, ignore_conflicts=connection.vendor == "postgresql")
        stored.update((job.unique_key, job) for job in _unfinished_with_keys(missing))
    return [stored[job.unique_key] for job in jobs]


def _unfinished_with_keys(jobs: Sequence[Job]) -> list[Job]:
    """Return the stored unfinished jobs with the same task and unique key as ``jobs``."""
    keys = [job.unique_key for job in jobs]
    unfinished = Job.objects.unfinished().filter(task_name=jobs[0].task_name)
    found: list[Job] = []
    for some in in_lists(keys):
        found.extend(unfinished.filter(unique_key__in=some))
    return found
