"""Two scheduler loops racing on real PostgreSQL connections enqueue each occurrence once.

Each contender is a thread with its own Django connection. For every step of
a sequence of times both are released together by a threading.Barrier and
call enqueue_due_occurrences(now=...) a few times each (the frozen clock is
process-global, so ``now`` is passed explicitly). The database must end up
with exactly one record, and for the schedules that allow overlap exactly
one job, per occurrence; and the two loops together report every job once.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading

import pytest
from django.db import connection

from scheduler_app.models import Job, Schedule, ScheduleOccurrence
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.schedules.steps import MINUTE, Outcome, make_schedule, utc

TIMEOUT = 30.0
STEPS = 50
CALLS_PER_STEP = 3
T0 = utc(2026, 6, 1, 10, 0)
TIMES = [T0 + i * MINUTE for i in range(STEPS)]
LOCK_KEY = "SELECT %s(hashtext('scheduler_app.schedules'))"


def create_schedules():
    """Return schedule -> expected occurrence times within TIMES."""
    every_minute = TIMES
    return {
        make_schedule(
            "race-cron-1m", cron="* * * * *", timezone="Europe/London", overlap_policy="allow",
            next_run_at=T0,
        ): every_minute,
        make_schedule(
            "race-cron-5m", cron="*/5 * * * *", timezone="America/New_York",
            overlap_policy="allow", misfire_policy="run_all", next_run_at=T0,
        ): TIMES[::5],
        make_schedule(
            "race-rate-1m", kind=Schedule.Kind.FIXED_RATE, interval=MINUTE, start_at=T0,
            overlap_policy="allow", next_run_at=T0,
        ): every_minute,
        make_schedule(
            "race-rate-2m", kind=Schedule.Kind.FIXED_RATE, interval=2 * MINUTE, start_at=T0,
            overlap_policy="allow", next_run_at=T0,
        ): TIMES[::2],
        # Overlap skip: the first job never finishes, so the others are skipped, once each.
        make_schedule(
            "race-cron-skip", cron="* * * * *", overlap_policy="skip", next_run_at=T0,
        ): every_minute,
    }  # fmt: skip


class SchedulerLoop(threading.Thread):
    """Call enqueue_due_occurrences(now=t) CALLS_PER_STEP times per step, on its own connection."""

    def __init__(self, name, barrier):
        super().__init__(name=name, daemon=True)
        self.barrier = barrier
        self.enqueued = 0
        self.per_step: list[int] = []
        self.error: BaseException | None = None

    def run(self):
        try:
            connection.ensure_connection()  # connecting is not part of the race
            for now in TIMES:
                self.barrier.wait(timeout=TIMEOUT)
                step = sum(enqueue_due_occurrences(now=now) for _ in range(CALLS_PER_STEP))
                self.per_step.append(step)
                self.enqueued += step
        except threading.BrokenBarrierError:
            pass  # the other loop failed; it reports why
        except BaseException as exc:  # raised again by the test
            self.error = exc
            self.barrier.abort()
        finally:
            connection.close()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_scheduler_loops_racing_create_exactly_one_job_per_occurrence():
    expected = create_schedules()
    barrier = threading.Barrier(2)
    loops = [SchedulerLoop("scheduler-a", barrier), SchedulerLoop("scheduler-b", barrier)]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join(timeout=TIMEOUT * 2)
    for loop in loops:
        if loop.error is not None:
            raise loop.error
    assert not any(loop.is_alive() for loop in loops)

    for schedule, times in expected.items():
        records = list(
            ScheduleOccurrence.objects.filter(schedule=schedule)
            .order_by("occurrence_at")
            .values_list("occurrence_at", "outcome")
        )
        assert [at for at, _ in records] == times, schedule.name  # each occurrence once
        jobs = list(
            Job.objects.filter(schedule_occurrences__schedule=schedule)
            .order_by("scheduled_for")
            .values_list("scheduled_for", flat=True)
        )
        if schedule.overlap_policy == "allow":
            assert jobs == times, schedule.name
            assert {outcome for _, outcome in records} == {Outcome.ENQUEUED}
        else:
            assert jobs == times[:1], schedule.name
            assert [outcome for _, outcome in records] == [Outcome.ENQUEUED] + [
                Outcome.SKIPPED_OVERLAP
            ] * (len(times) - 1)
    # One job per unique key, and the loops reported each job exactly once between them.
    keys = collections.Counter(Job.objects.values_list("unique_key", flat=True))
    assert set(keys.values()) == {1}
    total = Job.objects.count()
    assert total == sum(len(t) for s, t in expected.items() if s.overlap_policy == "allow") + 1
    assert sum(loop.enqueued for loop in loops) == total
    # Per step, the two loops together created exactly that step's jobs.
    per_step = [a + b for a, b in zip(loops[0].per_step, loops[1].per_step, strict=True)]
    assert per_step == [
        sum(1 for s, t in expected.items() if s.overlap_policy == "allow" and now in t)
        + (1 if now == T0 else 0)
        for now in TIMES
    ]
    print(
        "schedule race over %s steps: scheduler-a enqueued %s, scheduler-b %s"
        % (STEPS, loops[0].enqueued, loops[1].enqueued)
    )


class LockHolder(threading.Thread):
    """Hold the scheduler's advisory lock on another connection until told to release it."""

    def __init__(self):
        super().__init__(name="lock-holder", daemon=True)
        self.held = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute(LOCK_KEY % "pg_advisory_lock")
                self.held.set()
                self.release.wait(timeout=TIMEOUT)
                cursor.execute(LOCK_KEY % "pg_advisory_unlock")
        except BaseException as exc:
            self.error = exc
        finally:
            self.held.set()
            connection.close()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_scheduler_lock_held_elsewhere_means_this_worker_enqueues_nothing_until_released():
    schedule = make_schedule("locked", cron="*/5 * * * *", next_run_at=T0)
    holder = LockHolder()
    holder.start()
    try:
        assert holder.held.wait(timeout=TIMEOUT)
        assert holder.error is None
        assert enqueue_due_occurrences(now=T0) == 0
        assert not ScheduleOccurrence.objects.exists()
        assert not Job.objects.exists()
        schedule.refresh_from_db()
        assert schedule.next_run_at == T0  # the cursor did not move
    finally:
        holder.release.set()
        holder.join(timeout=TIMEOUT)
    assert holder.error is None
    assert not holder.is_alive()
    assert enqueue_due_occurrences(now=T0 + dt.timedelta(seconds=1)) == 1
    assert list(Job.objects.values_list("scheduled_for", flat=True)) == [T0]
