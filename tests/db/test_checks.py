"""System checks: each bad SCHEDULER_APP setting gets its stable id."""

from __future__ import annotations

import math

import pytest
from django.conf import settings
from django.core import checks as django_checks
from django.test import override_settings

from scheduler_app import registry
from scheduler_app.checks.sends import check_lane_settings
from scheduler_app.checks.settings import check_settings
from scheduler_app.checks.tasks import check_task_queues
from scheduler_app.conf import DEFAULTS, app_settings


def scheduler_app_settings(**changes):
    """Return the test SCHEDULER_APP setting with ``changes`` applied."""
    return {**settings.SCHEDULER_APP, **changes}


def ids(errors):
    return [error.id for error in errors]


def test_the_test_settings_pass_every_check():
    assert check_settings() == []
    assert check_task_queues() == []


def test_checks_are_registered_with_django():
    with override_settings(SCHEDULER_APP=scheduler_app_settings(BOGUS=1)):
        errors = django_checks.run_checks(tags=[django_checks.Tags.compatibility])

    assert "scheduler_app.E001" in ids(errors)


def test_unknown_key_is_e001_with_the_known_keys_as_hint():
    with override_settings(SCHEDULER_APP=scheduler_app_settings(POLL_INTERVALL=1, BOGUS=2)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E001", "scheduler_app.E001"]
    assert [error.msg for error in errors] == [
        "Unknown key 'BOGUS' in SCHEDULER_APP.",
        "Unknown key 'POLL_INTERVALL' in SCHEDULER_APP.",
    ]
    assert errors[0].hint == "Known keys: %s." % ", ".join(sorted(DEFAULTS))
    assert all(error.level == django_checks.ERROR for error in errors)


@pytest.mark.parametrize("value", [["QUEUES"], "QUEUES", 5, True, [("QUEUES", ["default"])]])
def test_setting_that_is_not_a_dict_is_e001_and_the_defaults_apply(value):
    """Every check runs (none crashes on it) with the defaults, and E001 says why."""
    with override_settings(SCHEDULER_APP=value):
        errors = django_checks.run_checks(tags=[django_checks.Tags.compatibility])
        queues = app_settings.QUEUES

    errors = [error for error in errors if error.id == "scheduler_app.E001"]
    assert len(errors) == 1
    assert errors[0].msg == "SCHEDULER_APP must be a dict, not %s." % type(value).__name__
    assert queues == DEFAULTS["QUEUES"]


@pytest.mark.parametrize(
    "queues", [[], (), "default", ["default", ""], ["default", 3], ["q" * 101]]
)
def test_queues_not_a_non_empty_list_of_names_is_e002(queues):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(QUEUES=queues)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E002"]
    assert errors[0].msg == (
        "SCHEDULER_APP['QUEUES'] must be a non-empty list of queue names "
        "(strings of 1 to 100 characters)."
    )


@pytest.mark.parametrize("value", [-1, 0, -0.5, "1", True, None, math.nan, math.inf])
def test_poll_interval_not_positive_is_e003(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(POLL_INTERVAL=value)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E003"]
    assert errors[0].msg == "SCHEDULER_APP['POLL_INTERVAL'] must be a positive number."


def test_each_bad_positive_number_gets_its_own_e003():
    with override_settings(
        SCHEDULER_APP=scheduler_app_settings(LEASE_SECONDS=0, SHUTDOWN_TIMEOUT=-3)
    ):
        errors = check_settings()

    assert [(error.id, error.msg) for error in errors] == [
        ("scheduler_app.E003", "SCHEDULER_APP['LEASE_SECONDS'] must be a positive number."),
        ("scheduler_app.E003", "SCHEDULER_APP['SHUTDOWN_TIMEOUT'] must be a positive number."),
    ]


@pytest.mark.parametrize("value", [0, -2, 1.5, "4", True])
def test_concurrency_not_a_positive_integer_is_e004(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(CONCURRENCY=value)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E004"]
    assert errors[0].msg == "SCHEDULER_APP['CONCURRENCY'] must be a positive integer."


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_lease_that_is_not_a_finite_number_is_e003(value):
    """An infinite lease would never expire: a killed worker's jobs would never run again."""
    with override_settings(SCHEDULER_APP=scheduler_app_settings(LEASE_SECONDS=value)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E003"]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_an_undo_safety_margin_that_is_not_a_finite_number_is_e005(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(UNDO_SAFETY_MARGIN=value)):
        errors = check_settings()

    assert ids(errors) == ["scheduler_app.E005"]


def test_negative_undo_safety_margin_is_e005_and_zero_is_allowed():
    with override_settings(SCHEDULER_APP=scheduler_app_settings(UNDO_SAFETY_MARGIN=-1)):
        errors = check_settings()
    with override_settings(SCHEDULER_APP=scheduler_app_settings(UNDO_SAFETY_MARGIN=0)):
        assert check_settings() == []

    assert ids(errors) == ["scheduler_app.E005"]
    assert errors[0].msg == "SCHEDULER_APP['UNDO_SAFETY_MARGIN'] must be a number >= 0."


@pytest.fixture
def stray_task():
    """Register a task on a queue the settings do not list; remove it afterwards."""

    @registry.task(name="tests.checks.stray", queue="nowhere")
    def stray(ctx):
        return None

    try:
        yield stray
    finally:
        registry._registry.pop("tests.checks.stray", None)


def test_task_on_an_unlisted_queue_is_e010(stray_task):
    errors = check_task_queues()

    assert ids(errors) == ["scheduler_app.E010"]
    assert errors[0].msg == (
        "Task 'tests.checks.stray' uses queue 'nowhere', "
        "which SCHEDULER_APP['QUEUES'] does not list."
    )


def test_listing_the_queue_clears_e010(stray_task):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(QUEUES=["default", "nowhere"])):
        assert check_task_queues() == []


def test_e010_names_every_task_whose_queue_was_removed():
    with override_settings(SCHEDULER_APP=scheduler_app_settings(QUEUES=["emails"])):
        errors = check_task_queues()

    on_default = sorted(
        name for name, spec in registry.all_tasks().items() if spec.queue != "emails"
    )
    assert {"tests.noop", "tests.versioned"} <= set(on_default)
    assert ids(errors) == ["scheduler_app.E010"] * len(on_default)
    assert [error.msg for error in errors] == [
        "Task %r uses queue %r, which SCHEDULER_APP['QUEUES'] does not list."
        % (name, registry.get_task(name).queue)
        for name in on_default
    ]
    assert (
        "Task 'tests.noop' uses queue 'default', which SCHEDULER_APP['QUEUES'] does not list."
        in [error.msg for error in errors]
    )


@pytest.fixture
def transaction_pooled(monkeypatch):
    """Declare the default database behind a transaction pooler, as Django documents it."""
    monkeypatch.setitem(settings.DATABASES["default"], "DISABLE_SERVER_SIDE_CURSORS", True)


def test_transaction_pooling_without_a_listen_database_is_e080(transaction_pooled):
    from scheduler_app.checks.database import check_transaction_pooling

    errors = check_transaction_pooling()

    assert ids(errors) == ["scheduler_app.E080"]
    assert errors[0].msg == (
        "DATABASES['default'] goes through a transaction-pooling connection pooler "
        "(DISABLE_SERVER_SIDE_CURSORS = True), where runworker cannot LISTEN for new jobs, "
        "and SCHEDULER_APP['LISTEN_DATABASE'] is None (LISTEN on that connection)."
    )
    assert errors[0].hint == (
        "Set SCHEDULER_APP['LISTEN_DATABASE'] to the alias of a DATABASES entry that "
        "connects to the same database directly or through session pooling "
        "(pool_mode=session), without DISABLE_SERVER_SIDE_CURSORS; or to '' to poll every "
        "POLL_INTERVAL instead of listening. See docs/performance.md."
    )


def test_transaction_pooling_with_a_direct_listen_database_or_polling_passes(
    transaction_pooled, monkeypatch
):
    from scheduler_app.checks.database import check_transaction_pooling

    monkeypatch.setitem(settings.DATABASES, "direct", {**settings.DATABASES["default"]})
    del settings.DATABASES["direct"]["DISABLE_SERVER_SIDE_CURSORS"]
    for listen in ("direct", ""):
        with override_settings(SCHEDULER_APP=scheduler_app_settings(LISTEN_DATABASE=listen)):
            assert check_transaction_pooling() == []


def test_a_listen_database_behind_transaction_pooling_too_is_e080(transaction_pooled, monkeypatch):
    from scheduler_app.checks.database import check_transaction_pooling

    monkeypatch.setitem(settings.DATABASES, "pooled", {**settings.DATABASES["default"]})
    with override_settings(SCHEDULER_APP=scheduler_app_settings(LISTEN_DATABASE="pooled")):
        errors = check_transaction_pooling()

    assert ids(errors) == ["scheduler_app.E080"]
    assert errors[0].msg == (
        "SCHEDULER_APP['LISTEN_DATABASE'] is 'pooled', whose DATABASES entry goes through a "
        "transaction-pooling connection pooler too (DISABLE_SERVER_SIDE_CURSORS = True), "
        "where runworker cannot LISTEN for new jobs."
    )


def test_a_direct_connection_needs_no_listen_database():
    from scheduler_app.checks.database import check_transaction_pooling

    assert check_transaction_pooling() == []


@pytest.mark.parametrize("value", ["off", 0, None])
def test_send_marker_synchronous_commit_not_a_bool_is_e085(value):
    with override_settings(
        SCHEDULER_APP=scheduler_app_settings(SEND_MARKER_SYNCHRONOUS_COMMIT=value)
    ):
        assert ids(check_lane_settings()) == ["scheduler_app.E085"]


@pytest.mark.parametrize(
    "name", ["SEND_LANES", "SEND_CHUNK_SIZE", "RECIPIENT_MAX_ATTEMPTS", "BREAKER_WINDOW"]
)
@pytest.mark.parametrize("value", [0, -1, 2.5, "5", True])
def test_a_send_count_that_is_not_a_positive_integer_is_e004(name, value):
    """0 lanes never send a batch; 0 attempts fail every recipient before its first call."""
    with override_settings(SCHEDULER_APP=scheduler_app_settings(**{name: value})):
        errors = check_settings()

    assert [(error.id, error.msg) for error in errors] == [
        ("scheduler_app.E004", "SCHEDULER_APP[%r] must be a positive integer." % name)
    ]


@pytest.mark.parametrize("value", [0, -5, math.nan, math.inf, "60"])
def test_a_send_claim_that_is_not_a_positive_number_is_e003(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(SEND_CLAIM_SECONDS=value)):
        errors = check_settings()

    assert [(error.id, error.msg) for error in errors] == [
        ("scheduler_app.E003", "SCHEDULER_APP['SEND_CLAIM_SECONDS'] must be a positive number.")
    ]


@pytest.mark.parametrize("value", [0, -0.1, 1.5, math.nan, "0.5", True])
def test_a_breaker_threshold_outside_0_to_1_is_e086(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(BREAKER_THRESHOLD=value)):
        errors = check_lane_settings()

    assert [(error.id, error.msg) for error in errors] == [
        (
            "scheduler_app.E086",
            "SCHEDULER_APP['BREAKER_THRESHOLD'] must be a number above 0 and at most 1 "
            "(the share of failed attempts that pauses a batch).",
        )
    ]


@pytest.mark.parametrize("value", [0.01, 0.5, 1, 1.0])
def test_a_breaker_threshold_in_0_to_1_passes(value):
    with override_settings(SCHEDULER_APP=scheduler_app_settings(BREAKER_THRESHOLD=value)):
        assert check_lane_settings() == []
