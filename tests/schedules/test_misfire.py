"""Downtime of 3 hours on a 15-minute schedule, under each misfire policy.

The 09:00 occurrence runs; then no scheduler runs until after 12:00, so the
twelve occurrences 09:15 ... 12:00 are due at once. The grace period is the
default minute. What each policy does is documented in schedules/policy.py:

- run_once: one catch-up run, for the latest occurrence; the others are
  recorded skipped_misfire.
- run_all, overlap allow: every missed occurrence, oldest first, each with
  its own scheduled_for.
- run_all, overlap skip: the runs of one catch-up count as earlier runs for
  each other, so only the oldest runs; the others are skipped_overlap.
- skip: only the occurrence within the grace period (if the scheduler is
  back within a minute of 12:00) runs; the missed ones are skipped_misfire.

Afterwards the schedule is back on its 15 minutes: 12:15 runs, once.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Schedule
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.schedules.steps import (
    Outcome,
    every,
    finish_all,
    jobs_of,
    make_schedule,
    outcome_times,
    utc,
)

QUARTER = dt.timedelta(minutes=15)
LAST_RUN = utc(2026, 6, 1, 9, 0)
MISSED = every(LAST_RUN + QUARTER, QUARTER, 12)  # 09:15 ... 12:00
NOON = utc(2026, 6, 1, 12, 0)
BACK_IN_GRACE = NOON + dt.timedelta(seconds=30)
BACK_LATE = NOON + dt.timedelta(minutes=5)

KINDS = {
    "cron": {"kind": Schedule.Kind.CRON, "cron": "*/15 * * * *", "timezone": "Europe/Paris"},
    "fixed_rate": {
        "kind": Schedule.Kind.FIXED_RATE,
        "interval": QUARTER,
        "start_at": utc(2026, 6, 1, 7, 0),
    },
}

# misfire, overlap, when the scheduler is back -> enqueued, skipped_misfire, skipped_overlap
POLICIES = {
    "run_once": ("run_once", "skip", BACK_LATE, [NOON], MISSED[:-1], []),
    "run_once-allow": ("run_once", "allow", BACK_LATE, [NOON], MISSED[:-1], []),
    "run_all-allow": ("run_all", "allow", BACK_LATE, MISSED, [], []),
    "run_all-skip": ("run_all", "skip", BACK_LATE, MISSED[:1], [], MISSED[1:]),
    "skip-back-within-grace": ("skip", "skip", BACK_IN_GRACE, [NOON], MISSED[:-1], []),
    "skip-back-late": ("skip", "skip", BACK_LATE, [], MISSED, []),
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_three_hours_of_downtime_follow_the_misfire_policy(kind, policy):
    misfire, overlap, back_at, enqueued, skipped_misfire, skipped_overlap = POLICIES[policy]
    with frozen_clock(LAST_RUN) as clock:
        schedule = make_schedule(
            "quarterly", misfire_policy=misfire, overlap_policy=overlap, **KINDS[kind]
        )
        assert enqueue_due_occurrences() == 1
        finish_all(LAST_RUN)

        clock.set(back_at)  # three hours without a scheduler
        assert enqueue_due_occurrences() == len(enqueued)
        assert enqueue_due_occurrences() == 0  # a second tick changes nothing

        catch_up = jobs_of(schedule)[1:]
        assert [job.scheduled_for for job in catch_up] == enqueued
        # Oldest first: created and due in occurrence order, each at its own time.
        assert [job.run_at for job in catch_up] == enqueued
        assert sorted(catch_up, key=lambda job: (job.run_at, job.pk)) == catch_up
        assert outcome_times(schedule, Outcome.ENQUEUED) == [LAST_RUN, *enqueued]
        assert outcome_times(schedule, Outcome.SKIPPED_MISFIRE) == skipped_misfire
        assert outcome_times(schedule, Outcome.SKIPPED_OVERLAP) == skipped_overlap
        # Every occurrence is accounted for, exactly once.
        assert sorted([*enqueued, *skipped_misfire, *skipped_overlap]) == MISSED

        # Back on schedule.
        finish_all(back_at)
        clock.set(NOON + QUARTER)
        assert enqueue_due_occurrences() == 1
        clock.advance(QUARTER)
        # 12:15 has not finished: under overlap skip, 12:30 is skipped.
        assert enqueue_due_occurrences() == (1 if overlap == "allow" else 0)
        finish_all(NOON + 2 * QUARTER)
        clock.advance(QUARTER)
        assert enqueue_due_occurrences() == 1

    expected_after = [NOON + QUARTER, NOON + 3 * QUARTER]
    if overlap == "allow":
        expected_after = [NOON + QUARTER, NOON + 2 * QUARTER, NOON + 3 * QUARTER]
    assert [job.scheduled_for for job in jobs_of(schedule)] == [
        LAST_RUN,
        *enqueued,
        *expected_after,
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_run_once_after_a_backlog_longer_than_one_tick_still_runs_once_for_the_latest(overlap):
    """A minutely schedule back after 1100 minutes (e.g. re-enabled the next day)."""
    minute = dt.timedelta(minutes=1)
    with frozen_clock(LAST_RUN) as clock:
        schedule = make_schedule(
            "minutely", cron="* * * * *", overlap_policy=overlap, next_run_at=LAST_RUN
        )
        assert enqueue_due_occurrences() == 1
        finish_all(LAST_RUN)
        latest = LAST_RUN + 1100 * minute
        clock.set(latest + dt.timedelta(seconds=5))
        ticks = [enqueue_due_occurrences() for _ in range(3)]
    assert [job.scheduled_for for job in jobs_of(schedule)] == [LAST_RUN, latest]
    assert ticks == [1, 0, 0] or ticks == [0, 1, 0]
    assert len(outcome_times(schedule, Outcome.SKIPPED_MISFIRE)) == 1099
    assert outcome_times(schedule, Outcome.SKIPPED_OVERLAP) == []
