"""System check scheduler_app.E006: SCHEDULES_VERSION is an integer from 0 to 2**31-1
(a database integer column: 2**31 passed, then sync_schedules failed with DataError)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.schedules import check_schedules_version


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None])
def test_e006_refuses_a_schedules_version_that_is_not_an_integer_from_zero(value):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "SCHEDULES_VERSION": value}):
        errors = check_schedules_version()
    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E006",
            "SCHEDULER_APP['SCHEDULES_VERSION'] must be an integer, at least 0.",
        )
    ]


@pytest.mark.parametrize("value", [0, 7, 2**31 - 1])
def test_e006_accepts_integers_from_zero(value):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "SCHEDULES_VERSION": value}):
        assert check_schedules_version() == []
