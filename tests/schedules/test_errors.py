"""A schedule that cannot enqueue records an 'error' occurrence and moves on.

No exception escapes the scheduler, other schedules in the same tick still
run, and the next tick does not retry the same occurrence in a loop. A task or
queue this worker does not know may be a newer release's: that occurrence waits
for a worker that knows it, and is recorded as an error only after
UNKNOWN_TASK_GRACE.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.signals import post_init

from scheduler_app.clock import frozen_clock
from scheduler_app.conf import app_settings
from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.helpers import UnreadableError
from tests.schedules.steps import MINUTE, Outcome, finish_all, make_schedule, outcome_times, utc

T0 = utc(2026, 6, 1, 10, 0)
QUARTER = 15 * MINUTE


def grace() -> dt.timedelta:
    return dt.timedelta(seconds=app_settings.UNKNOWN_TASK_GRACE)


@pytest.mark.django_db
def test_unknown_task_waits_its_grace_then_records_an_error_occurrence_and_moves_on(caplog):
    late = T0 + grace()
    with frozen_clock(T0) as clock:
        # Stored without validation, e.g. the task was renamed in a deploy.
        broken = Schedule.objects.create(
            name="a-broken", task_name="shop.renamed_away", cron="*/15 * * * *", next_run_at=T0
        )
        healthy = make_schedule(
            "b-healthy", cron="*/15 * * * *", next_run_at=late, misfire_policy="skip"
        )

        # Within the grace a newer worker may know it: the occurrence is left for it.
        clock.set(late - MINUTE)
        assert enqueue_due_occurrences() == 0  # no exception
        broken.refresh_from_db()
        assert broken.next_run_at == T0
        assert not ScheduleOccurrence.objects.filter(schedule=broken).exists()
        assert (
            "occurrence left for a worker that knows its task schedule=a-broken error=No task "
            "is registered as 'shop.renamed_away'. grace_ends=%s" % late.isoformat()
        ) in caplog.messages

        clock.set(late)
        assert enqueue_due_occurrences() == 1  # the healthy one
        broken.refresh_from_db()
        assert broken.next_run_at == late + QUARTER
        error = ScheduleOccurrence.objects.get(schedule=broken)
        assert (error.occurrence_at, error.outcome, error.job) == (T0, Outcome.ERROR, None)
        assert error.detail == "No task is registered as 'shop.renamed_away'."

        # The next ticks of the same minute: no retry loop, nothing new.
        clock.advance(MINUTE)
        assert enqueue_due_occurrences() == 0
        assert enqueue_due_occurrences() == 0
        assert ScheduleOccurrence.objects.filter(schedule=broken).count() == 1

        # The next occurrence waits its own grace, then is recorded once, like any other.
        finish_all(clock.advance(QUARTER - MINUTE))
        assert enqueue_due_occurrences() == 1
        clock.advance(grace())
        enqueue_due_occurrences()
    assert outcome_times(broken, Outcome.ERROR) == [T0, late + QUARTER]
    assert outcome_times(healthy, Outcome.ENQUEUED)[:2] == [late, late + QUARTER]
    assert not Job.objects.filter(task_name="shop.renamed_away").exists()


@pytest.mark.django_db
def test_unknown_queue_in_a_stored_schedule_is_recorded_as_an_error_after_the_grace():
    with frozen_clock(T0) as clock:
        schedule = Schedule.objects.create(
            name="wrong-queue", task_name="tests.schedules.tick", queue="nope", cron="*/15 * * * *"
        )
        assert enqueue_due_occurrences() == 0
        assert not ScheduleOccurrence.objects.filter(schedule=schedule).exists()
        clock.advance(grace())
        assert enqueue_due_occurrences() == 0
    error = ScheduleOccurrence.objects.get(schedule=schedule)
    assert error.outcome == Outcome.ERROR
    assert error.detail == (
        "Item 0: Unknown queue 'nope'; SCHEDULER_APP['QUEUES'] lists: default, emails, slow."
    )
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + grace() + QUARTER


@pytest.mark.django_db
@pytest.mark.parametrize(
    "definition",
    [{"cron": "61 * * * *"}, {"cron": "*/15 * * * *", "timezone": "Mars/Olympus"}],
    ids=["bad-cron", "unknown-zone"],
)
def test_stored_schedule_with_invalid_cron_or_zone_is_recorded_and_spares_the_others(definition):
    with frozen_clock(T0) as clock:
        # Stored without validation (raw SQL, a data migration, a zone removed from tzdata).
        broken = Schedule.objects.create(
            name="a-broken", task_name="tests.schedules.tick", next_run_at=T0, **definition
        )
        healthy = make_schedule("b-healthy", cron="* * * * *", overlap_policy="allow")
        assert enqueue_due_occurrences() == 1
        clock.advance(MINUTE)
        assert enqueue_due_occurrences() == 1
    assert outcome_times(healthy, Outcome.ENQUEUED) == [T0, T0 + MINUTE]
    errors = ScheduleOccurrence.objects.filter(schedule=broken)
    assert [(e.occurrence_at, e.outcome) for e in errors] == [(T0, Outcome.ERROR)]
    assert errors[0].detail


@pytest.mark.django_db
def test_fixed_delay_schedule_whose_finished_jobs_were_pruned_keeps_running():
    with frozen_clock(T0) as clock:
        schedule = make_schedule(
            "delay", kind=Schedule.Kind.FIXED_DELAY, interval=QUARTER, start_at=T0
        )
        other = make_schedule("other", cron="*/15 * * * *", next_run_at=T0 + QUARTER)
        assert enqueue_due_occurrences() == 1
        finish_all(T0 + MINUTE)
        Job.objects.all().delete()  # an operator prunes finished jobs
        clock.set(T0 + QUARTER + MINUTE)
        assert enqueue_due_occurrences() == 2
    assert outcome_times(other, Outcome.ENQUEUED) == [T0 + QUARTER]
    assert len(outcome_times(schedule, Outcome.ENQUEUED)) == 2


@pytest.mark.django_db
def test_an_error_whose_message_cannot_be_read_is_recorded_and_spares_the_others():
    """A project's receiver raises while the occurrence's job is made; str() of its
    exception raises too. The tick used to die formatting it, taking the others down."""

    def refuse(sender, instance, **kwargs):
        if instance.payload == {"refused": True}:
            raise UnreadableError

    post_init.connect(refuse, sender=Job)
    try:
        with frozen_clock(T0):
            broken = make_schedule("a-broken", cron="* * * * *", payload={"refused": True})
            healthy = make_schedule("b-healthy", cron="* * * * *")
            assert enqueue_due_occurrences() == 1
    finally:
        post_init.disconnect(refuse, sender=Job)
    assert outcome_times(healthy, Outcome.ENQUEUED) == [T0]
    error = ScheduleOccurrence.objects.get(schedule=broken)
    assert (error.occurrence_at, error.outcome) == (T0, Outcome.ERROR)
    assert error.detail == "UnreadableError: <the message could not be read: RuntimeError>"
