"""The @task decorator, TaskSpec and get_task()."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from scheduler_app import registry
from scheduler_app.exceptions import UnknownTask, UnsupportedPayloadVersion, ValidationError
from scheduler_app.registry import DEFAULT_RETRY_POLICY, JobContext, TaskSpec, get_task, task
from scheduler_app.retry import RetryPolicy


@pytest.fixture(autouse=True)
def clean_registry():
    """Leave the process-wide registry as it was: these tests register throwaway tasks."""
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def handler(ctx):
    return "handled %s" % ctx.job_id


def other_handler(ctx):
    return None


def make_context(**overrides):
    values = {
        "job_id": 7,
        "task_name": "t",
        "payload": {},
        "payload_version": 1,
        "attempt": 1,
        "scheduled_for": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "idempotency_key": "7",
    }
    return JobContext(**{**values, **overrides})


def test_bare_decorator_registers_with_defaults():
    spec = task(handler)

    assert isinstance(spec, TaskSpec)
    assert spec.name == "tests.unit.test_registry.handler"
    assert spec.func is handler
    assert spec.queue == "default"
    assert spec.priority == 0
    assert spec.max_attempts == 3
    assert spec.retry is DEFAULT_RETRY_POLICY
    assert spec.timeout is None
    assert spec.payload_versions == frozenset({1})
    assert spec.current_payload_version == 1
    assert get_task(spec.name) is spec


def test_decorator_with_options_records_them():
    policy = RetryPolicy(base=dt.timedelta(seconds=5), cap=dt.timedelta(minutes=1))

    @task(
        name="tests.unit.custom",
        queue="emails",
        priority=-5,
        max_attempts=7,
        retry=policy,
        timeout=30,
        payload_versions=(1, 3, 2),
    )
    def custom(ctx):
        return None

    assert custom.name == "tests.unit.custom"
    assert custom.queue == "emails"
    assert custom.priority == -5
    assert custom.max_attempts == 7
    assert custom.retry is policy
    assert custom.timeout == dt.timedelta(seconds=30)
    assert custom.payload_versions == frozenset({1, 2, 3})
    assert custom.current_payload_version == 3
    assert get_task("tests.unit.custom") is custom


def test_default_name_is_module_and_qualname():
    @task()
    def nested(ctx):
        return None

    assert nested.name == (
        "tests.unit.test_registry.test_default_name_is_module_and_qualname.<locals>.nested"
    )


def test_timeout_accepts_a_timedelta():
    spec = task(name="tests.unit.td", timeout=dt.timedelta(minutes=2))(handler)

    assert spec.timeout == dt.timedelta(minutes=2)


@override_settings(SCHEDULER_APP={"DEFAULT_MAX_ATTEMPTS": 9, "DEFAULT_TIMEOUT": 12.5})
def test_defaults_come_from_settings():
    spec = task(name="tests.unit.from_settings")(handler)

    assert spec.max_attempts == 9
    assert spec.timeout == dt.timedelta(seconds=12.5)


def test_task_spec_is_still_callable_with_a_job_context():
    spec = task(handler)

    assert spec(make_context(job_id=42)) == "handled 42"


def test_check_payload_version_accepts_listed_and_refuses_others():
    spec = task(name="tests.unit.versions", payload_versions=(1, 2))(handler)

    spec.check_payload_version(1)
    spec.check_payload_version(2)
    with pytest.raises(UnsupportedPayloadVersion) as excinfo:
        spec.check_payload_version(3)

    assert str(excinfo.value) == (
        "Task 'tests.unit.versions' does not accept payload version 3 (accepted: 1, 2)."
    )
    assert excinfo.value.code == "unsupported_payload_version"


@pytest.mark.parametrize("max_attempts", [0, -1])
def test_max_attempts_below_one_is_refused(max_attempts):
    with pytest.raises(ValidationError) as excinfo:
        task(name="tests.unit.bad", max_attempts=max_attempts)(handler)

    assert str(excinfo.value) == "Task 'tests.unit.bad': max_attempts must be at least 1."
    assert "tests.unit.bad" not in registry._registry


@pytest.mark.parametrize("versions", [(), frozenset(), (0,), (1, -2), ("1",)])
def test_payload_versions_must_be_a_non_empty_set_of_positive_integers(versions):
    with pytest.raises(ValidationError) as excinfo:
        task(name="tests.unit.bad", payload_versions=versions)(handler)

    assert (
        str(excinfo.value) == "Task 'tests.unit.bad': payload_versions must be positive integers."
    )
    assert "tests.unit.bad" not in registry._registry


@pytest.mark.parametrize("timeout", [0, -1, 0.0, dt.timedelta(0), dt.timedelta(seconds=-5)])
def test_timeout_must_be_positive(timeout):
    with pytest.raises(ValidationError) as excinfo:
        task(name="tests.unit.bad", timeout=timeout)(handler)

    assert str(excinfo.value) == "Task 'tests.unit.bad': timeout must be positive."
    assert "tests.unit.bad" not in registry._registry


def test_name_longer_than_the_column_is_refused():
    name = "x" * 201

    with pytest.raises(ValidationError) as excinfo:
        task(name=name)(handler)

    assert str(excinfo.value) == "Task name %r is longer than 200 characters." % name


def test_registering_a_different_function_under_a_taken_name_raises():
    original = task(name="tests.unit.taken")(handler)

    with pytest.raises(ValidationError) as excinfo:
        task(name="tests.unit.taken")(other_handler)

    assert (
        str(excinfo.value) == "Another function is already registered as task 'tests.unit.taken'."
    )
    assert get_task("tests.unit.taken") is original


def test_registering_the_same_function_again_is_allowed():
    # A module imported twice (e.g. autodiscovery plus a direct import) re-runs @task.
    task(name="tests.unit.again")(handler)
    again = task(name="tests.unit.again", priority=4)(handler)

    assert get_task("tests.unit.again") is again


def test_get_task_of_an_unknown_name_raises_unknown_task():
    with pytest.raises(UnknownTask) as excinfo:
        get_task("tests.unit.no_such_task")

    assert str(excinfo.value) == "No task is registered as 'tests.unit.no_such_task'."
    assert excinfo.value.code == "unknown_task"
    assert isinstance(excinfo.value, ValidationError)


def test_test_app_tasks_are_autodiscovered():
    assert get_task("tests.noop").payload_versions == frozenset({1})
    assert get_task("tests.versioned").current_payload_version == 2


def test_all_tasks_returns_a_copy():
    snapshot = registry.all_tasks()
    snapshot.clear()

    assert "tests.noop" in registry.all_tasks()
