"""Workers starting together sync the same newly declared schedule: one creates it, the
other finds it, neither fails (runworker used to exit with an IntegrityError).

The contenders are two connections (threads) running sync_declared_schedules(); the
first's INSERT holds the new name's index entry until its transaction ends, so the
second's INSERT waits on it, seen in pg_stat_activity before the first commits (see
tests/concurrency/test_unique_key_race.py).
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.models import Schedule
from scheduler_app.schedules.declared import sync_declared_schedules
from tests.concurrency.test_unique_key_race import race
from tests.schedules.steps import TASK

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


@override_settings(
    SCHEDULER_APP={
        **settings.SCHEDULER_APP,
        "SCHEDULES": {"nightly": {"task": TASK, "cron": "0 3 * * *"}},
    }
)
def test_two_workers_syncing_a_new_schedule_at_once_store_it_once():
    a, b = race(sync_declared_schedules, sync_declared_schedules)

    stored = Schedule.objects.get(name="nightly")
    assert [s.pk for s in a.result] == [s.pk for s in b.result] == [stored.pk]
    assert (stored.task_name, stored.cron, stored.declared_in_code) == (TASK, "0 3 * * *", True)
