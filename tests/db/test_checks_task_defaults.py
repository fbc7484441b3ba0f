"""DEFAULT_TIMEOUT (E008) and DEFAULT_MAX_ATTEMPTS (E004): checked, and never a crash
where tasks are registered (the built-in ones at import), which use the built-in
default while the setting is invalid."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app import registry
from scheduler_app.checks.settings import check_numeric_bounds
from scheduler_app.checks.tasks import check_task_defaults


def with_setting(**changes):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes})


@pytest.fixture
def register():
    """Register a task with the current settings; unregister it afterwards."""
    name = "tests.checks.task_defaults"
    yield lambda: registry.task(name=name)(lambda ctx: None)
    registry._registry.pop(name, None)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", "DEFAULT_TIMEOUT must be a number of seconds or a timedelta"),
        (True, "DEFAULT_TIMEOUT must be a number of seconds or a timedelta"),
        (math.nan, "DEFAULT_TIMEOUT must be a number of seconds, not NaN"),
        (math.inf, "DEFAULT_TIMEOUT must be at most 3652 days (315532800 seconds)"),
        (1e300, "DEFAULT_TIMEOUT must be at most 3652 days (315532800 seconds)"),
        (0, "DEFAULT_TIMEOUT must be positive"),
        (-1, "DEFAULT_TIMEOUT must be positive"),
    ],
)
def test_a_bad_default_timeout_is_e007_and_tasks_get_no_timeout(register, value, problem):
    with with_setting(DEFAULT_TIMEOUT=value):
        errors = check_task_defaults()
        spec = register()

    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E008",
            "SCHEDULER_APP['DEFAULT_TIMEOUT'] must be None or a positive number of seconds: "
            "%s; got %r." % (problem, value),
        )
    ]
    assert spec.timeout is None


@pytest.mark.parametrize(
    ("value", "timeout"),
    [
        (None, None),
        (30, dt.timedelta(seconds=30)),
        (2.5, dt.timedelta(seconds=2.5)),
        (dt.timedelta(minutes=5), dt.timedelta(minutes=5)),
    ],
)
def test_a_default_timeout_of_none_or_positive_seconds_passes(register, value, timeout):
    with with_setting(DEFAULT_TIMEOUT=value):
        assert check_task_defaults() == []
        assert register().timeout == timeout


@pytest.mark.parametrize("value", ["abc", None, True, 0, -1, 1.5, math.nan])
def test_a_bad_default_max_attempts_is_e004_and_tasks_get_the_built_in_default(register, value):
    with with_setting(DEFAULT_MAX_ATTEMPTS=value):
        errors = check_task_defaults()
        spec = register()

    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E004",
            "SCHEDULER_APP['DEFAULT_MAX_ATTEMPTS'] must be an integer, at least 1.",
        )
    ]
    assert spec.max_attempts == 3


def test_a_default_max_attempts_past_the_integer_column_is_e007_and_tasks_get_the_default(
    register,
):
    """2**31 passed the check, then every schedule() failed: max_attempts is an integer column."""
    with with_setting(DEFAULT_MAX_ATTEMPTS=2**31):
        errors = check_task_defaults() + check_numeric_bounds()
        spec = register()

    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E007",
            "SCHEDULER_APP['DEFAULT_MAX_ATTEMPTS'] must be at most 2147483647, not 2147483648.",
        )
    ]
    assert spec.max_attempts == 3


@pytest.mark.parametrize("value", [1, 7, 2**31 - 1])
def test_a_default_max_attempts_from_1_to_2_31_minus_1_passes(register, value):
    with with_setting(DEFAULT_MAX_ATTEMPTS=value):
        assert check_task_defaults() == []
        assert register().max_attempts == value
