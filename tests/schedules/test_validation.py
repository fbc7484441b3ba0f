"""Invalid cron expressions and unknown time zones are refused with clear messages.

In forms (the admin's ModelForm runs the model field validators) and in code
(schedules declared in SCHEDULER_APP['SCHEDULES']: system check
scheduler_app.E020, and sync_declared_schedules() keeps operators' changes).
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.conf import settings
from django.core.checks import Error
from django.forms import modelform_factory
from django.test import override_settings

from scheduler_app.checks.schedules import check_declared_schedules
from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Schedule
from scheduler_app.schedules.declared import declared_schedules, sync_declared_schedules
from tests.schedules.steps import TASK, make_schedule, utc

ScheduleForm = modelform_factory(Schedule, fields="__all__")
VALID = {
    "name": "nightly-report",
    "task_name": TASK,
    "payload": "{}",
    "queue": "",
    "enabled": "on",
    "kind": "cron",
    "cron": "0 3 * * *",
    "timezone": "Europe/London",
    "interval": "",
    "start_at": "",
    "overlap_policy": "skip",
    "misfire_policy": "run_once",
    "misfire_grace": "00:01:00",
    "jitter": "0",
    "next_run_at": "",
}


def declaring(schedules):
    return override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "SCHEDULES": schedules})


@pytest.mark.django_db
def test_a_valid_form_saves():
    form = ScheduleForm(data=VALID)
    assert form.is_valid(), form.errors
    schedule = form.save()
    assert (schedule.cron, schedule.timezone) == ("0 3 * * *", "Europe/London")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cron", "61 * * * *", "Invalid cron expression '61 * * * *': Bad minute."),
        ("cron", "0 25 * * *", "Invalid cron expression '0 25 * * *': Bad hour."),
        (
            "cron",
            "* * *",
            "Invalid cron expression '* * *': "
            "a cron expression has 5 fields (minute hour day month weekday).",
        ),
        (
            "timezone",
            "Mars/Olympus",
            "Unknown time zone 'Mars/Olympus'; use an IANA name such as Europe/London.",
        ),
        (
            "timezone",
            "localtime",
            "Unknown time zone 'localtime'; use an IANA name such as Europe/London.",
        ),
        (
            "timezone",
            "right/Europe/London",
            "Unknown time zone 'right/Europe/London'; use an IANA name such as Europe/London.",
        ),
        (
            "task_name",
            "shop.nope",
            "No task is registered as 'shop.nope'.",
        ),
        (
            # A queue no worker serves: every occurrence failed, the schedule stayed on.
            "queue",
            "nope",
            "Unknown queue 'nope'; SCHEDULER_APP['QUEUES'] lists: default, emails, slow.",
        ),
    ],
)
def test_form_rejects_bad_value_on_its_field_with_a_clear_message(field, value, message):
    form = ScheduleForm(data={**VALID, field: value})
    assert not form.is_valid()
    assert form.errors == {field: [message]}
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_form_rejects_a_kind_without_its_definition():
    form = ScheduleForm(data={**VALID, "kind": "fixed_rate", "interval": ""})
    assert not form.is_valid()
    assert form.errors == {
        "interval": ["A fixed rate or fixed delay schedule needs an interval of at least 1 second."]
    }
    form = ScheduleForm(data={**VALID, "cron": ""})
    assert not form.is_valid()
    assert form.errors == {"cron": ["A cron schedule needs a cron expression."]}


def prefix(name):
    return "SCHEDULER_APP['SCHEDULES'][%r]: " % name


@pytest.mark.parametrize(
    ("definition", "problem"),
    [
        (
            {"task": TASK, "cron": "61 * * * *"},
            "cron: Invalid cron expression '61 * * * *': Bad minute.",
        ),
        (
            {"task": TASK, "cron": "* * *"},
            "cron: Invalid cron expression '* * *': "
            "a cron expression has 5 fields (minute hour day month weekday).",
        ),
        (
            {"task": TASK, "cron": "0 3 * * *", "timezone": "Mars/Olympus"},
            "timezone: Unknown time zone 'Mars/Olympus'; use an IANA name such as Europe/London.",
        ),
        (
            {"task": "shop.nope", "cron": "0 3 * * *"},
            "task_name: No task is registered as 'shop.nope'.",
        ),
        (
            {"task": TASK, "cron": "0 3 * * *", "fixed_rate": 60},
            "give exactly one of cron, fixed_rate and fixed_delay.",
        ),
        ({"task": TASK}, "give exactly one of cron, fixed_rate and fixed_delay."),
        ({"task": TASK, "cron": "0 3 * * *", "timzone": "UTC"}, "unknown key(s) timzone."),
        (
            {"task": TASK, "fixed_delay": 0},
            "interval: A fixed rate or fixed delay schedule needs an interval of at least 1 "
            "second.",
        ),
        (
            # Every millisecond wrote ~800 skipped occurrences a second, for ever.
            {"task": TASK, "fixed_rate": 0.001},
            "interval: A fixed rate or fixed delay schedule needs an interval of at least 1 "
            "second.",
        ),
        ({"task": TASK, "fixed_rate": "5m"}, "fixed_rate must be a number of seconds"),
        (
            {"task": TASK, "fixed_rate": 60, "start_at": "2026-06-01 10:00"},
            "start_at must include a UTC offset",
        ),
    ],
)
def test_declared_schedule_errors_name_the_schedule_in_check_e020(definition, problem):
    with declaring({"ok": {"task": TASK, "cron": "0 3 * * *"}, "nightly-report": definition}):
        errors = check_declared_schedules()
        with pytest.raises(ValidationError) as caught:
            declared_schedules()
    message = prefix("nightly-report") + problem
    assert errors == [Error(message, id="scheduler_app.E020")]
    assert caught.value.message == message


@pytest.mark.parametrize("key", ["jitter", "misfire_grace"])
def test_declared_negative_duration_is_reported_by_check_e020(key):
    with declaring({"nightly-report": {"task": TASK, "cron": "0 3 * * *", key: -5}}):
        errors = check_declared_schedules()
    assert [error.id for error in errors] == ["scheduler_app.E020"]
    assert errors[0].msg.startswith(prefix("nightly-report"))


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("fixed_rate", math.inf, "fixed_rate must be at most 3652 days (315532800 seconds)"),
        ("fixed_rate", 1e300, "fixed_rate must be at most 3652 days (315532800 seconds)"),
        ("fixed_rate", math.nan, "fixed_rate must be a number of seconds, not NaN"),
        ("jitter", math.inf, "jitter must be at most 3652 days (315532800 seconds)"),
        ("misfire_grace", 1e300, "misfire_grace must be at most 3652 days (315532800 seconds)"),
        ("misfire_grace", -math.inf, "misfire_grace must not be negative"),
        (
            "lateness_target",
            math.inf,
            "lateness_target must be at most 3652 days (315532800 seconds)",
        ),
        (
            "lateness_target",
            1e300,
            "lateness_target must be at most 3652 days (315532800 seconds)",
        ),
        (
            "expected_every",
            dt.timedelta(days=3653),
            "expected_every must be at most 3652 days (315532800 seconds)",
        ),
    ],
)
def test_a_declared_duration_too_long_for_a_timedelta_is_e020_not_an_overflow(key, value, problem):
    """inf and 1e300 overflowed timedelta: the check and sync_schedules crashed with it."""
    definition = {"task": TASK, "fixed_rate": 60, key: value}
    with declaring({"nightly-report": definition}):
        errors = check_declared_schedules()
        with pytest.raises(ValidationError) as caught:
            sync_declared_schedules()

    assert errors == [Error(prefix("nightly-report") + problem, id="scheduler_app.E020")]
    assert caught.value.message == prefix("nightly-report") + problem


def test_declared_durations_up_to_the_longest_pass():
    longest = 3652 * 86400
    definition = {"task": TASK, "fixed_rate": longest, "jitter": longest, "misfire_grace": 0}
    with declaring({"rare": {**definition, "lateness_target": longest}}):
        assert check_declared_schedules() == []


@pytest.mark.parametrize("name", [1, None, ("a", "b")])
def test_a_schedule_name_that_is_not_a_string_is_e020(name):
    """1 passed the check, then every sync inserted "1" again (IntegrityError)."""
    with declaring(
        {"ok": {"task": TASK, "cron": "0 3 * * *"}, name: {"task": TASK, "cron": "0 0 * * *"}}
    ):
        errors = check_declared_schedules()
        with pytest.raises(ValidationError) as caught:
            sync_declared_schedules()

    message = "SCHEDULER_APP['SCHEDULES'] names must be strings, not %r." % (name,)
    assert errors == [Error(message, id="scheduler_app.E020")]
    assert caught.value.message == message


def test_a_schedule_on_a_queue_not_in_queues_is_e020():
    """It passed the check and the sync, then every occurrence failed."""
    with declaring({"nightly-report": {"task": TASK, "cron": "0 3 * * *", "queue": "nowhere"}}):
        errors = check_declared_schedules()
        with pytest.raises(ValidationError) as caught:
            sync_declared_schedules()

    message = prefix("nightly-report") + (
        "queue: Unknown queue 'nowhere'; SCHEDULER_APP['QUEUES'] lists: default, emails, slow."
    )
    assert errors == [Error(message, id="scheduler_app.E020")]
    assert caught.value.message == message


def test_a_schedule_on_a_listed_queue_passes():
    with declaring({"nightly-report": {"task": TASK, "cron": "0 3 * * *", "queue": "slow"}}):
        assert check_declared_schedules() == []


def test_valid_declared_schedules_pass_the_check():
    with declaring(
        {
            "nightly-report": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/London"},
            "poll": {"task": TASK, "fixed_delay": 300, "jitter": 30, "overlap": "allow"},
            "rate": {"task": TASK, "fixed_rate": 60, "start_at": "2026-06-01T10:00:00+00:00"},
        }
    ):
        assert check_declared_schedules() == []


@pytest.mark.django_db
def test_sync_creates_and_updates_without_clobbering_an_operators_enabled():
    first = utc(2026, 6, 1, 10, 0)
    with frozen_clock(first) as clock:
        with declaring(
            {
                "nightly-report": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/London"},
                "poll": {"task": TASK, "fixed_delay": 300, "payload": {"feed": "a"}},
                "retired": {"task": TASK, "fixed_rate": 60},
                "paused-at-first": {"task": TASK, "cron": "0 4 * * *", "enabled": False},
            }
        ):
            sync_declared_schedules()
        stored = {s.name: s for s in Schedule.objects.all()}
        assert set(stored) == {"nightly-report", "poll", "retired", "paused-at-first"}
        assert all(s.declared_in_code for s in stored.values())
        assert {n: s.enabled for n, s in stored.items()} == {
            "nightly-report": True,
            "poll": True,
            "retired": True,
            "paused-at-first": False,
        }
        assert (stored["poll"].kind, stored["poll"].interval) == (
            Schedule.Kind.FIXED_DELAY,
            dt.timedelta(seconds=300),
        )

        # The scheduler has run; an operator disabled "poll" in the admin and
        # created a schedule of their own.
        cursor = utc(2026, 6, 2, 2, 0)
        Schedule.objects.update(next_run_at=cursor)
        Schedule.objects.filter(name="poll").update(enabled=False)
        make_schedule("operators-own", cron="*/5 * * * *")

        clock.advance(dt.timedelta(hours=1))
        with declaring(
            {
                # Timing changed: the cursor is reset to follow the new rule.
                "nightly-report": {"task": TASK, "cron": "30 4 * * *", "timezone": "Europe/London"},
                # Only the payload changed; code says enabled, the operator said no.
                "poll": {
                    "task": TASK,
                    "fixed_delay": 300,
                    "payload": {"feed": "b"},
                    "enabled": True,
                },
                "paused-at-first": {"task": TASK, "cron": "0 4 * * *", "enabled": True},
            }
        ):
            sync_declared_schedules()
            sync_declared_schedules()  # idempotent

    stored = {s.name: s for s in Schedule.objects.all()}
    nightly, poll = stored["nightly-report"], stored["poll"]
    assert (nightly.cron, nightly.next_run_at, nightly.enabled) == ("30 4 * * *", None, True)
    assert nightly.updated_at == first + dt.timedelta(hours=1)
    assert (poll.payload, poll.next_run_at, poll.enabled) == ({"feed": "b"}, cursor, False)
    assert stored["paused-at-first"].enabled is False  # "enabled" in code is the initial value only
    # No longer declared: left as it was (pruning is explicit: sync_schedules --prune).
    assert (stored["retired"].enabled, stored["retired"].next_run_at) == (True, cursor)
    assert (stored["operators-own"].enabled, stored["operators-own"].declared_in_code) == (
        True,
        False,
    )
