"""The occurrence enqueuer: turn due occurrences into jobs, exactly once.

``enqueue_due_occurrences()`` runs inside every runworker (no beat process
to deploy). Exactly-once per occurrence rests on the database, not on who
runs it: each schedule's cursor (next_run_at) moves by a compare-and-set
UPDATE in the same transaction that creates the occurrence's job, and
ScheduleOccurrence is unique per (schedule, occurrence time). On
PostgreSQL a transaction-level advisory lock also lets one worker at a time
do the work; if it dies, the next worker to tick takes over.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging

from django.db import InterfaceError, OperationalError

from scheduler_app import database
from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db import database_now, in_lists
from scheduler_app.exceptions import SchedulerError, UnknownQueue, UnknownTask, describe
from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from scheduler_app.models.jobs import OCCURRENCE_KEY_PREFIX
from scheduler_app.schedules.policy import decide
from scheduler_app.schedules.recurrence import fixed_jitter, occurrences_after
from scheduler_app.scheduling import JobRequest, schedule_many

logger = logging.getLogger("scheduler_app.schedules")

#: At most this many occurrences are looked at per schedule and tick; a
#: longer backlog is worked through over the following ticks.
MAX_OCCURRENCES_PER_TICK = 1000


def enqueue_due_occurrences(now: dt.datetime | None = None) -> int:
    """Enqueue the due occurrences of every enabled schedule; return how many jobs.

    ``now``: the database's clock by default, which claims compare run times with.
    """
    now = now or database_now()
    enqueued = 0
    with database.atomic():
        if connection.vendor == "postgresql":
            from scheduler_app.db.postgresql import try_scheduler_lock

            if not try_scheduler_lock():
                return 0  # another worker is ticking right now
        busy = _schedules_with_unfinished_runs()
        for schedule in Schedule.objects.due(now).order_by("id"):
            try:
                with database.atomic():
                    enqueued += _tick(schedule, now, busy)
            except (UnknownTask, UnknownQueue) as exc:
                _leave_for_a_worker_that_knows(schedule, now, exc)
            except SchedulerError as exc:
                logger.error("schedule cannot enqueue schedule=%s error=%s", schedule.name, exc)
                _record_error(schedule, now, str(exc))
            except (OperationalError, InterfaceError):
                raise  # the connection is gone: the worker reconnects and ticks again
            except Exception as exc:
                # A bug or bad data in one schedule must not stop the others.
                logger.exception("schedule tick failed schedule=%s", schedule.name)
                _record_error(schedule, now, describe(exc))
    return enqueued


def occurrence_key(schedule: Schedule, occurrence: dt.datetime) -> str:
    """Return the unique key of an occurrence's job."""
    return "%s%s:%s" % (
        OCCURRENCE_KEY_PREFIX,
        schedule.name,
        occurrence.astimezone(dt.UTC).isoformat(),
    )


def _tick(schedule: Schedule, now: dt.datetime, busy: set[int]) -> int:
    """Enqueue ``schedule``'s due occurrences; ``busy``: the schedules with an unfinished run."""
    cursor = schedule.next_run_at
    if schedule.kind == Schedule.Kind.FIXED_DELAY:
        return _tick_fixed_delay(schedule, cursor, now, busy)
    if cursor is None:
        first = next(occurrences_after(schedule, now - dt.timedelta(microseconds=1)))
        _move_cursor(schedule, None, first, now)
        return 0 if first > now else _tick(schedule, now, busy)
    upcoming = itertools.chain([cursor], occurrences_after(schedule, cursor))
    due = list(
        itertools.islice(
            itertools.takewhile(lambda at: at <= now, upcoming), MAX_OCCURRENCES_PER_TICK
        )
    )
    following = next(occurrences_after(schedule, due[-1]))
    return _handle(schedule, cursor, due, following, now, busy)


def _tick_fixed_delay(
    schedule: Schedule, cursor: dt.datetime | None, now: dt.datetime, busy: set[int]
) -> int:
    if cursor is None:
        if schedule.pk in busy:
            return 0  # the next run is due an interval after this one ends
        last_end = _last_end(schedule)
        last_occurrence = (
            ScheduleOccurrence.objects.filter(schedule=schedule)
            .order_by("-occurrence_at")
            .values_list("occurrence_at", flat=True)
            .first()
        )
        if last_end is not None:
            following = last_end + schedule.interval
        elif last_occurrence is not None:
            # Its runs were deleted (pruned): count the delay from now.
            following = max(now, last_occurrence + schedule.interval)
        else:
            following = schedule.start_at or schedule.created_at
        if not _move_cursor(schedule, None, following, now) or following > now:
            return 0
        cursor = following
    # After this run, the cursor waits (None) until the run has ended.
    return _handle(schedule, cursor, [cursor], None, now, busy)


