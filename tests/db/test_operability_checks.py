"""Targets where tasks and schedules are declared, and the operability settings' checks."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.operability import check_operability
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Schedule
from scheduler_app.registry import task
from scheduler_app.schedules.declared import sync_declared_schedules
from scheduler_app.targets import Targets


def with_settings(**changes):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes})


def ids(problems):
    return [problem.id for problem in problems]


def test_the_test_settings_pass_the_operability_checks():
    assert check_operability() == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"ALERT_INTERVAL": 0}, ["scheduler_app.E040"]),
        ({"STALE_SEND_AFTER": "1h"}, ["scheduler_app.E040"]),
        ({"ALERT_INTERVAL": float("nan")}, ["scheduler_app.E040"]),
        ({"ALERT_RESOLVE_AFTER": -1}, ["scheduler_app.E040"]),
        ({"WORKER_LOST_AFTER": float("inf")}, ["scheduler_app.E040"]),
        ({"FAILING_RATE": 1}, ["scheduler_app.E041"]),
        ({"ADMIN_BASE_URL": "ops.example.com"}, ["scheduler_app.E042"]),
        ({"WORKER_LOST_AFTER": 15, "WORKER_HEARTBEAT_INTERVAL": 10}, ["scheduler_app.E043"]),
        ({"ALERT_NOTIFIERS": "scheduler_app.alerts.notifiers.MailAdmins"}, ["scheduler_app.E044"]),
        (
            {"ALERT_NOTIFIERS": ["scheduler_app.alerts.notifiers.Nope"]},
            ["scheduler_app.E044", "scheduler_app.W040"],
        ),
        (
            {"ALERT_NOTIFIERS": [{"class": "scheduler_app.alerts.notifiers.Webhook", "url": "x"}]},
            ["scheduler_app.E044", "scheduler_app.W040"],
        ),
    ],
)
def test_bad_operability_settings_get_their_ids(changes, expected):
    with with_settings(**changes):
        assert ids(check_operability()) == expected


WEBHOOK = "scheduler_app.alerts.notifiers.Webhook"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"class": WEBHOOK, "url": None}, "the webhook url must be a string, not None"),
        ({"class": WEBHOOK, "url": 5}, "the webhook url must be a string, not 5"),
        (
            {"class": WEBHOOK, "url": "ftp://example.com/"},
            "the webhook url must start with http:// or https://",
        ),
        (
            {"class": WEBHOOK, "url": "https://example.com/", "timeout": "abc"},
            "the webhook timeout must be a positive number of seconds, not 'abc'",
        ),
        (
            {"class": WEBHOOK, "url": "https://example.com/", "timeout": -1},
            "the webhook timeout must be a positive number of seconds, not -1",
        ),
        (
            {"class": WEBHOOK, "url": "https://example.com/", "timeout": math.inf},
            "the webhook timeout must be a positive number of seconds, not inf",
        ),
        (
            {"class": WEBHOOK, "url": "https://example.com/", "timeout": True},
            "the webhook timeout must be a positive number of seconds, not True",
        ),
        ("os.path", "TypeError: 'module' object is not callable"),
        (
            "scheduler_app.alerts.notifiers.Notifier",
            "TypeError: Protocols cannot be instantiated",
        ),
        ("builtins.object", "it has no notify() method"),
    ],
)
def test_a_notifier_that_cannot_be_built_or_used_is_e044_naming_the_entry(entry, problem):
    """These crashed the check (AttributeError, TypeError) or passed it and failed at
    delivery."""
    notifiers = ["scheduler_app.alerts.notifiers.MailAdmins", entry]
    with with_settings(ALERT_NOTIFIERS=notifiers):
        problems = check_operability()

    assert [(p.id, p.msg) for p in problems] == [
        (
            "scheduler_app.E044",
            "SCHEDULER_APP['ALERT_NOTIFIERS'] entry %r cannot be built: %s" % (entry, problem),
        )
    ]


def test_a_webhook_with_an_http_url_and_a_positive_timeout_passes():
    entry = {"class": WEBHOOK, "url": "https://example.com/hook", "timeout": 2.5}
    with with_settings(ALERT_NOTIFIERS=[entry]):
        assert check_operability() == []


def test_no_notifier_that_would_deliver_is_a_warning():
    with override_settings(ADMINS=[]):
        problems = check_operability()
    assert ids(problems) == ["scheduler_app.W040"]
    assert problems[0].level == 30
    webhook = {"class": "scheduler_app.alerts.notifiers.Webhook", "url": "https://hooks.example"}
    with override_settings(ADMINS=[]), with_settings(ALERT_NOTIFIERS=[webhook]):
        assert check_operability() == []


def test_task_targets_are_validated_where_the_task_is_declared():
    @task(
        name="tests.ops.targets",
        lateness_target=30,
        expected_every=dt.timedelta(hours=26),
        count_key="rows",
        zero_runs_alert=3,
    )
    def declared(ctx):
        return None

    assert declared.targets == Targets(
        lateness_target=dt.timedelta(seconds=30),
        expected_every=dt.timedelta(hours=26),
        count_key="rows",
        zero_runs_alert=3,
    )
    with pytest.raises(ValidationError, match="zero_runs_alert needs a count_key"):
        task(name="tests.ops.bad_targets", zero_runs_alert=3)(lambda ctx: None)
    with pytest.raises(ValidationError, match="max_runtime must be positive"):
        task(name="tests.ops.bad_targets", max_runtime=0)(lambda ctx: None)
    with pytest.raises(ValidationError, match=r"expected_every must be at most 3652 days"):
        task(name="tests.ops.bad_targets", expected_every=1e300)(lambda ctx: None)
    with pytest.raises(ValidationError, match=r"max_runtime must be at most 3652 days"):
        task(name="tests.ops.bad_targets", max_runtime=math.inf)(lambda ctx: None)


@pytest.mark.django_db
def test_code_owns_the_targets_of_a_declared_schedule_and_a_sync_overwrites_admin_edits():
    declared = {
        "nightly": {
            "task": "tests.noop",
            "cron": "0 3 * * *",
            "expected_every": 26 * 3600,
            "count_key": "processed",
            "zero_runs_alert": 2,
        }
    }
    with with_settings(SCHEDULES=declared):
        sync_declared_schedules()
        Schedule.objects.filter(name="nightly").update(
            expected_every=dt.timedelta(hours=1), zero_runs_alert=9
        )
        sync_declared_schedules()
    stored = Schedule.objects.get(name="nightly")
    assert (stored.expected_every, stored.count_key, stored.zero_runs_alert) == (
        dt.timedelta(hours=26),
        "processed",
        2,
    )
