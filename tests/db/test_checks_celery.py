"""System checks of the Celery executor's settings (E060-E064), which never import Celery."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.celery import check_celery_settings


def celery_errors(**changes):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes}):
        return [(e.id, e.msg) for e in check_celery_settings()]


def test_the_defaults_pass():
    with override_settings(SCHEDULER_APP={"QUEUES": ["default"]}):
        assert check_celery_settings() == []


@pytest.mark.parametrize("value", ["proj", "proj.celery app", "proj..app", 42, ""])
def test_celery_app_must_be_a_dotted_path_e060(value):
    assert celery_errors(CELERY_APP=value) == [
        (
            "scheduler_app.E060",
            "SCHEDULER_APP['CELERY_APP'] must be None or the dotted path to a Celery app "
            "instance, such as 'proj.celery.app', not %r." % (value,),
        )
    ]


def test_a_celery_app_path_that_does_not_import_passes_the_check():
    """The check never imports the app: that would load Celery in every manage.py command."""
    assert celery_errors(CELERY_APP="no_such_module.app") == []


@pytest.mark.parametrize("value", [None, 3, "x" * 101])
def test_queue_prefix_must_be_a_short_string_e061(value):
    assert [e[0] for e in celery_errors(CELERY_QUEUE_PREFIX=value)] == ["scheduler_app.E061"]


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "10"])
def test_max_in_flight_must_be_a_positive_integer_e062(value):
    assert celery_errors(CELERY_MAX_IN_FLIGHT=value) == [
        ("scheduler_app.E062", "SCHEDULER_APP['CELERY_MAX_IN_FLIGHT'] must be a positive integer.")
    ]


@pytest.mark.parametrize(
    "value",
    [0, -5, True, "300", float("nan"), float("inf"), pytest.param(10**400, id="too-big-a-float")],
)
def test_max_broker_wait_must_be_a_positive_number_e063(value):
    assert [e[0] for e in celery_errors(CELERY_MAX_BROKER_WAIT=value)] == ["scheduler_app.E063"]


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8", 10_001])
def test_jobs_per_message_must_be_a_positive_integer_e064(value):
    assert celery_errors(CELERY_JOBS_PER_MESSAGE=value) == [
        (
            "scheduler_app.E064",
            "SCHEDULER_APP['CELERY_JOBS_PER_MESSAGE'] must be an integer from 1 to 10000.",
        )
    ]
