"""The schedule admin's prune action: disables selected schedules code no longer declares."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.models import Schedule
from tests.admin.conftest import messages_of, post_action

pytestmark = pytest.mark.django_db

TASK = "tests.noop"


def declared(name, version):
    return Schedule.objects.create(
        name=name, task_name=TASK, cron="0 * * * *", declared_in_code=True, declared_version=version
    )


def test_prune_disables_only_selected_schedules_no_longer_declared(admin):
    gone = declared("gone", 1)
    still = declared("still", 1)
    newer = declared("newer", 5)
    own = Schedule.objects.create(name="own", task_name=TASK, cron="0 * * * *")
    code = {"still": {"task": TASK, "cron": "0 * * * *"}}

    with override_settings(
        SCHEDULER_APP={**settings.SCHEDULER_APP, "SCHEDULES": code, "SCHEDULES_VERSION": 2}
    ):
        response = post_action(admin, "schedule", "prune", [gone, still, newer, own])

    assert messages_of(response) == [
        ("success", "1 schedule pruned: disabled, no longer owned by code."),
        (
            "info",
            "3 schedules kept: still declared, not from code, or written by a newer "
            "SCHEDULES_VERSION.",
        ),
    ]
    states = Schedule.objects.values_list("name", "enabled", "declared_in_code", "declared_version")
    assert sorted(states) == [
        ("gone", False, False, 2),
        ("newer", True, True, 5),
        ("own", True, False, 0),
        ("still", True, True, 1),
    ]