def _handle(
    schedule: Schedule,
    cursor: dt.datetime,
    due: list[dt.datetime],
    following: dt.datetime | None,
    now: dt.datetime,
    busy: set[int],
) -> int:
    decision = decide(
        due,
        now=now,
        grace=schedule.misfire_grace,
        misfire=schedule.misfire_policy,
        overlap=schedule.overlap_policy,
        previous_unfinished=schedule.pk in busy,
        more_due=following is not None and following <= now,
    )
    if schedule.kind == Schedule.Kind.FIXED_DELAY and not decision.enqueue:
        following = now + schedule.interval  # skipped: count the delay from now
    if not _move_cursor(schedule, cursor, following, now):
        return 0  # another scheduler handled these occurrences
    jobs = schedule_many(
        schedule.task_name,
        [
            JobRequest(
                payload=schedule.payload,
                at=at + fixed_jitter(schedule.jitter, occurrence_key(schedule, at)),
                scheduled_for=at,
                unique_key=occurrence_key(schedule, at),
            )
            for at in decision.enqueue
        ],
        queue=schedule.queue or None,
    )
    Outcome = ScheduleOccurrence.Outcome
    ScheduleOccurrence.objects.bulk_create(
        [
            ScheduleOccurrence(
                schedule=schedule,
                occurrence_at=at,
                outcome=Outcome.ENQUEUED,
                job=job,
                created_at=now,
            )
            for at, job in zip(decision.enqueue, jobs, strict=True)
        ]
        + [
            ScheduleOccurrence(schedule=schedule, occurrence_at=at, outcome=outcome, created_at=now)
            for outcome, times in (
                (Outcome.SKIPPED_MISFIRE, decision.skipped_misfire),
                (Outcome.SKIPPED_OVERLAP, decision.skipped_overlap),
            )
            for at in times
        ]
    )
    for at, job in zip(decision.enqueue, jobs, strict=True):
        logger.info(
            "occurrence enqueued schedule=%s occurrence=%s job=%s",
            schedule.name,
            at.isoformat(),
            job.pk,
        )
    if decision.skipped_misfire or decision.skipped_overlap:
        logger.info(
            "occurrences skipped schedule=%s misfire=%s overlap=%s",
            schedule.name,
            len(decision.skipped_misfire),
            len(decision.skipped_overlap),
        )
    return len(jobs)


def _move_cursor(
    schedule: Schedule, old: dt.datetime | None, new: dt.datetime | None, now: dt.datetime
) -> bool:
    """Compare-and-set the cursor; return False if another scheduler moved it first."""
    current = Schedule.objects.filter(pk=schedule.pk)
    current = current.filter(next_run_at=None) if old is None else current.filter(next_run_at=old)
    if not current.update(next_run_at=new, updated_at=now):
        return False
    schedule.next_run_at = new
    return True


def _schedules_with_unfinished_runs() -> set[int]:
    """Return the ids of the schedules with a run pending or running, however old its
    occurrence: once per tick, for the overlap policy and fixed-delay waits.

    Two reads, the small set first: every schedule's unfinished runs (a partial index of
    a few entries), then whose they are. As one join, the planner may walk every
    occurrence kept instead.
    """
    unfinished = list(
        Job.objects.unfinished()
        .filter(unique_key__startswith=OCCURRENCE_KEY_PREFIX)
        .order_by()
        .values_list("pk", flat=True)
    )
    busy: set[int] = set()
    for some in in_lists(unfinished):
        busy.update(
            ScheduleOccurrence.objects.filter(job__in=some)
            .order_by()
            .values_list("schedule_id", flat=True)
        )
    return busy


def _last_end(schedule: Schedule) -> dt.datetime | None:
    """When the run of ``schedule`` that ended last ended (None: none is left).

    Usually the latest occurrence's run; an older run re-run since (a failed job retried)
    may have ended later. Both reads follow an index from the newest end: the latest
    occurrence's, then the schedule's runs that ended at or after it.
    """
    latest = (
        ScheduleOccurrence.objects.filter(schedule=schedule, job__isnull=False)
        .order_by("-occurrence_at")
        .values_list("job__finished_at", flat=True)
        .first()
    )
    if latest is None:
        return None
    return (
        Job.objects.filter(
            status__in=Job.FINISHED,
            finished_at__gte=latest,
            schedule_occurrences__schedule=schedule,
        )
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )


def _leave_for_a_worker_that_knows(
    schedule: Schedule, now: dt.datetime, exc: UnknownTask | UnknownQueue
) -> None:
    """Leave the due occurrence for a worker that knows the schedule's task and queue.

    During a rolling deploy an older worker may tick a schedule of the newer release: the
    cursor stays where it is, so a newer worker enqueues the occurrence (once, with its
    task's options). As for a job of an unknown task, only after UNKNOWN_TASK_GRACE is
    it recorded as an error and passed.
    """
    schedule.refresh_from_db(fields=["next_run_at", "updated_at"])  # rolled back
    grace = dt.timedelta(seconds=app_settings.UNKNOWN_TASK_GRACE)
    grace_ends = (schedule.next_run_at or schedule.updated_at) + grace
    if now >= grace_ends:
        logger.error("schedule cannot enqueue schedule=%s error=%s", schedule.name, exc)
        _record_error(schedule, now, str(exc))
        return
    logger.warning(
        "occurrence left for a worker that knows its task schedule=%s error=%s grace_ends=%s",
        schedule.name,
        exc,
        grace_ends.isoformat(),
    )


def _record_error(schedule: Schedule, now: dt.datetime, error: str) -> None:
    """Record the occurrence that could not be enqueued and move past it (no retry loop)."""
    schedule.refresh_from_db(fields=["next_run_at"])  # the failed savepoint rolled it back
    with database.atomic():
        cursor = schedule.next_run_at or now
        try:
            following = (
                now + schedule.interval
                if schedule.kind == Schedule.Kind.FIXED_DELAY
                else next(occurrences_after(schedule, max(cursor, now)))
            )
            moved = _move_cursor(schedule, schedule.next_run_at, following, now)
        except SchedulerError:
            # Its definition cannot be evaluated: stop until an operator fixes it.
            logger.error("schedule disabled schedule=%s", schedule.name)
            moved = bool(
                Schedule.objects.filter(pk=schedule.pk, enabled=True).update(
                    enabled=False, updated_at=now
                )
            )
        if moved:
            ScheduleOccurrence.objects.get_or_create(
                schedule=schedule,
                occurrence_at=cursor,
                defaults={
                    "outcome": ScheduleOccurrence.Outcome.ERROR,
                    "detail": error,
                    "created_at": now,
                },
            )
