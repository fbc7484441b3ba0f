"""Declared schedules during a rolling deploy: each version syncs only what it declares,
never disables anything, and the highest SCHEDULES_VERSION wins a disagreement, so the
cursor never flips between two rules and no occurrence is dropped. Pruning is explicit."""

from __future__ import annotations

import io
import logging

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Schedule
from scheduler_app.schedules.declared import sync_declared_schedules
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from tests.schedules.steps import TASK, Outcome, make_schedule, outcome_times, utc

pytestmark = pytest.mark.django_db

HOURLY = {"report": {"task": TASK, "cron": "0 * * * *", "overlap": "allow"}}
HALF_HOURLY = {"report": {"task": TASK, "cron": "*/30 * * * *", "overlap": "allow"}}


def version(number, schedules):
    """Settings of a worker that runs SCHEDULES_VERSION ``number`` declaring ``schedules``."""
    return override_settings(
        SCHEDULER_APP={
            **settings.SCHEDULER_APP,
            "SCHEDULES": schedules,
            "SCHEDULES_VERSION": number,
        }
    )


def sync(number, schedules):
    with version(number, schedules):
        return sync_declared_schedules()


def test_mixed_versions_never_flip_the_cursor_nor_drop_an_occurrence(caplog):
    with frozen_clock(utc(2026, 6, 1, 9, 59, 30)) as clock:
        sync(1, HOURLY)
        enqueue_due_occurrences()
        report = Schedule.objects.get(name="report")
        assert report.next_run_at == utc(2026, 6, 1, 10, 0)

        # The deploy starts after 10:00 has come but before the scheduler ticked.
        clock.set(utc(2026, 6, 1, 10, 0, 30))
        sync(2, HALF_HOURLY)
        assert Schedule.objects.get(name="report").next_run_at == utc(2026, 6, 1, 10, 0)
        enqueue_due_occurrences()

        # An old worker restarts mid-deploy: its declaration is ignored.
        clock.set(utc(2026, 6, 1, 10, 10))
        sync(1, HOURLY)
        enqueue_due_occurrences()
        clock.set(utc(2026, 6, 1, 10, 30, 5))
        enqueue_due_occurrences()
        clock.set(utc(2026, 6, 1, 10, 40))
        sync(1, HOURLY)
        clock.set(utc(2026, 6, 1, 11, 0, 5))
        enqueue_due_occurrences()

    report = Schedule.objects.get(name="report")
    assert (report.cron, report.declared_version) == ("*/30 * * * *", 2)
    assert report.next_run_at == utc(2026, 6, 1, 11, 30)
    assert outcome_times(report, Outcome.ENQUEUED) == [
        utc(2026, 6, 1, 10, 0),
        utc(2026, 6, 1, 10, 30),
        utc(2026, 6, 1, 11, 0),
    ]
    assert report.occurrences.exclude(outcome=Outcome.ENQUEUED).count() == 0
    ignored = (
        "schedule declared by a newer version, ignoring ours schedule=report version=1 "
        "stored_version=2 fields=cron"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [ignored, ignored]  # the old worker's two syncs


def test_same_or_higher_version_updates_and_a_future_cursor_follows_the_new_rule():
    with frozen_clock(utc(2026, 6, 1, 10, 5)):
        sync(1, HOURLY)
        enqueue_due_occurrences()
        assert Schedule.objects.get(name="report").next_run_at == utc(2026, 6, 1, 11, 0)
        sync(1, HALF_HOURLY)
        assert Schedule.objects.get(name="report").next_run_at is None
        enqueue_due_occurrences()
        sync(3, {"report": {**HALF_HOURLY["report"], "payload": {"v": 3}}})

    report = Schedule.objects.get(name="report")
    assert (report.cron, report.payload, report.declared_version, report.next_run_at) == (
        "*/30 * * * *",
        {"v": 3},
        3,
        utc(2026, 6, 1, 10, 30),
    )


def test_sync_never_disables_a_schedule_this_version_does_not_declare():
    with frozen_clock(utc(2026, 6, 1, 10, 5)):
        sync(2, {**HOURLY, "new-report": {"task": TASK, "cron": "15 * * * *"}})
        enqueue_due_occurrences()
        sync(1, HOURLY)  # an old worker that does not know "new-report" yet
        sync(2, {})  # a version that dropped both

    stored = {s.name: s for s in Schedule.objects.all()}
    assert {n: (s.enabled, s.declared_in_code) for n, s in stored.items()} == {
        "report": (True, True),
        "new-report": (True, True),
    }
    assert stored["new-report"].next_run_at == utc(2026, 6, 1, 10, 15)


def test_sync_schedules_prune_disables_only_what_this_version_no_longer_declares():
    with frozen_clock(utc(2026, 6, 1, 10, 5)):
        sync(1, {"old": {"task": TASK, "cron": "0 * * * *"}, **HOURLY})
        sync(3, {"newer": {"task": TASK, "cron": "0 * * * *"}})
        make_schedule("operators-own", cron="*/5 * * * *")
        out = io.StringIO()
        with version(2, HOURLY):
            call_command("sync_schedules", "--prune", stdout=out)

    assert out.getvalue() == (
        "Synced 1 declared schedule(s) at SCHEDULES_VERSION 2.\n"
        "Pruned 1 schedule(s) no longer declared: old.\n"
    )
    stored = {s.name: s for s in Schedule.objects.all()}
    assert {n: (s.enabled, s.declared_in_code, s.declared_version) for n, s in stored.items()} == {
        "old": (False, False, 2),
        "report": (True, True, 2),
        "newer": (True, True, 3),
        "operators-own": (True, False, 0),
    }


def test_sync_schedules_without_prune_disables_nothing():
    sync(1, {"old": {"task": TASK, "cron": "0 * * * *"}})
    out = io.StringIO()
    with version(1, HOURLY):
        call_command("sync_schedules", stdout=out)

    assert out.getvalue() == "Synced 1 declared schedule(s) at SCHEDULES_VERSION 1.\n"
    assert Schedule.objects.get(name="old").enabled is True


def test_sync_schedules_with_an_invalid_declaration_exits_with_the_reason():
    from django.core.management.base import CommandError

    with version(1, {"bad": {"task": TASK}}), pytest.raises(CommandError) as excinfo:
        call_command("sync_schedules")
    assert str(excinfo.value) == (
        "SCHEDULER_APP['SCHEDULES']['bad']: give exactly one of cron, fixed_rate and fixed_delay."
    )
