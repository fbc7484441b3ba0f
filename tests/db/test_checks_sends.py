"""System checks of the bulk-send settings that had none (scheduler_app.E110-E114, and
E003/E004 for the counts and the window): each failed only at send time before."""

from __future__ import annotations

import math

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.sends import check_send_settings
from scheduler_app.checks.settings import check_settings


def with_setting(**changes):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes})


def messages(errors):
    return [(error.id, error.msg) for error in errors]


def test_the_test_settings_pass():
    assert check_send_settings() == []


EMAIL = "scheduler_app.sends.providers.email.DjangoEmailProvider"


@pytest.mark.parametrize(
    ("providers", "message"),
    [
        (
            "email",
            "SCHEDULER_APP['PROVIDERS'] must be a dict of provider name -> dotted path, "
            "not 'email'.",
        ),
        (
            {5: EMAIL},
            "SCHEDULER_APP['PROVIDERS'] must be a dict of provider name -> dotted path, "
            "not {5: %r}." % EMAIL,
        ),
        (
            {"email": "tests.testapp.no_such.Provider"},
            "SCHEDULER_APP['PROVIDERS']['email'] cannot be imported: "
            "No module named 'tests.testapp.no_such'.",
        ),
        (
            {"email": None},
            "SCHEDULER_APP['PROVIDERS']['email'] must be a dotted path, not None.",
        ),
        (
            {"email": "os.sep"},
            "SCHEDULER_APP['PROVIDERS']['email'] ('os.sep') is not a class or callable.",
        ),
    ],
)
def test_a_bad_provider_is_e110(providers, message):
    """A bad path paused every batch after three lane errors."""
    with with_setting(PROVIDERS=providers):
        errors = check_send_settings()

    assert messages(errors) == [("scheduler_app.E110", message)]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            "tests.testapp.no_such.check",
            "cannot be imported: No module named 'tests.testapp.no_such'",
        ),
        ("os.sep", "('os.sep') is not a class or callable"),
        (5, "must be a dotted path, not 5"),
        ("", "must be a dotted path, not ''"),
    ],
)
def test_a_bad_suppression_check_is_e111(value, problem):
    with with_setting(SUPPRESSION_CHECK=value):
        errors = check_send_settings()

    assert messages(errors) == [
        ("scheduler_app.E111", "SCHEDULER_APP['SUPPRESSION_CHECK'] %s." % problem)
    ]


def test_no_suppression_check_passes():
    with with_setting(SUPPRESSION_CHECK=None):
        assert check_send_settings() == []


@pytest.mark.parametrize("value", ["nowhere", None, 5])
def test_a_send_queue_not_in_queues_is_e112(value):
    with with_setting(SEND_QUEUE=value):
        errors = check_send_settings()

    assert messages(errors) == [
        (
            "scheduler_app.E112",
            "SCHEDULER_APP['SEND_QUEUE']: Unknown queue %r; SCHEDULER_APP['QUEUES'] lists: "
            "default, emails, slow." % (value,),
        )
    ]


def test_a_send_queue_in_queues_passes_and_bad_queues_are_left_to_e002():
    with with_setting(SEND_QUEUE="emails"):
        assert check_send_settings() == []
    with with_setting(QUEUES=None):
        assert check_send_settings() == []


def test_a_queue_name_that_is_not_a_string_does_not_crash_the_send_queue_check():
    """E002 reports such a QUEUES; naming the queues in E112's message raised TypeError."""
    with with_setting(QUEUES=["default", 5], SEND_QUEUE="sends"):
        errors = check_send_settings()

    assert messages(errors) == [
        (
            "scheduler_app.E112",
            "SCHEDULER_APP['SEND_QUEUE']: Unknown queue 'sends'; SCHEDULER_APP['QUEUES'] lists: "
            "default, 5.",
        )
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("seed_sent", "must be a list of checklist item names, not 'seed_sent'"),
        (None, "must be a list of checklist item names, not None"),
        (["seed_snt"], "names unknown checklist item 'seed_snt'"),
        (["seed_sent", 5], "names unknown checklist item 5"),
    ],
)
def test_a_checklist_relax_not_a_list_of_known_items_is_e113(value, problem):
    """A string relaxed every item whose name was a substring; a typo relaxed nothing."""
    with with_setting(CHECKLIST_RELAX=value):
        errors = check_send_settings()

    assert messages(errors) == [
        (
            "scheduler_app.E113",
            "SCHEDULER_APP['CHECKLIST_RELAX'] %s; the items are: audience_within_limit, "
            "dry_run_clean, no_other_large_batch, schedule_unambiguous, seed_sent." % problem,
        )
    ]


@pytest.mark.parametrize("value", [[], ("seed_sent", "dry_run_clean")])
def test_a_checklist_relax_of_known_items_passes(value):
    with with_setting(CHECKLIST_RELAX=value):
        assert check_send_settings() == []


@pytest.mark.parametrize("value", [-1, 2.5, "20", True, None])
def test_a_dry_run_short_body_not_an_integer_from_zero_is_e114(value):
    with with_setting(DRY_RUN_SHORT_BODY=value):
        errors = check_send_settings()

    assert messages(errors) == [
        (
            "scheduler_app.E114",
            "SCHEDULER_APP['DRY_RUN_SHORT_BODY'] must be an integer >= 0 (0 flags no body).",
        )
    ]


@pytest.mark.parametrize("name", ["PROGRESS_LOG_EVERY", "LARGE_BATCH"])
@pytest.mark.parametrize("value", [0, -1, 2.5, "100", True, None])
def test_a_send_count_that_is_not_a_positive_integer_is_e004(name, value):
    with with_setting(**{name: value}):
        errors = check_settings()

    assert messages(errors) == [
        ("scheduler_app.E004", "SCHEDULER_APP[%r] must be a positive integer." % name)
    ]


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "3600", None])
def test_a_large_batch_window_that_is_not_a_positive_number_is_e003(value):
    with with_setting(LARGE_BATCH_WINDOW=value):
        errors = check_settings()

    assert messages(errors) == [
        ("scheduler_app.E003", "SCHEDULER_APP['LARGE_BATCH_WINDOW'] must be a positive number.")
    ]
