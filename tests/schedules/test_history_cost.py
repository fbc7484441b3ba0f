"""A scheduler tick reads a handful of rows, however many runs a schedule has behind it
(issue #14: cost stays flat as history grows).

A fixed-delay schedule waits (its cursor empty) while its run is unfinished, and each
worker's tick, every SCHEDULER_INTERVAL, asks whether it is still unfinished; once it
ends, the next run is due the interval after the latest end. Both questions used to
read every job the schedule ever ran. The checks stay exact: a run re-run by an
operator (a failed job retried) counts, whatever its occurrence's age or its task's
name now.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences, occurrence_key
from tests.helpers import indexes_covering, reads_of
from tests.schedules.steps import MINUTE, TASK, Status, make_schedule, utc

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

T0 = utc(2026, 6, 1, 10, 0)
RUNS = 3000
#: Jobs of other tasks, finished and pending: as in production, the history kept is much
#: longer than the backlog (the planner reads a small table whole, index or not).
OTHERS_FINISHED = 30000
OTHERS_PENDING = 300
NOW = T0 + RUNS * MINUTE
#: The rows and index entries a tick may visit in one query, at any history size.
HANDFUL = 20


def schedule_with_history(last_status: str = Status.SUCCEEDED) -> Schedule:
    """A fixed-delay schedule of RUNS one-minute runs, the last one ``last_status``, among
    the jobs of other tasks; its cursor waits for the last run to end."""
    schedule = make_schedule(
        "history", kind=Schedule.Kind.FIXED_DELAY, interval=MINUTE, start_at=T0
    )
    starts = [T0 + i * MINUTE for i in range(RUNS)]
    statuses = [Status.SUCCEEDED] * (RUNS - 1) + [last_status]
    jobs = Job.objects.bulk_create(
        Job(
            task_name=TASK,
            status=status,
            scheduled_for=at,
            run_at=at,
            attempts=1,
            started_at=at,
            finished_at=None if status in Job.UNFINISHED else at + dt.timedelta(seconds=30),
            unique_key=occurrence_key(schedule, at),
        )
        for at, status in zip(starts, statuses, strict=True)
    )
    ScheduleOccurrence.objects.bulk_create(
        ScheduleOccurrence(
            schedule=schedule,
            occurrence_at=at,
            outcome=ScheduleOccurrence.Outcome.ENQUEUED,
            job=job,
            created_at=at,
        )
        for at, job in zip(starts, jobs, strict=True)
    )
    Job.objects.bulk_create(
        Job(
            task_name="tests.record",
            status=Status.SUCCEEDED,
            scheduled_for=T0,
            run_at=T0,
            attempts=1,
            started_at=T0,
            finished_at=T0,
        )
        for _ in range(OTHERS_FINISHED)
    )
    Job.objects.bulk_create(
        Job(task_name="tests.record", scheduled_for=NOW, run_at=NOW) for _ in range(OTHERS_PENDING)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")
        cursor.execute("ANALYZE scheduler_app_scheduleoccurrence")
    return schedule


def tick_reads() -> list[tuple[int, str]]:
    """Tick at NOW; return each query the tick ran on the job or occurrence tables with
    the rows it visits, most first."""
    with frozen_clock(NOW), CaptureQueriesContext(connection) as queries:
        enqueue_due_occurrences()
    reads = reads_of(queries, "scheduler_app_job", "scheduleoccurrence")
    assert reads, "the tick asked nothing about runs"
    return reads


def test_a_tick_waiting_for_a_run_reads_a_handful_of_rows():
    schedule = schedule_with_history(last_status=Status.RUNNING)

    (most, sql), *_ = tick_reads()

    assert most <= HANDFUL, sql
    schedule.refresh_from_db()
    assert schedule.next_run_at is None  # still waiting for the run


def test_the_tick_after_a_run_ended_reads_a_handful_of_rows():
    schedule = schedule_with_history(last_status=Status.RUNNING)
    last = Job.objects.get(unique_key=occurrence_key(schedule, NOW - MINUTE))
    ended = NOW - dt.timedelta(seconds=10)
    Job.objects.filter(pk=last.pk).update(status=Status.SUCCEEDED, finished_at=ended)

    (most, sql), *_ = tick_reads()

    assert most <= HANDFUL, sql
    schedule.refresh_from_db()
    assert schedule.next_run_at == ended + MINUTE


def test_an_old_run_retried_holds_the_schedule_whatever_its_task_is_called_now():
    schedule = schedule_with_history()
    retried = Job.objects.get(unique_key=occurrence_key(schedule, T0 + 5 * MINUTE))
    # Retried by an operator after the task was renamed in code and in the schedule.
    Job.objects.filter(pk=retried.pk).update(
        status=Status.PENDING, finished_at=None, task_name="tests.renamed"
    )

    with frozen_clock(NOW):
        assert enqueue_due_occurrences() == 0

    schedule.refresh_from_db()
    assert schedule.next_run_at is None


def test_the_next_run_is_due_an_interval_after_the_latest_end_even_of_an_older_run():
    schedule = schedule_with_history()
    retried = Job.objects.get(unique_key=occurrence_key(schedule, T0 + 5 * MINUTE))
    ended = NOW + dt.timedelta(seconds=20)  # after the latest occurrence's run ended
    Job.objects.filter(pk=retried.pk).update(finished_at=ended)

    with frozen_clock(NOW):
        enqueue_due_occurrences()

    schedule.refresh_from_db()
    assert schedule.next_run_at == ended + MINUTE


def test_only_an_unfinished_run_of_a_schedule_is_in_the_scheduled_runs_index():
    schedule = make_schedule(
        "indexed", kind=Schedule.Kind.FIXED_DELAY, interval=MINUTE, start_at=T0
    )
    with frozen_clock(T0):
        enqueue_due_occurrences()
    (run,) = Job.objects.filter(schedule_occurrences__schedule=schedule)
    other = Job.objects.create(task_name=TASK, scheduled_for=T0, run_at=T0, unique_key="k")

    assert "scheduler_job_runs_unfinished" in indexes_covering("scheduler_app_job", run.pk)
    assert "scheduler_job_runs_unfinished" not in indexes_covering("scheduler_app_job", other.pk)
    Job.objects.filter(pk=run.pk).update(status=Status.SUCCEEDED, finished_at=T0)
    assert "scheduler_job_runs_unfinished" not in indexes_covering("scheduler_app_job", run.pk)
