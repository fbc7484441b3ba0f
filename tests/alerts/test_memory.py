"""The absent and suspicious-success rules still see what retention pruned (AlertMemory).

The clock is frozen; jobs are written directly and pruned with the default retention
(30 days of jobs, 90 of occurrences), as the built-in prune schedule would.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.alerts.memory import remember_pruned
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Alert, AlertMemory, Job, Schedule, ScheduleOccurrence
from scheduler_app.retention import PARTITIONED_JOBS, prune
from tests.alerts.helpers import COUNTED, HOURLY, T0, job, open_alerts
from tests.helpers import reads_of

Kind = Alert.Kind
pytestmark = pytest.mark.django_db
DAY = dt.timedelta(days=1)


def test_a_yearly_schedule_is_not_absent_after_its_last_success_was_pruned():
    """Before: with 30-day retention a yearly schedule was 'absent' 11 months a year."""
    with frozen_clock(T0) as clock:
        yearly = Schedule.objects.create(
            name="yearly", task_name="tests.noop", cron="0 3 1 1 *", created_at=T0 - 800 * DAY
        )
        new_year = dt.datetime(2027, 1, 1, 3, 0, tzinfo=dt.UTC)
        ran = job("tests.noop", Job.Status.SUCCEEDED, at=new_year + dt.timedelta(minutes=5))
        ScheduleOccurrence.objects.create(
            schedule=yearly, occurrence_at=new_year, outcome="enqueued", job=ran
        )
        assert prune(T0).counts["jobs"] == 1
        evaluate()
        assert open_alerts(Kind.ABSENT) == {}

        clock.advance(400 * DAY)  # no success since: absent, and it says when it last ran
        evaluate()
        alert = open_alerts(Kind.ABSENT)["schedule:yearly"]
        assert alert.numbers["last_success"] == ran.finished_at.isoformat()


def test_a_dead_tasks_absent_alert_stays_open_after_its_history_is_pruned():
    """Before: pruning its last jobs took its history away and the alert resolved itself."""
    with frozen_clock(T0) as clock:
        job(HOURLY, Job.Status.SUCCEEDED, at=T0 - 40 * DAY)
        evaluate()
        assert set(open_alerts(Kind.ABSENT)) == {"task:%s" % HOURLY}

        assert prune(T0).counts["jobs"] == 1
        clock.advance(dt.timedelta(minutes=1))
        evaluate()
        alert = open_alerts(Kind.ABSENT)["task:%s" % HOURLY]
        assert alert.numbers["last_success"] == (T0 - 40 * DAY).isoformat()


def test_zero_runs_alert_counts_the_pruned_successes_of_a_weekly_task():
    """Before: two weekly runs with 0 items, one of them pruned, never alerted (N=2)."""
    with frozen_clock(T0):
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 45 * DAY, result={"processed": 0})
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 38 * DAY, result={"processed": 0})
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 31 * DAY, result={"other": 1})
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 24 * DAY, result={"processed": 0})
        assert prune(T0).counts["jobs"] == 3
        evaluate()
        assert open_alerts(Kind.SUSPICIOUS_SUCCESS) == {}  # the run before had no count

        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 17 * DAY, result={"processed": 0})
        run = prune(T0 + 10 * DAY)
        # Deleted, or dropped with a history partition it moved into at the run before.
        assert run.counts["jobs"] + run.counts.get(PARTITIONED_JOBS, 0) == 1
        evaluate()
        alert = open_alerts(Kind.SUSPICIOUS_SUCCESS)["task:%s" % COUNTED]
        assert alert.numbers == {"zero_runs": 2, "count_key": "processed"}


@pytest.mark.postgres_only
def test_remembering_what_a_prune_takes_reads_a_few_index_entries_not_every_job_that_goes():
    """Before: one aggregate over every job that goes (a whole partition, on a partitioned
    job table), so retention cost as much per job as deleting them one by one."""
    going = [
        Job(
            task_name=task,
            status=Job.Status.SUCCEEDED,
            scheduled_for=T0 - 40 * DAY,
            run_at=T0 - 40 * DAY,
            finished_at=T0 - 40 * DAY + dt.timedelta(seconds=n),
            attempts=1,
            result={"processed": 1},
        )
        for n in range(300)
        for task in (HOURLY, COUNTED, "tests.unknown")
    ]
    Job.objects.bulk_create(going)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_app_job")

    with frozen_clock(T0), CaptureQueriesContext(connection) as queries:
        remember_pruned(T0 - 30 * DAY, None)

    reads = reads_of(queries.captured_queries, "scheduler_app_job")
    assert reads and reads[0][0] < 50, reads
    remembered = AlertMemory.objects.get(subject="task:%s" % HOURLY)
    assert remembered.last_success_at == T0 - 40 * DAY + dt.timedelta(seconds=299)
    assert remembered.first_finished_at == T0 - 40 * DAY
