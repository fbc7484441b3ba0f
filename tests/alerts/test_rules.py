"""Each alert kind opens when its rule trips and resolves by itself once it no longer does.

The clock is frozen (DatabaseNow follows it), and rows are written directly
with the timestamps each rule reads.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.models import (
    Alert,
    Job,
    JobAttempt,
    Recipient,
    Schedule,
    ScheduleOccurrence,
    SendBatch,
    WorkerHeartbeat,
)
from tests.alerts.helpers import COUNTED, HOURLY, T0, TIMED, job, open_alerts

Kind = Alert.Kind
pytestmark = pytest.mark.django_db
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


def live_worker(queues=("default", "emails", "slow")) -> WorkerHeartbeat:
    return WorkerHeartbeat.objects.create(
        worker_id="w1",
        host="h",
        pid=1,
        queues=list(queues),
        concurrency=1,
        started_at=T0,
        last_seen_at=T0,
    )


def test_late_opens_when_p95_of_first_attempts_exceeds_the_target_and_resolves_after_24h():
    with frozen_clock(T0) as clock:
        for minutes, lateness in enumerate([10, 20, 120, 130, 140]):
            started = T0 - dt.timedelta(minutes=minutes + 1)
            row = job(TIMED, Job.Status.SUCCEEDED, at=started)
            JobAttempt.objects.create(
                job=row,
                attempt=1,
                task_name=TIMED,
                due_at=started - dt.timedelta(seconds=lateness),
                started_at=started,
                finished_at=started,
                outcome="succeeded",
            )
        evaluate()
        alert = open_alerts(Kind.LATE)["task:%s" % TIMED]
        assert alert.numbers["target_seconds"] == 60
        assert alert.numbers["first_attempts"] == 5
        assert alert.numbers["p95_seconds"] == pytest.approx(138.0)
        assert alert.opened_at == T0

        clock.advance(dt.timedelta(hours=25))
        evaluate()
        alert.refresh_from_db()
        assert alert.resolved_at == T0 + dt.timedelta(hours=25)


def test_overdue_opens_for_a_job_due_longer_than_overdue_after_and_resolves_when_it_starts():
    with frozen_clock(T0):
        live_worker()
        late = Job.objects.create(
            task_name="tests.noop", scheduled_for=T0 - 11 * MINUTE, run_at=T0 - 11 * MINUTE
        )
        Job.objects.create(task_name="tests.noop", scheduled_for=T0 - MINUTE, run_at=T0 - MINUTE)
        evaluate()
        alert = open_alerts(Kind.OVERDUE)["task:tests.noop"]
        assert alert.numbers["jobs"] == 1
        assert alert.numbers["waiting_seconds"] == 660
        assert "status=pending" in alert.admin_url and "task_name=tests.noop" in alert.admin_url

        Job.objects.filter(pk=late.pk).update(status=Job.Status.RUNNING, started_at=T0)
        evaluate()
        assert open_alerts(Kind.OVERDUE) == {}
        assert Alert.objects.get(pk=alert.pk).resolved_at == T0


def test_absent_opens_for_a_task_without_a_success_within_expected_every_and_resolves():
    with frozen_clock(T0) as clock:
        job(HOURLY, Job.Status.SUCCEEDED, at=T0 - 2 * HOUR)
        evaluate()
        alert = open_alerts(Kind.ABSENT)["task:%s" % HOURLY]
        assert alert.numbers == {
            "expected_every_seconds": 3600,
            "last_success": (T0 - 2 * HOUR).isoformat(),
        }
        clock.advance(MINUTE)
        job(HOURLY, Job.Status.SUCCEEDED, at=T0)
        evaluate()
        assert open_alerts(Kind.ABSENT) == {}


def test_absent_for_a_schedule_follows_its_recurrence_by_default():
    with frozen_clock(T0) as clock:
        schedule = Schedule.objects.create(
            name="every-ten",
            task_name="tests.noop",
            kind=Schedule.Kind.FIXED_RATE,
            interval=dt.timedelta(minutes=10),
            created_at=T0 - HOUR,
        )
        evaluate()
        alert = open_alerts(Kind.ABSENT)["schedule:every-ten"]
        # 1.1 x 10 min + the default misfire grace of 1 min.
        assert alert.numbers["expected_every_seconds"] == 720

        ran = job("tests.noop", Job.Status.SUCCEEDED, at=T0 - MINUTE)
        ScheduleOccurrence.objects.create(
            schedule=schedule, occurrence_at=T0 - 2 * MINUTE, outcome="enqueued", job=ran
        )
        evaluate()
        assert open_alerts(Kind.ABSENT) == {}

        clock.advance(13 * MINUTE)
        evaluate()
        assert set(open_alerts(Kind.ABSENT)) == {"schedule:every-ten"}


def test_absent_for_a_fixed_delay_schedule_allows_for_how_long_its_runs_take():
    """The delay counts from the end of a run: a 1-hour delay with 10-minute runs succeeds
    every 70 minutes. Before, its window (1.1 x 1 h + 1 min) opened an alert every hour."""
    with frozen_clock(T0) as clock:
        schedule = Schedule.objects.create(
            name="hourly-delay",
            task_name="tests.noop",
            kind=Schedule.Kind.FIXED_DELAY,
            interval=HOUR,
            created_at=T0 - 10 * HOUR,
        )
        ran = job("tests.noop", Job.Status.SUCCEEDED, at=T0, started_at=T0 - 10 * MINUTE)
        ScheduleOccurrence.objects.create(
            schedule=schedule, occurrence_at=T0 - 10 * MINUTE, outcome="enqueued", job=ran
        )
        clock.advance(68 * MINUTE)  # the next run started 8 minutes ago
        evaluate()
        assert open_alerts(Kind.ABSENT) == {}

        clock.advance(11 * MINUTE)  # (60 + 10) x 1.1 + 1 = 78 minutes without a success
        evaluate()
        alert = open_alerts(Kind.ABSENT)["schedule:hourly-delay"]
        assert alert.numbers["expected_every_seconds"] == 78 * 60


@pytest.mark.postgres_only  # SQLite cannot store such a jitter
def test_absent_is_evaluated_for_every_schedule_when_one_has_a_duration_too_long_to_add():
    with frozen_clock(T0):
        Schedule.objects.create(
            name="every-ten",
            task_name="tests.noop",
            kind=Schedule.Kind.FIXED_RATE,
            interval=dt.timedelta(minutes=10),
            created_at=T0 - HOUR,
        )
        # Stored before durations were bounded (or by code that skips validation).
        Schedule.objects.create(
            name="a-jittery-one",
            task_name="tests.noop",
            cron="0 3 * * *",
            jitter=dt.timedelta(days=999_999_999),
        )
        result = evaluate()
    assert result.failed_rules == ()
    assert set(open_alerts(Kind.ABSENT)) == {"schedule:every-ten"}


def test_absent_for_a_schedule_reports_the_schedules_last_success_not_its_tasks():
    """A job of the same task run outside the schedule is no success of the schedule."""
    with frozen_clock(T0):
        schedule = Schedule.objects.create(
            name="every-ten",
            task_name="tests.noop",
            kind=Schedule.Kind.FIXED_RATE,
            interval=dt.timedelta(minutes=10),
            created_at=T0 - HOUR,
        )
        ran = job("tests.noop", Job.Status.SUCCEEDED, at=T0 - 30 * MINUTE)
        ScheduleOccurrence.objects.create(
            schedule=schedule, occurrence_at=T0 - 31 * MINUTE, outcome="enqueued", job=ran
        )
        job("tests.noop", Job.Status.SUCCEEDED, at=T0 - MINUTE)  # scheduled by hand
        evaluate()

        alert = open_alerts(Kind.ABSENT)["schedule:every-ten"]
        assert alert.numbers == {
            "expected_every_seconds": 720,
            "last_success": (T0 - 30 * MINUTE).isoformat(),
        }
        assert alert.summary == (
            "schedule:every-ten has not succeeded for longer than 0:12:00 "
            "(last success: %s)." % (T0 - 30 * MINUTE).isoformat()
        )


def test_suspicious_success_needs_n_zero_runs_in_a_row_and_a_result_without_the_key_never_counts():
    with frozen_clock(T0):
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 3 * MINUTE, result={"processed": 0})
        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - 2 * MINUTE, result={"other": 1})
        evaluate()
        assert open_alerts(Kind.SUSPICIOUS_SUCCESS) == {}

        job(COUNTED, Job.Status.SUCCEEDED, at=T0 - MINUTE, result={"processed": 0})
        job(COUNTED, Job.Status.SUCCEEDED, at=T0, result={"processed": 0})
        evaluate()
        alert = open_alerts(Kind.SUSPICIOUS_SUCCESS)["task:%s" % COUNTED]
        assert alert.numbers == {"zero_runs": 2, "count_key": "processed"}

        job(COUNTED, Job.Status.SUCCEEDED, at=T0 + MINUTE, result={"processed": 4})
        evaluate()
        assert open_alerts(Kind.SUSPICIOUS_SUCCESS) == {}


def test_failing_opens_above_the_rate_of_final_failures_and_resolves_when_the_window_moves_on():
    with frozen_clock(T0) as clock:
        job("tests.noop", Job.Status.FAILED, at=T0 - 10 * MINUTE)
        job("tests.noop", Job.Status.FAILED, at=T0 - 5 * MINUTE)
        job("tests.noop", Job.Status.SUCCEEDED, at=T0 - MINUTE)
        job("tests.record", Job.Status.FAILED, at=T0 - MINUTE)
        job("tests.record", Job.Status.SUCCEEDED, at=T0 - MINUTE)  # 50%: not above the rate
        evaluate()
        alerts = open_alerts(Kind.FAILING)
        assert set(alerts) == {"task:tests.noop"}
        assert alerts["task:tests.noop"].numbers["failed"] == 2
        assert alerts["task:tests.noop"].numbers["finished"] == 3

        clock.advance(2 * HOUR)
        evaluate()
        assert open_alerts(Kind.FAILING) == {}


def test_long_running_opens_for_a_run_past_max_runtime_and_resolves_when_it_ends():
    with frozen_clock(T0):
        running = job(TIMED, Job.Status.RUNNING, at=T0, started_at=T0 - MINUTE)
        job(TIMED, Job.Status.RUNNING, at=T0, started_at=T0 - dt.timedelta(seconds=10))
        evaluate()
        alert = open_alerts(Kind.LONG_RUNNING)["task:%s" % TIMED]
        assert alert.numbers == {"runs": 1, "longest_seconds": 60, "max_runtime_seconds": 30}

        Job.objects.filter(pk=running.pk).update(status=Job.Status.SUCCEEDED, finished_at=T0)
        evaluate()
        assert open_alerts(Kind.LONG_RUNNING) == {}


def test_stalled_send_opens_when_a_sending_batch_marks_nobody_while_recipients_are_due():
    with frozen_clock(T0):
        batch = SendBatch.objects.create(
            name="News",
            subject_template="s",
            text_template="t",
            audience="tests.customers",
            expected_max_audience=10,
            status=SendBatch.Status.SENDING,
            scheduled_at=T0 - HOUR,
            started_at=T0 - HOUR,
            progressed_at=T0 - 20 * MINUTE,
            total=2,
        )
        Recipient.objects.create(
            batch=batch,
            recipient_key="1",
            address="a@example.com",
            next_attempt_at=T0 - HOUR,
        )
        evaluate()
        alert = open_alerts(Kind.STALLED_SEND)["batch:%s" % batch.pk]
        assert alert.numbers["last_progress"] == (T0 - 20 * MINUTE).isoformat()
        assert alert.admin_url.endswith("/sendbatch/%s/change/" % batch.pk)

        SendBatch.objects.filter(pk=batch.pk).update(progressed_at=T0)
        evaluate()
        assert open_alerts(Kind.STALLED_SEND) == {}


def test_no_worker_opens_for_a_queue_with_due_jobs_and_no_live_worker_and_resolves():
    with frozen_clock(T0) as clock:
        Job.objects.create(task_name="tests.noop", queue="emails", scheduled_for=T0, run_at=T0)
        Job.objects.create(
            task_name="tests.noop", queue="slow", scheduled_for=T0 + HOUR, run_at=T0 + HOUR
        )  # not due: no alert for "slow"
        evaluate()
        assert set(open_alerts(Kind.NO_WORKER)) == {"queue:emails"}

        live_worker(queues=["emails"])
        evaluate()
        assert open_alerts(Kind.NO_WORKER) == {}

        # Silent for longer than WORKER_LOST_AFTER: marked lost, and the queue is unserved again.
        clock.advance(dt.timedelta(seconds=61))
        evaluation = evaluate()
        assert evaluation.lost_workers == 1
        assert WorkerHeartbeat.objects.get().status == WorkerHeartbeat.Status.LOST
        assert set(open_alerts(Kind.NO_WORKER)) == {"queue:emails"}


def test_an_alert_stays_one_row_while_open_and_a_new_breach_opens_a_new_one():
    """A breach back within ALERT_RESOLVE_AFTER (300 s) reopens the alert; later, a new one."""
    with frozen_clock(T0) as clock:
        live_worker()
        pending = Job.objects.create(
            task_name="tests.noop", scheduled_for=T0 - HOUR, run_at=T0 - HOUR
        )
        evaluate()
        clock.advance(MINUTE)
        evaluate()
        first = Alert.objects.get(kind=Kind.OVERDUE)
        assert first.opened_at == T0 and first.last_seen_at == T0 + MINUTE

        Job.objects.filter(pk=pending.pk).update(status=Job.Status.CANCELLED)
        evaluate()
        pending = Job.objects.create(
            task_name="tests.noop", scheduled_for=T0 - HOUR, run_at=T0 - HOUR
        )
        evaluate()
        assert open_alerts(Kind.OVERDUE)["task:tests.noop"].pk == first.pk

        Job.objects.filter(pk=pending.pk).update(status=Job.Status.CANCELLED)
        evaluate()
        clock.advance(5 * MINUTE)
        evaluate()
        Job.objects.create(task_name="tests.noop", scheduled_for=T0 - HOUR, run_at=T0 - HOUR)
        evaluate()
        assert Alert.objects.filter(kind=Kind.OVERDUE).count() == 2
        assert open_alerts(Kind.OVERDUE)["task:tests.noop"].pk != first.pk


def test_a_cron_schedules_default_absence_window_covers_its_longest_gap():
    from scheduler_app.alerts.rules import expected_cadence

    weekdays = Schedule(
        name="weekdays",
        task_name="tests.noop",
        cron="0 9 * * 1-5",
        timezone="Europe/London",
        misfire_grace=MINUTE,
        jitter=dt.timedelta(0),
    )
    # Friday 09:00 to Monday 09:00 is the longest gap: 3 days x 1.1, plus the grace.
    assert expected_cadence(weekdays, T0) == dt.timedelta(days=3) * 1.1 + MINUTE
    weekdays.expected_every = dt.timedelta(hours=26)
    assert expected_cadence(weekdays, T0) == dt.timedelta(hours=26)
