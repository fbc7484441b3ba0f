"""The UNKNOWN_TASK_GRACE setting: a number of seconds >= 0, checked at startup."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.settings import check_settings
from scheduler_app.conf import app_settings


def test_default_is_one_hour():
    assert app_settings.UNKNOWN_TASK_GRACE == 3600


@pytest.mark.parametrize("value", [-1, "60", None, True])
def test_bad_unknown_task_grace_is_e005(value):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "UNKNOWN_TASK_GRACE": value}):
        errors = check_settings()

    assert [(e.id, e.msg) for e in errors] == [
        ("scheduler_app.E005", "SCHEDULER_APP['UNKNOWN_TASK_GRACE'] must be a number >= 0.")
    ]


def test_zero_unknown_task_grace_is_allowed():
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "UNKNOWN_TASK_GRACE": 0}):
        assert check_settings() == []
